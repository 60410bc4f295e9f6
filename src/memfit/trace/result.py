"""TraceResult: what one traced training step holds, in the estimate's JSON shape plus per-module detail.

Plain data (no torch), so reports and other engines read it without importing torch.

``to_dict()`` has every key of ``MemoryEstimate.to_dict()`` (``spec``, ``peak_bytes``, ``peak_phase``,
``components``, ``model_states``, ``reserved_bytes``, ``gpu_bytes``, ``fits``), so the three engines
compare key by key, and adds ``engine: "trace"``, ``per_module`` (who holds the activations alive at
the peak), ``per_layer_peak``, ``saved_for_backward`` (bytes autograd saved per block, unique storages),
``timeline`` (memory over the step: ``[{"t", "phase", "module", "op", "bytes_by_category"}]``, at most
:data:`memfit.timeline.MAX_TIMELINE_POINTS` points, the peak among them), ``timing``, and ``rank`` /
``world_size`` (``--sharding``: every figure is that one rank's, as the estimate's are one GPU's).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from memfit.estimate.category import Category
from memfit.estimate.fits import FitVerdict, Target
from memfit.estimate.spec import RunSpec
from memfit.timeline import TimelinePoint


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleBytes:
    """Bytes alive at the peak that the forward of ``module`` created, by category.

    ``module`` is a path in the base model (``model.layers.3.mlp.act_fn``) or a phase label
    (``"(backward)"``: gradients of activations made outside any module forward).
    """

    module: str
    by_category: dict[Category, int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(self.by_category.values())

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "bytes": self.bytes, "by_category": dict(self.by_category)}


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceResult:
    """One traced step. ``components`` are the bytes alive at the peak (they sum to ``peak_bytes``);
    ``model_states`` are full sizes whatever the phase."""

    spec: RunSpec
    model: str
    peak_bytes: int
    peak_phase: str
    components: dict[Category, int]
    model_states: dict[Category, int]
    phase_peaks: dict[str, int]
    per_module: tuple[ModuleBytes, ...]
    per_layer_peak: dict[int, int]
    saved_by_module: dict[str, int]
    saved_by_layer: dict[str, int]
    build_seconds: float
    step_seconds: float
    reserved_bytes: int | None = None
    # --device cuda: the step's allocations replayed through the caching allocator (memfit.estimate.allocator's
    # AllocatorAdvice.to_dict(): torch's defaults, the best PYTORCH_CUDA_ALLOC_CONF tried, the saving)
    allocator: dict[str, Any] | None = None
    host_bytes: int = 0  # --offload: peak of the checkpoints' copies in host memory, not part of peak_bytes
    target: Target | None = None  # --gpu and --headroom, what the step is judged against
    # --sharding: the rank traced (of spec.gpus, on a fake process group); ZeRO-1: the rank whose partition of the
    # parameters is the largest (None otherwise: DDP / FSDP2 ranks hold the same bytes); None when unsharded
    rank: int | None = None
    largest_partition_rank: int | None = None
    timeline: tuple[TimelinePoint, ...] = ()
    snapshot: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # not in the JSON

    @property
    def gpu_bytes(self) -> int | None:
        return None if self.target is None else self.target.gpu.bytes

    @property
    def verdict(self) -> FitVerdict | None:
        """:mod:`memfit.estimate.fits`' rule (reserved + headroom <= the GPU) on ``--gpu``; None without one."""
        if self.target is None:
            return None
        replayed = self.reserved_bytes if self.allocator is not None else None
        return self.target.judge(self.peak_bytes, self.spec.device, reserved=replayed)

    @property
    def fits(self) -> bool | None:
        """Whether reserved + headroom fits the GPU of ``--gpu`` (None without one)."""
        v = self.verdict
        return None if v is None else v.fits

    @property
    def saved_total(self) -> int:
        return sum(self.saved_by_module.values())

    def breakdown(self) -> Iterator[tuple[str, int]]:
        """Hierarchical keys: ``peak/<component>``, ``model_states/<state>``, ``saved/<layer>``, ``peak``."""
        for category, v in self.components.items():
            yield f"peak/{category}", v
        for category, v in self.model_states.items():
            yield f"model_states/{category}", v
        for layer, v in self.saved_by_layer.items():
            yield f"saved/{layer}", v
        yield "peak", self.peak_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": "trace",
            "model": self.model,
            "spec": self.spec.to_dict(),
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "components": dict(self.components),
            "model_states": dict(self.model_states),
            "reserved_bytes": self.reserved_bytes,
            "reserved_source": _reserved_source(self),
            "allocator": self.allocator,
            "host_bytes": self.host_bytes,
            "rank": self.rank,  # every figure is this rank's (one GPU's) under --sharding; null unsharded
            "world_size": self.spec.gpus if self.rank is not None else 1,
            "gpu": None if self.target is None else self.target.gpu.to_dict(),
            "gpu_bytes": self.gpu_bytes,
            "fits": self.fits,
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "phase_peaks": dict(self.phase_peaks),
            "per_module": [m.to_dict() for m in self.per_module],
            "per_layer_peak": {str(k): v for k, v in self.per_layer_peak.items()},
            "saved_for_backward": {"total": self.saved_total, "by_layer": dict(self.saved_by_layer),
                                   "by_module": dict(self.saved_by_module)},
            "timeline": [p.to_dict() for p in self.timeline],
            "timing": {"build_seconds": round(self.build_seconds, 3), "step_seconds": round(self.step_seconds, 3)},
        }


def _reserved_source(r: TraceResult) -> str:
    if r.spec.device != "cuda":
        return "cpu: the peak (nothing is reserved beyond the live tensors)"
    if r.allocator is not None:
        return "the traced allocations replayed through the CUDA caching allocator + 512 MiB CUDA context (assumed)"
    return "assumed: peak + 5% + 256 MiB allocator + 512 MiB CUDA context"
