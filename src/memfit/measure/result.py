"""PointResult: one measured (batch, seq, checkpointing) point. Plain data, importable without torch."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memfit.estimate.category import Category
from memfit.timeline import TimelinePoint


@dataclass(frozen=True, kw_only=True, slots=True)
class PointResult:
    """One measured point. Bytes are integers; ``fits=False`` means out of memory at this point."""

    batch: int
    seq: int
    checkpointing: str
    device: str
    fits: bool
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    tracker_peak_bytes: int | None = None
    peak_phase: str | None = None
    by_category: dict[Category, int] = field(default_factory=dict)
    phase_peaks: dict[str, int] = field(default_factory=dict)
    step_seconds: float | None = None
    step_times: tuple[float, ...] = ()
    tokens_per_second: float | None = None
    loss: float | None = None
    estimate_bytes: int | None = None
    error: str | None = None
    timeline: tuple[TimelinePoint, ...] = ()  # memory over the tracked steps, downsampled
    host_bytes: int = 0  # peak of the host copies --offload keeps (memfit.runtime.offload), not in peak_bytes

    @property
    def ratio(self) -> float | None:
        """measured / estimated peak."""
        if self.peak_bytes is None or not self.estimate_bytes:
            return None
        return self.peak_bytes / self.estimate_bytes

    def with_estimate(self, estimate_bytes: int | None) -> PointResult:
        return replace(self, estimate_bytes=estimate_bytes)

    def breakdown(self) -> dict[str, int]:
        """``"peak/<category>"`` -> bytes alive at the peak."""
        return {f"peak/{k}": v for k, v in self.by_category.items()}

    def to_dict(self, *, timeline: bool = True) -> dict[str, Any]:
        """JSON-ready; ``timeline=False`` leaves the timeline out (a sweep carries one point's)."""
        out = {
            "batch": self.batch, "seq": self.seq, "checkpointing": self.checkpointing, "device": self.device,
            "fits": self.fits, "peak_bytes": self.peak_bytes, "reserved_bytes": self.reserved_bytes,
            "tracker_peak_bytes": self.tracker_peak_bytes, "peak_phase": self.peak_phase,
            "step_seconds": self.step_seconds, "step_times": list(self.step_times),
            "tokens_per_second": self.tokens_per_second, "loss": self.loss,
            "estimate_bytes": self.estimate_bytes, "ratio": self.ratio,
            "by_category": dict(self.by_category), "phase_peaks": dict(self.phase_peaks), "error": self.error,
            "host_bytes": self.host_bytes,
        }
        if timeline and self.timeline:
            out["timeline"] = [p.to_dict() for p in self.timeline]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PointResult:
        d = {k: v for k, v in d.items() if k != "ratio"}
        d["step_times"] = tuple(d.get("step_times") or ())
        d["by_category"] = {Category(k): int(v) for k, v in (d.get("by_category") or {}).items()}
        d["timeline"] = tuple(TimelinePoint.from_dict(p) for p in d.get("timeline") or ())
        return cls(**d)
