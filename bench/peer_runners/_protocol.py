"""What every peer runner shares (imported by the runners only, never by memfit).

A runner is executed by its peer's own virtual environment (``bench/.peers/<tool>/bin/python``) with a
JSON request on stdin, ``{"rows": [...]}``, and ``HF_HUB_CACHE`` / ``HF_HUB_OFFLINE=1`` in its environment
(the local Hugging Face cache bench/peers.py lays out; nothing is fetched); each row carries ``id``, ``repo_id``,
``config`` (the HF config dict), ``spec`` (memfit's RunSpec as a dict) and ``options`` (what
``bench/peers.py`` mapped the spec onto for this peer). It answers on stdout with one JSON object,
``{"versions": {...}, "results": [{"id", "bytes", "seconds", "error", "detail"}]}``; whatever the peer
prints itself goes to stderr. A row the peer refuses or fails on gets ``bytes: null`` and the error.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any


def versions(*packages: str) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def serve(packages: tuple[str, ...], one_row: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]],
          warm: Callable[[], Any] | None = None) -> None:
    """Read the request, run ``one_row`` on each row (timed), write the answer; the peer's prints go to stderr.

    ``warm`` runs first, untimed: the peer's imports (torch, transformers) are not an estimate's cost.
    """
    request = json.load(sys.stdin)
    results = []
    with contextlib.redirect_stdout(sys.stderr):
        if warm is not None:
            warm()
        for row in request["rows"]:
            t0 = time.perf_counter()
            try:
                nbytes, detail = one_row(row)
                results.append({"id": row["id"], "bytes": int(nbytes), "seconds": time.perf_counter() - t0,
                                "error": None, "detail": detail})
            except Exception as exc:  # the peer refused or failed on this row: reported, the others go on
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                results.append({"id": row["id"], "bytes": None, "seconds": time.perf_counter() - t0,
                                "error": f"{type(exc).__name__}: {first[:300]}", "detail": {}})
                traceback.print_exc(file=sys.stderr)
    json.dump({"versions": versions(*packages), "results": results}, sys.stdout)
    sys.stdout.write("\n")
