"""One page per command, chosen from the JSON's keys (any command's ``--json`` output renders)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memfit.errors import MemfitError

COMMANDS = ("estimate", "trace", "measure", "fit", "lengths", "lab")


def detect_command(data: object) -> str:
    """Which command's ``--json`` this is, from its keys.

    >>> detect_command({"engine": "trace", "peak_bytes": 1})
    'trace'
    >>> detect_command({"percentiles": {}, "padding_waste": {}})
    'lengths'
    """
    if not isinstance(data, Mapping):
        raise MemfitError(f"the JSON is a {type(data).__name__}, not an object: pass the output of `memfit "
                          f"{{{','.join(COMMANDS)}}} --json`")
    keys = set(data)
    if data.get("lab") is True and "reps" in keys:
        return "lab"
    if data.get("engine") == "trace" or {"per_module", "saved_for_backward"} <= keys:
        return "trace"
    if {"runs", "checkpointing_trade"} <= keys:
        return "measure"
    if {"fits_initially", "steps"} <= keys:
        return "fit"
    if {"percentiles", "padding_waste"} <= keys:
        return "lengths"
    if {"components", "moments", "peak_bytes"} <= keys:
        return "estimate"
    if data.get("mode") == "rule-of-thumb":
        raise MemfitError("this is `memfit estimate --rule-of-thumb` output (one figure): run `memfit estimate "
                          "MODEL --json` without --rule-of-thumb for a report")
    shown = ", ".join(sorted(map(str, keys))[:8]) or "none"
    raise MemfitError(f"this JSON is not the --json output of memfit {', '.join(COMMANDS)} (its keys: {shown}): "
                      "pass the output of one of them")


def _renderers() -> dict[str, Callable[[Mapping[str, Any], str | None], str]]:
    from memfit.report.html.pages.estimate import estimate_page
    from memfit.report.html.pages.fit import fit_page
    from memfit.report.html.pages.lab import lab_page
    from memfit.report.html.pages.lengths import lengths_page
    from memfit.report.html.pages.measure import measure_page
    from memfit.report.html.pages.trace import trace_page

    return {"estimate": estimate_page, "trace": trace_page, "measure": measure_page, "fit": fit_page,
            "lengths": lengths_page, "lab": lab_page}


def render_page(data: object, *, command: str | None = None, source: str | None = None) -> str:
    """The HTML page for ``data`` (a command's ``--json`` output); ``command`` defaults to the detected one.

    A JSON of the right kind with a missing or mistyped field is one :class:`MemfitError`, not a traceback.
    """
    kind = command or detect_command(data)
    if not isinstance(data, Mapping):
        raise MemfitError(f"`memfit {kind} --json` output is a JSON object; this is a {type(data).__name__}")
    try:
        return _renderers()[kind](data, source)
    except MemfitError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        raise MemfitError(f"this looks like `memfit {kind} --json` output but a field is missing or malformed "
                          f"({type(exc).__name__}: {exc}): pass the unedited output of `memfit {kind} --json`") from exc
