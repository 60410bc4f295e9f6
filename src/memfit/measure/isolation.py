"""One measured point in a fresh process: the client (:func:`measure_in_subprocess`) and the server
(``python -m memfit.measure.isolation``), speaking one JSON line each way.

A fresh process per point means no allocator cache, no optimizer state and no fragmentation carried from
one point into the next. The request is a :class:`WorkerRequest` on stdin::

    {"config": {...HF config...}, "spec": {...RunSpec.to_dict()...}, "device": "cpu", "steps": 3,
     "warmup": 1, "memory_limit": null, "snapshot_to": null, "cuda_snapshot_to": null}

and the reply one JSON line on stdout: ``{"ok": true, "result": {...PointResult...}}``, or
``{"ok": false, "kind": "memfit"|"crash", "error": "..."}`` (a crash also prints its traceback on stderr).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec
from memfit.measure.result import PointResult

WORKER_TIMEOUT_S = 1800


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRequest:
    """What the worker measures: :func:`memfit.measure.point.measure_point`'s arguments."""

    config: dict[str, Any]
    spec: RunSpec
    device: str = "cpu"
    steps: int = 3
    warmup: int = 1
    memory_limit: int | None = None
    snapshot_to: str | None = None  # where the worker writes memfit's memory snapshot (a file the parent names)
    cuda_snapshot_to: str | None = None  # and the allocator's own, on CUDA
    trainer: str | None = None  # None: memfit's loop; "hf" / "trl": memfit.measure.trainer

    def to_json(self) -> str:
        return json.dumps({"config": self.config, "spec": self.spec.to_dict(), "device": self.device,
                           "steps": self.steps, "warmup": self.warmup, "memory_limit": self.memory_limit,
                           "snapshot_to": self.snapshot_to, "cuda_snapshot_to": self.cuda_snapshot_to,
                           "trainer": self.trainer})

    @classmethod
    def from_json(cls, text: str) -> WorkerRequest:
        d = json.loads(text)
        return cls(config=d["config"], spec=RunSpec.from_dict(d["spec"]), device=d.get("device", "cpu"),
                   steps=int(d.get("steps", 3)), warmup=int(d.get("warmup", 1)), memory_limit=d.get("memory_limit"),
                   snapshot_to=d.get("snapshot_to"), cuda_snapshot_to=d.get("cuda_snapshot_to"),
                   trainer=d.get("trainer"))


# ---- client ------------------------------------------------------------------------------------

def measure_in_subprocess(config: dict[str, Any], spec: RunSpec, *, device: str, steps: int, warmup: int = 1,
                          memory_limit: int | None = None, snapshot_to: str | None = None,
                          cuda_snapshot_to: str | None = None, trainer: str | None = None) -> PointResult:
    """Measure one point in a fresh ``python -m memfit.measure.isolation``; a worker the host kills for
    memory is a point that does not fit."""
    request = WorkerRequest(config=config, spec=spec, device=device, steps=steps, warmup=warmup,
                            memory_limit=memory_limit, snapshot_to=snapshot_to, cuda_snapshot_to=cuda_snapshot_to,
                            trainer=trainer)
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        proc = subprocess.run([sys.executable, "-m", "memfit.measure.isolation"], input=request.to_json(),
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise MemfitError(f"measuring batch {spec.batch}, seq {spec.seq} took over {WORKER_TIMEOUT_S} s: "
                          "use smaller --batch/--seq or --steps") from exc
    reply = last_json_line(proc.stdout)
    if reply is None:
        tail = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        if proc.returncode in (-9, 137):
            return PointResult(batch=spec.batch, seq=spec.seq, checkpointing=spec.checkpointing, device=device,
                               fits=False, error=f"does not fit at batch {spec.batch}: the worker was killed "
                               "(host out of memory)")
        raise MemfitError(f"the measuring worker failed at batch {spec.batch}, seq {spec.seq}: {tail[0]}")
    if not reply.get("ok"):
        if reply.get("kind") == "memfit":
            raise MemfitError(reply["error"])
        raise MemfitError(f"measuring batch {spec.batch}, seq {spec.seq} failed: {reply.get('error')}")
    return PointResult.from_dict(reply["result"])


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """The last line of ``stdout`` that is a JSON object (libraries may print before it)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                reply = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(reply, dict):
                return reply
    return None


# ---- server ------------------------------------------------------------------------------------

def handle(request: WorkerRequest) -> dict[str, Any]:
    """Measure ``request`` in this process; the reply as a dict (the module docstring)."""
    try:
        if request.trainer is not None:
            from memfit.measure.trainer import measure_point_trainer

            result = measure_point_trainer(request.config, request.spec, trainer=request.trainer,
                                           device=request.device, steps=request.steps, warmup=request.warmup)
        else:
            from memfit.measure.point import measure_point

            result = measure_point(request.config, request.spec, device=request.device, steps=request.steps,
                                   warmup=request.warmup, memory_limit=request.memory_limit,
                                   snapshot_to=request.snapshot_to, cuda_snapshot_to=request.cuda_snapshot_to)
        return {"ok": True, "result": result.to_dict()}
    except MemfitError as exc:
        return {"ok": False, "kind": "memfit", "error": str(exc)}
    except Exception as exc:  # reported to the parent as a failed point, traceback on stderr
        traceback.print_exc(file=sys.stderr)
        return {"ok": False, "kind": "crash", "error": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    warnings.simplefilter("ignore")
    reply = handle(WorkerRequest.from_json(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
