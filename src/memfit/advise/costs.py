"""What each remedy costs: a step-time factor and what it gives up, and the order that ranks them.

Time model
==========
A training step is one forward pass F and one backward pass B. The backward computes two matmuls per
forward matmul (the gradient with respect to the input and to the weight), so B ~ 2F and a step costs 3F
(Chen et al. 2016, arXiv:1604.06174; the 6N-FLOPs-per-token rule is 2N forward + 4N backward). Factors
are relative to the user's step time and multiply.

=====================  ===============================================================================
remedy                 time factor
=====================  ===============================================================================
checkpointing          (3F + F) / 3F = 4/3 ~ 1.33: every block's forward runs again in the backward.
                       The same for ``full``, ``every-k`` and ``sqrt``: the estimate's segments of 1, k
                       or ceil(sqrt(L)) blocks keep only their input and are all recomputed once (Chen
                       et al.); they differ in memory, not in time. A measured ratio
                       (``memfit measure --checkpointing both --json``) replaces 4/3.
micro-batch b -> b'    (1 + T0/(b' s)) / (1 + T0/(b s)), T0 = 256 tokens: each micro-step pays a fixed
                       overhead (kernel launches, reading every weight once) worth ~T0 tokens of compute.
                       ASSUMED, not measured: small micro-batches lose some GPU utilisation.
packing                tokens processed packed / padded, the same examples per optimizer step: R rows of s
                       tokens against E examples padded to P0 = mean / (1 - waste_random) tokens each,
                       R x s / (E x P0) < 1 (:func:`setup_cost`).
4-bit base (QLoRA)     1.3, ASSUMED: NF4 weights are dequantised on every forward and backward.
ZeRO-3 / FSDP full     1.1, ASSUMED: 1.5x the communication of data parallelism (Rajbhandari et al. 2020,
                       arXiv:1910.02054); ZeRO-1/2 move as much as DDP's all-reduce (1.0).
attention, loss, rank  1.0: sdpa/flash are no slower than eager; a chunked loss runs the same matmuls in
                       pieces; rank barely changes the FLOPs.
shorter sequence       1.0 (fewer tokens are processed, but the task changed: see below).
=====================  ===============================================================================

What is given up (the cost order)
=================================
The lesson orders remedies "in order of what you give up": time first, then the task, then quality, then
capacity. The cheapest configuration is the one that gives up the least, compared in that order of
reluctance, and only among equals the fastest:

``key = (rank_halvings, quantised, full_to_adapter, truncation, time_factor)``

so any configuration that costs only time (checkpointing, accumulation, kernels, a chunked loss, packing,
sharding) beats one that shortens the task, which beats a 4-bit base, which beats a lower rank. Among the
time-only configurations the smallest time factor wins. ``truncation`` is the share of examples a shorter
sequence cuts when data is given (0 when the data's longest example still fits: then shortening is free),
and the share of the sequence given up (1 - s'/s) without data, where the cut is unknown.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memfit.advise.profile import DataProfile
from memfit.advise.setup import Setup
from memfit.errors import MemfitError
from memfit.estimate import ModelShape

GivesUp = Literal["nothing", "time", "task", "quality", "capacity"]
"""What a change gives up, in the lesson's order of reluctance (``nothing`` first)."""

FWD_BWD_RATIO = 2.0  # backward FLOPs / forward FLOPs (two matmuls per forward matmul)
CHECKPOINT_FACTOR_MODEL = (1.0 + FWD_BWD_RATIO + 1.0) / (1.0 + FWD_BWD_RATIO)  # 4/3: one extra forward
MICRO_STEP_OVERHEAD_TOKENS = 256  # ASSUMED fixed cost of one micro-step, in tokens of compute
QLORA_TIME_FACTOR = 1.3  # ASSUMED: NF4 dequantisation on every forward and backward
ZERO3_TIME_FACTOR = 1.1  # ASSUMED: 1.5x DDP's communication volume (ZeRO paper, section 7)


