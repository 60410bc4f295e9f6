"""Sharded steps measured for real: N processes under ``torchrun``, each rank's peak of live storage bytes.

``memfit measure --gpus N --sharding ddp|zero1|zero2|zero3|fsdp|hsdp`` launches ``python -m
torch.distributed.run --standalone --nproc-per-node N -m memfit.measure.sharded_worker REQUEST OUT`` (gloo on
CPU, nccl on CUDA). Every rank builds the same model (same seed), wraps it as the sharding says
(:mod:`memfit.measure.sharded_worker` has the torch 2.13.0 calls), runs ``tracked_steps`` real steps (a full
fine-tune, or LoRA under FSDP2) on its own random batch under :class:`~memfit.runtime.tracker.LiveTensorTracker`
and rank 0 gathers every rank's peak (``dist.all_gather_object``) into OUT, one JSON document. One launch
measures several specs in turn (the interpreter start-up and imports, ~10-40 s on a loaded CPU, are paid once).

This module starts the processes and reads the result; it imports no torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec

MEASURED_SHARDINGS = ("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp")
LAUNCH_TIMEOUT_S = 1800


@dataclass(frozen=True, kw_only=True, slots=True)
class RankPeak:
    """One rank's tracked steps: its peak of live storage bytes, the phase and what was alive then."""

    rank: int
    peak_bytes: int
    peak_phase: str
    by_category: dict[str, int]
    phase_peaks: dict[str, int]  # forward / backward / optimizer: the peak within each phase

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "peak_bytes": self.peak_bytes, "peak_phase": self.peak_phase,
                "by_category": dict(self.by_category), "phase_peaks": dict(self.phase_peaks)}


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardedResult:
    """One spec measured on ``spec.gpus`` ranks; ``peak_bytes`` is the largest rank's (what must fit a GPU)."""

    spec: RunSpec
    ranks: tuple[RankPeak, ...]
    device: str
    backend: str

    @property
    def peak_bytes(self) -> int:
        return max(r.peak_bytes for r in self.ranks)

    @property
    def peak_rank(self) -> RankPeak:
        return max(self.ranks, key=lambda r: r.peak_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"sharding": self.spec.sharding, "gpus": self.spec.gpus, "nodes": self.spec.nodes,
                "device": self.device, "backend": self.backend, "batch": self.spec.batch, "seq": self.spec.seq,
                "peak_bytes": self.peak_bytes, "peak_phase": self.peak_rank.peak_phase,
                "ranks": [r.to_dict() for r in self.ranks]}


def check_measurable(spec: RunSpec, device: str) -> None:
    """A MemfitError naming the fix for a sharded spec this launcher does not run."""
    if spec.sharding not in MEASURED_SHARDINGS:
        raise MemfitError(f"measure --gpus {spec.gpus} runs --sharding {', '.join(MEASURED_SHARDINGS)}; got "
                          f"{spec.sharding!r}")
    if spec.cpu_offload_params or spec.cpu_offload_optimizer:
        # on CPU device and host are one memory; on CUDA the worker does not apply FSDP2's CPUOffloadPolicy (it would
        # run, and report, a step without offload), so both are refused rather than measured wrong
        where = ("on --device cpu both are the same memory" if device == "cpu" else
                 "the launcher does not apply FSDP2's CPUOffloadPolicy")
        raise MemfitError(f"--offload-params / --offload-optimizer move states from the GPU to the host; {where}: "
                          "estimate them (memfit estimate ... --sharding ... --offload-params)")
    if spec.method not in ("full", "lora"):
        raise MemfitError(f"measure --sharding shards a full fine-tune or LoRA (--method full, lora); --method "
                          f"{spec.method}'s quantised base is estimated: memfit estimate ... --sharding")
    if spec.method == "lora" and spec.sharding in ("ddp", "zero1"):
        raise MemfitError("measure --sharding runs LoRA under FSDP2 (--sharding fsdp, zero2, zero3, hsdp); its "
                          f"--sharding {spec.sharding} run is estimated: memfit estimate ... --sharding")
    if spec.optimizer not in ("adamw", "sgd", "sgd-momentum"):
        raise MemfitError(f"measure --sharding steps torch's own optimizers (adamw, sgd, sgd-momentum); got "
                          f"--optimizer {spec.optimizer}")
    if spec.grad_accum != 1:
        raise MemfitError("measure --sharding runs one micro-batch per step: drop --grad-accum")


def measure_sharded(config: dict[str, Any], specs: list[RunSpec], *, device: str = "cpu",
                    tracked_steps: int = 2, seed: int = 0, timeout_s: int = LAUNCH_TIMEOUT_S) -> list[ShardedResult]:
    """Measure every spec of ``specs`` (one world size, ``specs[0].gpus``) in one torchrun launch."""
    if not specs:
        return []
    gpus = specs[0].gpus
    if any(s.gpus != gpus for s in specs):
        raise MemfitError("one launch measures one world size: give every spec the same --gpus")
    for s in specs:
        check_measurable(s, device)
    request = {"config": config, "specs": [s.to_dict() for s in specs], "device": device,
               "tracked_steps": tracked_steps, "seed": seed}
    with tempfile.TemporaryDirectory(prefix="memfit-sharded-") as tmp:
        req_path, out_path = os.path.join(tmp, "request.json"), os.path.join(tmp, "result.json")
        with open(req_path, "w", encoding="utf-8") as f:
            json.dump(request, f)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}",
               "-m", "memfit.measure.sharded_worker", req_path, out_path]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # N ranks share the cores; torchrun sets 1 itself, said here
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise MemfitError(f"the {gpus}-process run took over {timeout_s} s: measure a smaller model or "
                              "--seq") from None
        if not os.path.exists(out_path):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            raise MemfitError(f"the {gpus}-process torchrun launch failed (exit {proc.returncode}):\n"
                              + "\n".join(tail))
        with open(out_path, encoding="utf-8") as f:
            reply = json.load(f)
    if not reply.get("ok"):
        raise MemfitError(f"the sharded run failed: {reply.get('error')}")
    out = []
    for s, r in zip(specs, reply["results"], strict=True):
        ranks = tuple(RankPeak(rank=int(x["rank"]), peak_bytes=int(x["peak_bytes"]), peak_phase=str(x["peak_phase"]),
                               by_category={k: int(v) for k, v in x["by_category"].items()},
                               phase_peaks={k: int(v) for k, v in x["phase_peaks"].items()}) for x in r["ranks"])
        out.append(ShardedResult(spec=s, ranks=ranks, device=device, backend=str(r["backend"])))
    return out
