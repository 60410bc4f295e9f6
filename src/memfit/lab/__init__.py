"""``memfit lab``: every checkable claim of the lesson (``LESSON.txt``, Lesson 7), measured on this machine, claim
beside measurement, with a verdict (:mod:`memfit.lab.verdicts`) and the command that reproduces it.

The computing lives here and composes the engines (measure's sweeps, least squares and checkpointing trade, the
data's lengths, the estimate and the trace); :mod:`memfit.report.lab` presents the result's ``to_dict()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfit.lab.setup import LabSetup, bundled_data, cpu_setup, cuda_setup
from memfit.lab.verdicts import Rep, Verdict

Progress = Callable[[str], None]

__all__ = ["LabResult", "LabSetup", "Rep", "Verdict", "bundled_data", "cpu_setup", "cuda_setup", "run_lab"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LabResult:
    setup: LabSetup
    reps: tuple[Rep, ...]
    seconds: float  # wall-clock
    cpu_seconds: float = 0.0  # this process's CPU time (user + system, all threads): what the lab costs a machine
    environment: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        s = self.setup
        return {"lab": True, "model": s.model, "device": s.device, "scaled": s.scaled, "config": s.config,
                "spec": s.spec.to_dict(), "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds, "environment": self.environment,
                "reps": [r.to_dict() for r in self.reps],
                "verdicts": {str(r.number): str(r.verdict) for r in self.reps}}


def _environment() -> dict[str, str]:
    import os
    import platform

    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "cpus": str(os.cpu_count()), "threads": str(torch.get_num_threads())}


def run_lab(setup: LabSetup, *, data: Path | None = None, tokenizer: Path | None = None,
            fields: dict[str, str | None] | None = None, reps: tuple[int, ...] = tuple(range(1, 9)),
            progress: Progress | None = None) -> LabResult:
    """Run ``reps`` (all eight by default) in order; ``progress`` hears what runs."""
    from memfit.lab.reps_memory import batch_sweep, rep_attention, rep_batch, rep_checkpointing, rep_depth
    from memfit.lab.reps_other import rep_lengths, rep_rank, rep_use_cache, rep_worked

    def say(text: str) -> None:
        if progress:
            progress(text)

    t0, c0 = time.perf_counter(), time.process_time()
    out: list[Rep] = []
    if 1 in reps or 2 in reps:
        say("reps 1 and 2: batch sweep without and with checkpointing")
        t = time.perf_counter()
        sweep = batch_sweep(setup)
        secs = time.perf_counter() - t
        out += [r for r in (rep_batch(setup, sweep, secs / 2) if 1 in reps else None,
                            rep_checkpointing(setup, sweep, secs / 2) if 2 in reps else None) if r is not None]
    if 3 in reps:
        say("rep 3: token lengths")
        out.append(rep_lengths(data, tokenizer, fields or {}))
    if 4 in reps:
        out.append(rep_depth(setup, progress))
    if 5 in reps:
        out.append(rep_attention(setup, progress))
    worked = None
    if 7 in reps:
        say("rep 7: the worked example (trace)")
        w = rep_worked(setup)
        worked = int(w.figures["trace_activations"])
    if 6 in reps:
        say("rep 6: rank")
        out.append(rep_rank(setup, worked))
    if 7 in reps:
        out.append(w)
    if 8 in reps:
        say("rep 8: use_cache with checkpointing")
        out.append(rep_use_cache(setup))
    return LabResult(setup=setup, reps=tuple(out), seconds=time.perf_counter() - t0,
                     cpu_seconds=time.process_time() - c0, environment=_environment())
