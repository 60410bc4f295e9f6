"""The bundled catalogue of popular models: each entry is the model's own ``config.json`` facts and the
model card they were copied from (``catalogue.json`` beside this module)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.shape import ModelShape, read_config_file


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogueEntry:
    """One bundled model: its name, the HF config dict and the model card it came from."""

    name: str
    source: str
    config: dict[str, Any]

    @property
    def shape(self) -> ModelShape:
        return ModelShape.from_hf_config(self.config, name=self.name)


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


def resolve_model(model: str) -> ModelShape:
    """A catalogue name, a config.json path or a directory with one, as a ModelShape."""
    p = Path(model)
    if p.suffix == ".json" or p.is_dir() or p.exists() or "/" in model or model.startswith("."):
        return ModelShape.from_file(p)
    return lookup(model).shape


def resolve_config(model: str) -> dict[str, Any]:
    """The raw HF config dict for a catalogue name or a config path (for engines that build the real model)."""
    p = Path(model)
    if p.suffix == ".json" or p.is_dir() or p.exists() or "/" in model or model.startswith("."):
        config, file = read_config_file(p)
        ModelShape.from_hf_config(config, name=file.stem)  # validates, with the same messages
        return config
    return dict(lookup(model).config)
