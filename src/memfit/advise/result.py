"""What ``memfit fit`` answers, as data: the steps of the ordered plan, the steps skipped, the cheapest fitting
configuration of the search, the rank reduction in numbers, and the report that holds them.

Everything is bytes, factors and codes; the sentences are :mod:`memfit.report.fit`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from memfit.advise.costs import Cost, GivesUp, TimeModel
from memfit.advise.profile import DataProfile
from memfit.advise.setup import Setup
from memfit.estimate.allocator import AllocatorAdvice
from memfit.estimate.fits import FitVerdict, Headroom, Target, reserved_bytes
from memfit.estimate.gpus import GpuSpec
from memfit.estimate.synth_allocations import allocator_json

SkipReason = Literal[
    "needs_data",  # the remedy needs --data and --tokenizer
    "already",  # the knob is already where the remedy would turn it (facts: value)
    "no_kernel",  # transformers has no such path for the architecture (facts: value, model_type)
    "longest_reaches_seq",  # the longest example reaches the sequence (facts: longest, seq)
    "micro_batch_one",  # the micro-batch is already 1
    "one_gpu",  # sharding needs --gpus N > 1
    "at_p95",  # the sequence is at or below the data's p95 (facts: seq, p95, floor)
    "too_short",  # without data: the sequence is at its floor already
    "method",  # the remedy does not apply to this method (facts: value)
    "at_min_rank",  # the rank is at the lowest the advisor proposes (facts: rank, min_rank)
    "no_rank",  # full fine-tuning has no rank
    "no_change",  # the remedy proposes the run as it is
    "not_eval_peak",  # an evaluation knob, and the evaluation step is not the peak (advise/evaluation.py)
    "saves_too_little",  # less than the smallest saving worth a step (facts: saved_bytes)
    "not_modelled",  # the estimate does not model the remedy for this run (facts: value, why)
]

Need = Literal["gradient_checkpointing", "segment_checkpointing", "flash_attention", "fused_cross_entropy",
               "packing", "zero1", "zero2", "zero3", "bitsandbytes"]
"""What a changed knob needs beyond a flag, in the HF / PyTorch stack."""

SeqRule = Literal["data", "fallback"]
"""How the sequence step chose its floor: the data's p95, or without data half the sequence."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitStep:
    """One remedy applied on the ordered plan: the run after it, its peak per GPU, what it saved and cost.

    ``facts`` are the figures the remedy's sentence is written from (:func:`memfit.report.fit.step_cost`)."""

    action: str
    setup: Setup
    peak_bytes: int
    saved_bytes: int
    time_factor: float  # this step's own factor
    gives_up: GivesUp
    facts: Mapping[str, Any]
    fits: bool
    reserved_bytes: int | None = None  # CUDA: the estimate's replayed reserved figure (None: the stated rule)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "spec": self.setup.spec.to_dict(), "peak_bytes": self.peak_bytes,
                "reserved_bytes": self.reserved,
                "saved_bytes": self.saved_bytes, "time_factor": round(self.time_factor, 4),
                "gives_up": self.gives_up, "facts": dict(self.facts), "sharding": self.setup.spec.sharding,
                "packing": self.setup.packing, "fits": self.fits}


    @property
    def reserved(self) -> int:
        """Reserved bytes per GPU after this step (CUDA: the estimate's replay + context; CPU: the peak)."""
        if self.reserved_bytes is not None and self.setup.spec.device == "cuda":
            return self.reserved_bytes
        return reserved_bytes(self.peak_bytes, self.setup.spec.device)


@dataclass(frozen=True, kw_only=True, slots=True)
class Skipped:
    """A remedy the ordered plan did not take, and why (a code and its figures)."""

    action: str
    reason: SkipReason
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "facts": dict(self.facts)}


@dataclass(frozen=True, kw_only=True, slots=True)
class CheapestFit:
    """The cheapest fitting configuration of the exhaustive search (``setup`` None when nothing fits)."""

    setup: Setup | None
    peak_bytes: int | None
    cost: Cost | None
    candidates: int
    evaluated: int
    changes: dict[str, Any] = field(default_factory=dict)
    needs: tuple[Need, ...] = ()
    reserved_bytes: int | None = None  # CUDA: the estimate's replayed reserved figure of ``setup``

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.setup is not None,
            "spec": self.setup.spec.to_dict() if self.setup else None,
            "sharding": self.setup.spec.sharding if self.setup else None,
            "packing": self.setup.packing if self.setup else None,
            "peak_bytes": self.peak_bytes,
            "reserved_bytes": self.reserved_bytes,
            "cost": self.cost.to_dict() if self.cost else None,
            "changes": self.changes,
            "needs": list(self.needs),
            "candidates": self.candidates,
            "evaluated": self.evaluated,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RankReduction:
    """Why rank comes last, in numbers: lowering only the rank saves ``saved_bytes`` against ``activation_bytes``."""

    from_rank: int
    to_rank: int
    saved_bytes: int
    activation_bytes: int
    trainable_from: int
    trainable_to: int
    peak_after_bytes: int  # the user's spec with only the rank lowered
    fits_after: bool

    def to_dict(self) -> dict[str, Any]:
        return {"from_rank": self.from_rank, "to_rank": self.to_rank, "saved_bytes": self.saved_bytes,
                "peak_after_bytes": self.peak_after_bytes, "fits_after": self.fits_after,
                "activation_bytes": self.activation_bytes, "trainable_params_from": self.trainable_from,
                "trainable_params_to": self.trainable_to}


