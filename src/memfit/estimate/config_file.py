"""Reading a Hugging Face ``config.json`` from disk: the one capped reader every engine uses."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from memfit.errors import MemfitError

MAX_CONFIG_BYTES = 16 * 1024**2  # 16 MiB (16,777,216 B): real config.json files are a few kB


def read_config_file(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The JSON object in ``path`` (a ``config.json``, or a directory holding one) and the file it came from.

    The one reader of config files for every engine. It refuses, with one MemfitError naming the fix: a
    missing file, a symlink loop, a directory where the file should be, a file over ``MAX_CONFIG_BYTES``
    (checked on the size before reading, and never reading more than the limit plus one byte, so a 2 GB
    file costs nothing), text that is not UTF-8 JSON, JSON nested too deeply for Python's parser, and JSON
    that is not an object.
    """
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        info = p.stat()
    except FileNotFoundError:
        raise MemfitError(f"no config.json at {p}: pass a catalogue name (see `memfit models`), "
                          "a config.json path or a directory holding one") from None
    except OSError as exc:  # a symlink loop, a path through a file, no permission
        raise MemfitError(f"cannot read {p} ({exc.strerror or exc}): pass a config.json file or a "
                          "directory holding one") from None
    if stat.S_ISDIR(info.st_mode):
        raise MemfitError(f"{p} is a directory, not a config file: pass a config.json file or a directory "
                          "holding one")
    too_big = (f"{p} is over {MAX_CONFIG_BYTES:,} B (16 MiB), memfit's limit for a config.json (real ones are "
               "a few kB): pass the model's config.json, not its weights or a data file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise MemfitError(too_big)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # a pipe or /proc file reports size 0: cap the read itself
    except OSError as exc:
        raise MemfitError(f"cannot read {p} ({exc.strerror or exc}): pass a readable config.json") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise MemfitError(too_big)
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, or an integer of over 4,300 digits
        raise MemfitError(f"{p} is not valid JSON ({exc}): fix the file or pass another config") from None
    except RecursionError:
        raise MemfitError(f"{p} nests its JSON deeper than Python's parser allows; a Hugging Face config is "
                          "a flat object: pass the model's config.json") from None
    if not isinstance(config, dict):
        raise MemfitError(f"{p} must hold a JSON object (a Hugging Face config), not {type(config).__name__}")
    return config, p
