"""Presenting: rich tables and JSON for the data objects the other layers compute."""

from __future__ import annotations

import json
import sys
from typing import Any

from memfit.report.consoles import console, err_console

__all__ = ["console", "err_console", "json_default", "print_config_import", "print_json"]


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (plain, so it pipes into jq)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=json_default) + "\n")


def json_default(obj: Any) -> Any:
    """``json.dumps``'s ``default``: an object's ``to_dict()``, a tuple or set as a list."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def print_config_import(config_import: Any) -> None:
    """The ``--config`` import table and the spec it gave (nothing without ``--config``)."""
    if config_import is None:
        return
    from memfit.report.configs import config_import_notes, config_import_table, spec_line

    console.print(config_import_table(config_import))
    for line in config_import_notes(config_import):
        console.print(line, highlight=False, markup=False)
    console.print(f"run from the config: {spec_line(config_import)}", highlight=False, markup=False)
