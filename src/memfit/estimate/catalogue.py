"""The bundled catalogue of popular models: each entry is the model's own ``config.json`` facts and the
model card they were copied from (``catalogue.json`` beside this module)."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate import hub
from memfit.estimate.config_file import read_config_file
from memfit.estimate.shape import ModelShape


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogueEntry:
    """One bundled model: its name, the HF config dict and the model card it came from."""

    name: str
    source: str
    config: dict[str, Any]

    @property
    def shape(self) -> ModelShape:
        return ModelShape.from_hf_config(self.config, name=self.name)

    @property
    def repo_id(self) -> str | None:
        """The Hub repo the config was copied from (``meta-llama/Llama-3.1-8B``), read from ``source``."""
        m = re.match(r"https://huggingface\.co/([^/\s]+/[^/\s]+)", self.source)
        return m.group(1) if m else None


@cache
def catalogue() -> tuple[CatalogueEntry, ...]:
    """All bundled entries, in file order."""
    text = resources.files("memfit.estimate").joinpath("catalogue.json").read_text(encoding="utf-8")
    return tuple(CatalogueEntry(name=e["name"], source=e["source"], config=e["config"]) for e in json.loads(text))


def lookup(name: str) -> CatalogueEntry:
    """Find a catalogue entry by name, case-insensitively; an unknown name suggests close matches."""
    key = name.strip().lower()
    for entry in catalogue():
        if entry.name.lower() == key:
            return entry
    names = [e.name for e in catalogue()]
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise MemfitError(f"unknown model {name!r}: {hint}`memfit models` lists the catalogue; "
                      "a config.json path or a directory holding one also works")


def by_repo(repo_id: str) -> CatalogueEntry | None:
    """The catalogue entry copied from Hub repo ``repo_id`` (case-insensitive), if any."""
    key = repo_id.lower()
    return next((e for e in catalogue() if e.repo_id and e.repo_id.lower() == key), None)


def _path_like(model: str) -> bool:
    p = Path(model)
    return p.suffix == ".json" or p.is_dir() or p.exists() or "/" in model or model.startswith(".")


def hub_config_file(model: str) -> Path | CatalogueEntry:
    """A Hub id's config: the cached snapshot, else the catalogue entry of that repo, else config.json
    downloaded (:mod:`memfit.estimate.hub`)."""
    cached = hub.cached_config(model)
    if cached is not None:
        return cached
    entry = by_repo(model)
    if entry is not None:
        return entry
    return hub.download_config(model)


def resolve_model(model: str) -> ModelShape:
    """A catalogue name, a config.json path or a directory with one, or a Hub id (``org/name``), as a
    ModelShape."""
    if hub.is_hub_id(model):
        found = hub_config_file(model)
        if isinstance(found, CatalogueEntry):
            return ModelShape.from_hf_config(found.config, name=model)
        return ModelShape.from_hf_config(_read_config(found), name=model)
    p = Path(model)
    if _path_like(model):
        return ModelShape.from_file(p)
    return lookup(model).shape


def resolve_config(model: str) -> dict[str, Any]:
    """The raw HF config dict for a catalogue name, a config path or a Hub id (for engines that build the real
    model)."""
    if hub.is_hub_id(model):
        found = hub_config_file(model)
        if isinstance(found, CatalogueEntry):
            return dict(found.config)
        cached = _read_config(found)
        ModelShape.from_hf_config(cached, name=model)  # validates, with the same messages
        return cached
    p = Path(model)
    if _path_like(model):
        config, file = read_config_file(p)
        ModelShape.from_hf_config(config, name=file.stem)  # validates, with the same messages
        return config
    return dict(lookup(model).config)


def _read_config(path: Path) -> dict[str, Any]:
    """A config.json from the Hugging Face cache, through the one capped reader (:func:`read_config_file`)."""
    try:
        config, _ = read_config_file(path)
    except MemfitError as exc:
        raise MemfitError(f"{exc} (a file in the Hugging Face cache: delete it from the cache and fetch it "
                          "again)") from None
    return config
