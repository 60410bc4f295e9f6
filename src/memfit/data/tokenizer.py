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

Special tokens: one rule for a directory and for the files in it
------------------------------------------------------------------

A fine-tuning run ends every text and prompt/completion example with EOS (TRL's ``SFTTrainer`` appends
``tokenizer.eos_token``), so the model learns to stop. Which token that is, memfit reads from the first of:

1. ``--eos TOKEN`` / ``--no-eos`` (``eos=`` here): what the user says;
2. ``tokenizer_config.json`` (``eos_token``) when the directory has one, **also when the path is the
   ``tokenizer.json`` inside that directory** (then the directory is loaded: a bare ``tokenizer.json``
   carries no ``eos_token``, so Qwen3's first 50 GSM8K train examples came to 9,400 tokens from the file
   and 9,450 from its directory, one ``<|im_end|>`` each);
3. the tokenizer's post-processor (``tokenizer.json``'s ``post_processor``): a ``TemplateProcessing`` that
   puts a special token after the sequence makes that token the EOS (the tokenizer adds it itself);
4. the SentencePiece model's own ``eos`` piece (a bare ``tokenizer.model``);
5. otherwise none: nothing is appended, and the report says so and names the vocabulary's special tokens
   (GPT-NeoX's bare ``tokenizer.json`` has a ``ByteLevel`` post-processor and no config: pass
   ``--eos '<|endoftext|>'`` to append the token its model card's config names).

The rule chosen is a :class:`SpecialTokens` on the loaded tokenizer (:func:`special_tokens`), and the
lengths and pack reports print it. BOS is whatever the tokenizer itself puts first
(``add_special_tokens=True``), read off a probe encoding rather than from settings.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfit.errors import MemfitError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["SpecialTokens", "load_tokenizer", "special_tokens", "tokenizer_name"]

_ATTR = "memfit_special_tokens"  # where load_tokenizer leaves the rule on the tokenizer object
_PROBE = "memfit probe"


@dataclass(frozen=True, kw_only=True, slots=True)
class SpecialTokens:
    """The special tokens a text or prompt/completion example gets, and the rule they came from.

    ``source`` is ``"--eos"``, ``"--no-eos"``, ``"tokenizer_config.json"``, ``"post-processor"``,
    ``"SentencePiece model"``, ``"tokenizer object"`` (a tokenizer loaded elsewhere: its ``eos_token``) or
    ``"none"``. ``eos`` is the token appended at the end (``None``: nothing appended); ``bos`` the token the
    tokenizer puts first by itself. ``candidates`` are the vocabulary's special tokens, named when no EOS
    was found so the report can say what ``--eos`` could be. Chats end as their template says.
    """

    source: str
    eos: str | None
    eos_id: int | None
    bos: str | None
    candidates: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for reports, e.g. ``EOS <|im_end|> appended (from tokenizer_config.json); no BOS``."""
        bos = f"BOS {self.bos}" if self.bos else "no BOS"
        if self.eos is not None:
            return f"EOS {self.eos} appended (from {self.source}); {bos}"
        if self.source == "--no-eos":
            return f"no EOS appended (--no-eos); {bos}"
        hint = f" (its special tokens: {', '.join(self.candidates[:4])})" if self.candidates else ""
        where = "tokenizer_config.json names no eos_token" if self.source == "tokenizer_config.json" else \
            "the tokenizer names no EOS (no tokenizer_config.json, and its post-processor adds none)"
        return f"no EOS appended: {where}; pass --eos TOKEN if training appends one{hint}; {bos}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "eos": self.eos, "eos_id": self.eos_id, "bos": self.bos,
                "candidates": list(self.candidates)}


def special_tokens(tok: PreTrainedTokenizerBase) -> SpecialTokens:
    """The rule :func:`load_tokenizer` chose for ``tok``; for a tokenizer loaded elsewhere, its own ``eos_token``."""
    rule = getattr(tok, _ATTR, None)
    if isinstance(rule, SpecialTokens):
        return rule
    eos = getattr(tok, "eos_token", None)
    eos_id = getattr(tok, "eos_token_id", None)
    return SpecialTokens(source="tokenizer object", eos=str(eos) if eos else None,
                         eos_id=eos_id if eos else None, bos=_probe_affixes(tok)[0])


def load_tokenizer(path: str | Path, *, eos: str | bool | None = None) -> PreTrainedTokenizerBase:
    """Load a tokenizer from a directory, a ``tokenizer.json`` or a SentencePiece ``.model``, offline.

    ``eos``: ``None`` finds the EOS by the module docstring's rule; a string names the token to append
    (``--eos``; it must be in the vocabulary); ``False`` appends none (``--no-eos``). The rule used is
    :func:`special_tokens` of the result.
    """
    p = Path(path)
    if not p.exists():
        raise MemfitError(f"no tokenizer at {p}: pass a tokenizer directory, a tokenizer.json or a "
                          "SentencePiece .model file (nothing is downloaded)")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    if importlib.util.find_spec("torch") is None:  # the data extra alone: the tokenizer needs no torch, so
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # no "PyTorch was not found" notice
    try:
        import transformers
    except ImportError as exc:
        raise MemfitError("loading a tokenizer needs transformers: pip install 'memfit[data]'") from exc
    transformers.utils.logging.set_verbosity_error()
    try:
        if p.is_dir():
            tok, source = _from_directory(p)
        elif p.suffix == ".json":
            if p.name == "tokenizer.json" and (p.parent / "tokenizer_config.json").is_file():
                tok, source = _from_directory(p.parent)  # the same tokenizer, with the settings beside it
            else:
                tok, source = transformers.PreTrainedTokenizerFast(tokenizer_file=str(p)), "post-processor"
        elif p.suffix == ".model":
            tok, source = _from_sentencepiece_file(p), "SentencePiece model"
        else:
            raise MemfitError(f"cannot tell what kind of tokenizer {p} is: pass a directory, a tokenizer.json "
                              "or a SentencePiece .model")
    except MemfitError:
        raise
    except Exception as exc:  # transformers raises many types for an unreadable tokenizer
        why = " ".join(str(exc).split())  # transformers' messages run over several lines: one line here
        why = why if len(why) <= 300 else why[:300].rsplit(" ", 1)[0] + " [...]"
        raise MemfitError(f"cannot load the tokenizer at {p} ({type(exc).__name__}: {why})",
                          hint="pass a tokenizer directory with a valid tokenizer.json (or tokenizer.model), a "
                          "tokenizer.json, or a SentencePiece .model") from exc
    if not getattr(tok, "is_fast", False):
        raise MemfitError(f"the tokenizer at {p} loaded as a slow (Python) tokenizer; memfit needs a fast one "
                          "(a tokenizer.json, or a SentencePiece model it can convert)")
    tok.name_or_path = str(p)
    setattr(tok, _ATTR, _rule(tok, source, eos))
    return tok


def tokenizer_name(tok: PreTrainedTokenizerBase) -> str:
    """A short name for reports: the last path component the tokenizer was loaded from."""
    name = str(getattr(tok, "name_or_path", "") or "tokenizer")
    path = Path(name)
    return path.parent.name if path.suffix in (".json", ".model") else path.name


def _from_directory(p: Path) -> tuple[PreTrainedTokenizerBase, str]:
    """The tokenizer of a directory, and where its special tokens are read from."""
    from transformers import AutoTokenizer

    has_config = (p / "tokenizer_config.json").exists()
    has_json = (p / "tokenizer.json").exists()
    spm = p / "tokenizer.model"
    if not has_config and not has_json and spm.exists():
        return _from_sentencepiece_dir(p, spm), "SentencePiece model"
    if not has_config and not has_json:
        raise MemfitError(f"{p} holds no tokenizer.json, tokenizer_config.json or tokenizer.model")
    tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=False)
    return tok, "tokenizer_config.json" if has_config else "post-processor"


def _probe_affixes(tok: PreTrainedTokenizerBase) -> tuple[str | None, str | None]:
    """The special tokens the tokenizer itself puts before and after a text (``add_special_tokens=True``)."""
    try:
        bare = list(tok(_PROBE, add_special_tokens=False)["input_ids"])
        full = list(tok(_PROBE, add_special_tokens=True)["input_ids"])
    except Exception:  # a tokenizer that cannot encode the probe: nothing learnt
        return None, None
    k = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), None)
    if k is None or not bare:
        return None, None
    before, after = full[:k], full[k + len(bare):]
    bos = str(tok.convert_ids_to_tokens(before[0])) if before else None
    eos = str(tok.convert_ids_to_tokens(after[-1])) if after else None
    return bos, eos


def _special_candidates(tok: PreTrainedTokenizerBase) -> tuple[str, ...]:
    decoder = getattr(tok, "added_tokens_decoder", {}) or {}
    return tuple(str(t.content) for _, t in sorted(decoder.items()) if getattr(t, "special", False))


def _token_id(tok: PreTrainedTokenizerBase, token: str) -> int | None:
    vocab = tok.get_vocab()
    return int(vocab[token]) if token in vocab else None


def _rule(tok: PreTrainedTokenizerBase, source: str, eos: str | bool | None) -> SpecialTokens:
    """Apply the module docstring's rule: the explicit flag, else what ``source`` says."""
    bos, appended = _probe_affixes(tok)
    if eos is False:
        return SpecialTokens(source="--no-eos", eos=None, eos_id=None, bos=bos)
    if isinstance(eos, str):
        eos_id = _token_id(tok, eos)
        if eos_id is None:
            names = ", ".join(_special_candidates(tok)[:8]) or "none"
            raise MemfitError(f"--eos {eos!r} is not a token of this tokenizer's vocabulary (its special tokens: "
                              f"{names}): name one of them, or pass --no-eos")
        return SpecialTokens(source="--eos", eos=eos, eos_id=eos_id, bos=bos)
    if eos is not None:
        raise MemfitError(f"eos must be a token, False or None, not {eos!r}")
    if source in ("tokenizer_config.json", "SentencePiece model"):
        token = getattr(tok, "eos_token", None)
        if token:
            return SpecialTokens(source=source, eos=str(token), eos_id=_token_id(tok, str(token)), bos=bos)
    elif appended is not None:  # post-processor: the template ends every sequence with this token
        return SpecialTokens(source="post-processor", eos=appended, eos_id=_token_id(tok, appended), bos=bos)
    return SpecialTokens(source=source if source == "tokenizer_config.json" else "none", eos=None, eos_id=None,
                         bos=bos, candidates=_special_candidates(tok))


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