@dataclass(frozen=True, kw_only=True, slots=True)
class FitReport:
    """Everything ``memfit fit`` answers (its ``--json`` is :meth:`to_dict`). Peaks are per GPU."""

    model: str
    target: Target
    initial: Setup
    initial_peak_bytes: int
    steps: tuple[FitStep, ...]
    skipped: tuple[Skipped, ...]
    final: Setup
    final_peak_bytes: int
    final_cost: Cost
    cheapest: CheapestFit
    rank_reduction: RankReduction | None
    smallest_gpu_initial: GpuSpec | None
    smallest_gpu_final: GpuSpec | None
    time_model: TimeModel
    data: DataProfile | None
    seq_rule: SeqRule
    allocator: AllocatorAdvice | None = None  # CUDA: the final plan's caching-allocator replay (synthesised)
    initial_reserved: int | None = None  # CUDA: the estimates' replayed reserved figures (None: the stated rule)
    final_reserved: int | None = None

    @property
    def gpu(self) -> GpuSpec:
        return self.target.gpu

    @property
    def headroom(self) -> Headroom:
        return self.target.headroom

    @property
    def gpus(self) -> int:
        return self.initial.spec.gpus

    @property
    def budget_bytes(self) -> int:
        return self.target.budget_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.target.headroom_bytes

    @property
    def device(self) -> str:
        return self.initial.spec.device

    @property
    def initial_reserved_bytes(self) -> int:
        return self.verdict(self.initial_peak_bytes, self.initial_reserved).reserved_bytes

    @property
    def final_reserved_bytes(self) -> int:
        return self.verdict(self.final_peak_bytes, self.final_reserved).reserved_bytes

    @property
    def fits_initially(self) -> bool:
        """The rule of :mod:`memfit.estimate.fits` (reserved + headroom <= GPU), as ``memfit estimate`` says."""
        return self.verdict(self.initial_peak_bytes, self.initial_reserved).fits

    @property
    def fits(self) -> bool:
        return self.verdict(self.final_peak_bytes, self.final_reserved).fits

    def verdict(self, peak_bytes: int, reserved: int | None = None) -> FitVerdict:
        return self.target.judge(peak_bytes, self.device, reserved=reserved)

    def rule(self, peak_bytes: int, reserved: int | None = None) -> str:
        """``reserved 20.42 GiB + headroom 1.20 GiB (5% of the GPU) = 21.62 GiB <= 24.00 GiB (24GiB)``."""
        per = " per GPU" if self.gpus > 1 else ""
        return self.verdict(peak_bytes, reserved).rule() + per

    def initial_rule(self) -> str:
        return self.rule(self.initial_peak_bytes, self.initial_reserved)

    def final_rule(self) -> str:
        return self.rule(self.final_peak_bytes, self.final_reserved)

    def breakdown(self) -> dict[str, int]:
        """Hierarchical byte keys: ``initial/peak``, ``steps/1-checkpointing/peak`` and ``/saved``, ...,
        ``final/peak``, ``cheapest/peak``, ``budget``."""
        out = {"budget": self.budget_bytes, "initial/peak": self.initial_peak_bytes}
        for i, s in enumerate(self.steps, 1):
            out[f"steps/{i}-{s.action}/peak"] = s.peak_bytes
            out[f"steps/{i}-{s.action}/saved"] = s.saved_bytes
        out["final/peak"] = self.final_peak_bytes
        if self.cheapest.peak_bytes is not None:
            out["cheapest/peak"] = self.cheapest.peak_bytes
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits_initially": self.fits_initially,
            "steps": [s.to_dict() for s in self.steps],
            "final": {"spec": self.final.spec.to_dict(), "peak_bytes": self.final_peak_bytes,
                      "reserved_bytes": self.final_reserved_bytes, "rule": self.final_rule(),
                      "sharding": self.final.spec.sharding, "packing": self.final.packing,
                      "cost": self.final_cost.to_dict()},
            "fits": self.fits,
            "cheapest": self.cheapest.to_dict(),
            "model": self.model,
            "gpu": self.gpu.to_dict(),
            "gpus": self.gpus,
            "headroom": self.headroom.to_dict(),
            "budget_bytes": self.budget_bytes,
            "headroom_bytes": self.headroom_bytes,
            "initial": {"spec": self.initial.spec.to_dict(), "peak_bytes": self.initial_peak_bytes,
                        "reserved_bytes": self.initial_reserved_bytes, "rule": self.initial_rule(),
                        "sharding": self.initial.spec.sharding, "packing": self.initial.packing},
            "skipped": [s.to_dict() for s in self.skipped],
            "rank_reduction": self.rank_reduction.to_dict() if self.rank_reduction else None,
            "smallest_gpu": {
                "initial": self.smallest_gpu_initial.to_dict() if self.smallest_gpu_initial else None,
                "final": self.smallest_gpu_final.to_dict() if self.smallest_gpu_final else None,
            },
            "time_model": self.time_model.to_dict(),
            "data": self.data.to_dict() if self.data else None,
            "seq_rule": self.seq_rule,
            "allocator": allocator_json(self.allocator),
        }