@dataclass(frozen=True, kw_only=True, slots=True)
class TimeModel:
    """The step-time factors the advisor uses. ``checkpoint_factor`` is full checkpointing's slowdown:
    4/3 from the compute model, or a measured ratio (``source`` says which)."""

    checkpoint_factor: float = CHECKPOINT_FACTOR_MODEL
    source: str = "model: one extra forward, fwd:bwd = 1:2"
    micro_step_overhead_tokens: int = MICRO_STEP_OVERHEAD_TOKENS
    qlora_factor: float = QLORA_TIME_FACTOR
    zero3_factor: float = ZERO3_TIME_FACTOR

    def checkpointing(self, kind: str) -> float:
        """Slowdown of ``--checkpointing kind`` against none: every checkpointed segment is recomputed once.

        >>> round(TimeModel().checkpointing("full"), 3), round(TimeModel().checkpointing("every-k"), 3)
        (1.333, 1.333)
        """
        return 1.0 if kind == "none" else self.checkpoint_factor

    def micro_batch(self, old_tokens: int, new_tokens: int) -> float:
        """Slowdown of running ``new_tokens`` per micro-step instead of ``old_tokens`` (same tokens per
        optimizer step).

        Worked: batch 8 -> 1 at seq 2048: (1 + 256/2048) / (1 + 256/16384) = 1.125 / 1.015625 = 1.108.

        >>> round(TimeModel().micro_batch(8 * 2048, 2048), 3)
        1.108
        """
        t0 = self.micro_step_overhead_tokens
        return (1.0 + t0 / new_tokens) / (1.0 + t0 / old_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint_factor": self.checkpoint_factor,
            "source": self.source,
            "micro_step_overhead_tokens": self.micro_step_overhead_tokens,
            "qlora_factor": self.qlora_factor,
            "zero3_factor": self.zero3_factor,
        }


def time_model_from_measurement(path: str | Path, *, shape: ModelShape | None = None,
                                device: str | None = None) -> TimeModel:
    """A TimeModel whose checkpointing factor is measured: the median, over the (batch, seq) points of a
    ``memfit measure --checkpointing both --json`` file, of step_seconds(full) / step_seconds(none).

    Reads ``checkpointing_trade[].slowdown``, or pairs ``runs`` (``batch``, ``seq``, ``checkpointing``,
    ``step_seconds``) itself when the trade list is absent.

    A slowdown is a property of one model on one device (a small model on a CPU recomputes at a different
    ratio than an 8B model on a GPU), so with ``shape`` and ``device`` the file must record the same
    architecture (its ``model``, resolved as memfit resolves a MODEL, equal to ``shape`` but for the name)
    and the same device; otherwise a MemfitError names both.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise MemfitError(f"--measurement {p}: no such file (write one with memfit measure ... --json)") from None
    except (OSError, ValueError) as exc:
        raise MemfitError(f"--measurement {p}: not a JSON file from memfit measure --json ({exc})") from None
    if not isinstance(data, dict):
        raise MemfitError(f"--measurement {p}: not a JSON object from memfit measure --json")
    if device is not None:
        measured_on = data.get("device")
        if measured_on != device:
            raise MemfitError(f"--measurement {p} was measured on {measured_on or 'an unrecorded device'}; this run "
                              f"is --device {device}: checkpointing's slowdown differs between devices, so measure "
                              f"on {device} (memfit measure ... --device {device} --checkpointing both --json)")
    if shape is not None:
        _check_same_model(p, data.get("model"), shape)
    ratios = [float(t["slowdown"]) for t in data.get("checkpointing_trade") or []
              if isinstance(t, dict) and isinstance(t.get("slowdown"), int | float) and math.isfinite(t["slowdown"])
              and t["slowdown"] > 0]
    if not ratios:  # pair the runs ourselves: same (batch, seq), with and without checkpointing
        by_point: dict[tuple[Any, Any], dict[str, float]] = {}
        for run in data.get("runs") or []:
            if not isinstance(run, dict):
                continue
            seconds = run.get("step_seconds")
            if isinstance(seconds, int | float) and seconds > 0:
                by_point.setdefault((run.get("batch"), run.get("seq")), {})[str(run.get("checkpointing"))] = seconds
        ratios = [pt["full"] / pt["none"] for pt in by_point.values() if "full" in pt and "none" in pt]
    if not ratios:
        raise MemfitError(f"--measurement {p}: no point measured both with and without checkpointing; "
                          "run memfit measure ... --checkpointing both --json")
    factor = statistics.median(ratios)
    factor = max(1.0, factor)  # a measured speed-up from checkpointing is noise: count it as free
    return TimeModel(checkpoint_factor=factor,
                     source=f"measured: median of {len(ratios)} point(s) in {p.name}")


def _check_same_model(path: Path, measured: object, shape: ModelShape) -> None:
    """The measurement's ``model`` (a catalogue name or a config path, as given to memfit measure) must be
    ``shape``'s architecture; a path that no longer resolves is compared by name."""
    from dataclasses import replace

    from memfit.estimate import resolve_model

    if not isinstance(measured, str) or not measured:
        raise MemfitError(f"--measurement {path} does not say which model it measured: use a file written by "
                          "memfit measure MODEL ... --json")
    try:
        other = resolve_model(measured)
    except (MemfitError, OSError):
        same = measured.strip().lower() == shape.name.lower()
    else:
        same = replace(other, name=shape.name) == shape
    if not same:
        raise MemfitError(f"--measurement {path} measured {measured}, not {shape.name}: checkpointing's slowdown "
                          f"depends on the model; measure {shape.name} itself (memfit measure {shape.name} "
                          "--checkpointing both --json), or drop --measurement for the 4/3 model")


