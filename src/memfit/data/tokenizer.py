"""Loading the real tokenizer, offline, with no remote code.

=============================  ==========================================================================
``path``                       loaded with
=============================  ==========================================================================
a directory                    ``AutoTokenizer.from_pretrained(dir, local_files_only=True)``
a ``tokenizer.json``           ``PreTrainedTokenizerFast(tokenizer_file=...)``
a SentencePiece ``.model``     the same generic conversion as a directory holding only ``tokenizer.model``
                               (the ``.model`` is linked into a temporary directory)
=============================  ==========================================================================

The SentencePiece trap: in transformers 5, ``LlamaTokenizer(vocab_file=...)`` silently builds a
3-token vocabulary, and ``LlamaTokenizer.from_pretrained`` on a bare ``tokenizer.model`` splits runs of
spaces differently from SentencePiece itself. The generic conversion that ``AutoTokenizer`` applies to a
directory holding only ``tokenizer.model`` reproduces ``sentencepiece.SentencePieceProcessor.encode``
token for token (tested on Llama 2's 32,000-piece model), but it does not know that Llama-family
tokenizers put BOS before every sequence. A bare SentencePiece model carries no add-BOS setting, so
memfit adds the model's BOS piece when the model defines one (``trainer_spec.bos_id >= 0``), as the
Llama, Mistral and Gemma tokenizers do. A directory with a ``tokenizer_config.json`` says for itself.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from memfit.errors import MemfitError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["load_tokenizer", "tokenizer_name"]


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load a tokenizer from a directory, a ``tokenizer.json`` or a SentencePiece ``.model``, offline."""
    p = Path(path)
    if not p.exists():
        raise MemfitError(f"no tokenizer at {p}: pass a tokenizer directory, a tokenizer.json or a "
                          "SentencePiece .model file (nothing is downloaded)")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    try:
        import transformers
    except ImportError as exc:
        raise MemfitError("loading a tokenizer needs transformers: pip install 'memfit[torch]'") from exc
    transformers.utils.logging.set_verbosity_error()
    try:
        if p.is_dir():
            tok = _from_directory(p)
        elif p.suffix == ".json":
            tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(p))
        elif p.suffix == ".model":
            tok = _from_sentencepiece_file(p)
        else:
            raise MemfitError(f"cannot tell what kind of tokenizer {p} is: pass a directory, a tokenizer.json "
                              "or a SentencePiece .model")
    except MemfitError:
        raise
    except Exception as exc:  # transformers raises many types for an unreadable tokenizer
        raise MemfitError(f"cannot load the tokenizer at {p}: {type(exc).__name__}: {exc}") from exc
    if not getattr(tok, "is_fast", False):
        raise MemfitError(f"the tokenizer at {p} loaded as a slow (Python) tokenizer; memfit needs a fast one "
                          "(a tokenizer.json, or a SentencePiece model it can convert)")
    tok.name_or_path = str(p)
    return tok


def tokenizer_name(tok: PreTrainedTokenizerBase) -> str:
    """A short name for reports: the last path component the tokenizer was loaded from."""
    name = str(getattr(tok, "name_or_path", "") or "tokenizer")
    path = Path(name)
    return path.parent.name if path.suffix in (".json", ".model") else path.name


def _from_directory(p: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    has_config = (p / "tokenizer_config.json").exists()
    has_json = (p / "tokenizer.json").exists()
    spm = p / "tokenizer.model"
    if not has_config and not has_json and spm.exists():
        return _from_sentencepiece_dir(p, spm)
    if not has_config and not has_json:
        raise MemfitError(f"{p} holds no tokenizer.json, tokenizer_config.json or tokenizer.model")
    return AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=False)


def _from_sentencepiece_file(p: Path) -> PreTrainedTokenizerBase:
    with tempfile.TemporaryDirectory(prefix="memfit-spm-") as tmp:
        link = Path(tmp) / "tokenizer.model"
        try:
            os.symlink(p.resolve(), link)
        except OSError:  # no symlinks (some filesystems): copy
            import shutil

            shutil.copyfile(p, link)
        return _from_sentencepiece_dir(Path(tmp), p)


def _from_sentencepiece_dir(directory: Path, spm_file: Path) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    add_bos = _spm_bos_id(spm_file) >= 0
    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True, trust_remote_code=False,
                                        add_bos_token=add_bos)
    if len(tok) < 100:
        raise MemfitError(f"the SentencePiece model {spm_file} loaded with only {len(tok)} tokens; "
                          "pass the directory of a complete tokenizer instead")
    return tok


def _spm_bos_id(spm_file: Path) -> int:
    """The BOS id the SentencePiece model defines (-1 when none), read with sentencepiece itself."""
    try:
        import sentencepiece
    except ImportError as exc:
        raise MemfitError("reading a SentencePiece model needs sentencepiece: pip install 'memfit[data]'") from exc
    try:
        proc = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    except Exception as exc:  # sentencepiece raises RuntimeError/OSError for a bad file
        raise MemfitError(f"{spm_file} is not a SentencePiece model: {exc}") from exc
    return int(proc.bos_id())
