"""``python -m memfit.measure.worker``: measure one point in a fresh process.

Reads one JSON request on stdin::

    {"config": {...HF config...}, "spec": {...RunSpec.to_dict()...}, "device": "cpu", "steps": 3,
     "warmup": 1, "memory_limit": null}

and writes one JSON line on stdout: ``{"ok": true, "result": {...PointResult...}}``, or
``{"ok": false, "kind": "memfit"|"crash", "error": "..."}`` (a crash also prints its traceback on stderr).
A fresh process per point means no allocator cache, no optimizer state and no fragmentation carried
from one point into the next.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from typing import Any


def handle(request: dict[str, Any]) -> dict[str, Any]:
    from memfit.errors import MemfitError

    try:
        from memfit.estimate.spec import RunSpec
        from memfit.measure.point import measure_point

        spec = RunSpec.from_dict(request["spec"])
        result = measure_point(request["config"], spec, device=request.get("device", "cpu"),
                               steps=int(request.get("steps", 3)), warmup=int(request.get("warmup", 1)),
                               memory_limit=request.get("memory_limit"))
        return {"ok": True, "result": result.to_dict()}
    except MemfitError as exc:
        return {"ok": False, "kind": "memfit", "error": str(exc)}
    except Exception as exc:  # reported to the parent as a failed point, traceback on stderr
        traceback.print_exc(file=sys.stderr)
        return {"ok": False, "kind": "crash", "error": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    warnings.simplefilter("ignore")
    request = json.loads(sys.stdin.read())
    reply = handle(request)
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