@dataclass(frozen=True, kw_only=True, slots=True)
class Cost:
    """What a configuration gives up relative to the user's spec. Compare with :meth:`key`."""

    time_factor: float = 1.0
    rank_halvings: float = 0.0  # log2(rank / rank'): capacity
    quantised: bool = False  # 4-bit base: quality
    full_to_adapter: bool = False  # LoRA instead of full fine-tuning: what is learned
    truncation: float = 0.0  # share of examples cut (data) or of the sequence given up (no data): the task

    def key(self) -> tuple[float, int, int, float, float]:
        """The comparison key: what is given up, in the lesson's order of reluctance, then time."""
        return (round(self.rank_halvings, 6), int(self.quantised), int(self.full_to_adapter),
                round(self.truncation, 6), round(self.time_factor, 6))

    @property
    def gives_up(self) -> GivesUp:
        """``time`` | ``task`` | ``quality`` | ``capacity``: the worst thing given up."""
        if self.rank_halvings > 0:
            return "capacity"
        if self.quantised or self.full_to_adapter:
            return "quality"
        if self.truncation > 0:
            return "task"
        return "time"

    def to_dict(self) -> dict[str, Any]:
        return {
            "time_factor": round(self.time_factor, 4),
            "gives_up": self.gives_up,
            "rank_halvings": self.rank_halvings,
            "quantised": self.quantised,
            "full_to_adapter": self.full_to_adapter,
            "truncation": self.truncation,
        }


def setup_cost(initial: Setup, setup: Setup, *, time_model: TimeModel, data: DataProfile | None) -> Cost:
    """What ``setup`` gives up against ``initial`` (module docstring).

    Step time: checkpointing's factor; the rows per optimizer step R and micro-steps R/b, time ~ R*s0 +
    (R/b)*T0 (the user's sequence counted as 1.0, T0 the micro-step overhead); packing processes s tokens per
    row against the user's padded P0 = mean / (1 - waste_random); a 4-bit base and ZeRO-3 their factors.
    """
    s0, s = initial.spec, setup.spec
    time = time_model.checkpointing(s.checkpointing) / time_model.checkpointing(s0.checkpointing)
    t0 = time_model.micro_step_overhead_tokens
    rows0 = s0.batch * s0.grad_accum
    rows = s.batch * s.grad_accum
    work = float(rows)  # in the user's rows: an unpacked row processes what the user's rows did
    if setup.packing and not initial.packing and data is not None:
        # a packed row processes s tokens; one of the user's padded rows P0 = mean / (1 - waste_random)
        work = rows * s.seq / data.padded_tokens_per_example(s0.batch, s0.seq)
    time *= (work * s0.seq + (rows / s.batch) * t0) / (rows0 * s0.seq + (rows0 / s0.batch) * t0)
    if s.method == "qlora" and s0.method != "qlora":
        time *= time_model.qlora_factor
    if s.sharding == "zero3" and s0.sharding != "zero3":
        time *= time_model.zero3_factor
    halvings = math.log2(s0.rank / s.rank) if s0.is_adapter and s.rank < s0.rank else 0.0
    if s.seq < s0.seq:
        truncation = (data.truncated_share(s.seq) - data.truncated_share(s0.seq)) if data else 1.0 - s.seq / s0.seq
    else:
        truncation = 0.0
    return Cost(time_factor=time, rank_halvings=halvings, quantised=s.method == "qlora" and s0.method != "qlora",
                full_to_adapter=s0.method == "full" and s.method != "full", truncation=max(0.0, truncation))
