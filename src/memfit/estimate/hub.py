"""Hugging Face Hub ids (``meta-llama/Llama-3.1-8B``) resolved to a ``config.json`` on this machine.

In order: the local Hugging Face cache, without the network (the snapshot that ``refs/main`` names, laid
out as huggingface_hub 2.4.0 lays it out: ``$HF_HUB_CACHE`` -- else ``$HUGGINGFACE_HUB_CACHE``, else
``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub`` -- then
``models--{org}--{name}/snapshots/{commit}/config.json``; ``huggingface_hub/constants.py:155-194``); then
memfit's catalogue, whose entries name the Hub repo their config was copied from; then, unless
``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set, ``config.json`` alone downloaded with
``huggingface_hub.hf_hub_download`` -- never the weights. Pure Python: huggingface_hub is imported only
for that download.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memfit.errors import MemfitError

HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
TRUE_VALUES = {"1", "ON", "YES", "TRUE"}  # huggingface_hub constants.ENV_VARS_TRUE_VALUES
COMMIT = re.compile(r"[0-9a-f]{40}")


def is_hub_id(text: str) -> bool:
    """``org/name`` that is not a path on this machine and not a JSON file name.

    >>> is_hub_id("meta-llama/Llama-3.1-8B"), is_hub_id("./models/x"), is_hub_id("a/b/config.json")
    (True, False, False)
    """
    return bool(HUB_ID.fullmatch(text)) and not text.endswith(".json") and not Path(text).exists()


def hub_cache() -> Path:
    """The hub cache folder, as huggingface_hub 2.4.0 computes it (module docstring)."""
    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(os.path.expandvars(cache)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def offline() -> bool:
    """``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to a true value."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in TRUE_VALUES


def cached_config(repo_id: str, revision: str = "main") -> Path | None:
    """``config.json`` of the cached snapshot ``revision`` names (a branch in ``refs/`` or a commit), or None."""
    org, name = repo_id.split("/", 1)
    folder = hub_cache() / f"models--{org}--{name}"
    if not folder.is_dir():
        return None
    commit = revision
    ref = folder / "refs" / revision
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8").strip()
    elif not COMMIT.fullmatch(revision):
        return None
    config = folder / "snapshots" / commit / "config.json"
    return config if config.is_file() else None


def download_config(repo_id: str) -> Path:
    """Fetch ``config.json`` only (never weights) into the cache; a MemfitError when that cannot happen."""
    where = hub_cache() / f"models--{repo_id.replace('/', '--')}"
    if offline():
        raise MemfitError(f"{repo_id} is not in the local Hugging Face cache ({where} has no snapshot for refs/main) "
                          "and HF_HUB_OFFLINE is set: download its config.json (hf download "
                          f"{repo_id} config.json), or pass a config.json path or a catalogue name (memfit models)")
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise MemfitError(f"{repo_id} is not in the local Hugging Face cache and huggingface_hub is not installed "
                          "to fetch its config.json: pip install huggingface_hub, or pass a config.json path") from None
    try:
        return Path(hf_hub_download(repo_id=repo_id, filename="config.json"))
    except Exception as exc:  # network errors, a gated or missing repo: one line, not a traceback
        raise MemfitError(f"cannot fetch {repo_id}/config.json from the Hugging Face Hub ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'no message'}); pass a config.json path, "
                          "log in for a gated model (hf auth login), or set HF_HUB_OFFLINE=1 to stay offline") from exc
