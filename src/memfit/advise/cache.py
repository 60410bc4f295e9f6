"""The advisor's memo of estimates: one replay of the step per distinct run, each sharding derived from it."""

from __future__ import annotations

from collections.abc import Callable

from memfit.estimate import MemoryEstimate, ModelShape, RunSpec, estimate_memory
from memfit.estimate.budget import budget_of
from memfit.estimate.fits import CUDA_CONTEXT_BYTES, Target

Estimator = Callable[[ModelShape, RunSpec], MemoryEstimate]


class PeakCache:
    """Per-GPU estimates of the runs the advisor weighs, memoised (a RunSpec is hashable).

    The step's moments do not depend on the sharding, so each run is estimated once as one replica
    (``sharding="none"``, one GPU) and every sharding of it is derived from that replica's moments
    (:func:`memfit.estimate.budget.budget_of`). ``estimate`` replaces :func:`memfit.estimate.estimate_memory`
    (tests); it is called on replica specs only.
    """

    def __init__(self, shape: ModelShape, estimate: Estimator = estimate_memory) -> None:
        self.shape = shape
        self._estimate = estimate
        self._replicas: dict[RunSpec, MemoryEstimate] = {}
        self._peaks: dict[RunSpec, int] = {}

    @property
    def estimates(self) -> int:
        """How many distinct runs were estimated (replicas; a sharding of one is not counted again)."""
        return len(self._replicas)

    def replica(self, spec: RunSpec) -> MemoryEstimate:
        """The estimate of ``spec`` on one GPU without sharding."""
        key = spec if spec.sharding == "none" and spec.gpus == 1 else spec.with_(sharding="none", gpus=1)
        est = self._replicas.get(key)
        if est is None:
            est = self._estimate(self.shape, key)
            self._replicas[key] = est
        return est

    def estimate(self, spec: RunSpec) -> MemoryEstimate:
        """The estimate of ``spec`` per GPU (the replica itself without sharding)."""
        base = self.replica(spec)
        if base.spec == spec:
            return base
        return budget_of(self.shape, spec, base.model_states, base.activations, base.moments)

    def reserved(self, spec: RunSpec) -> int:
        """CUDA reserved bytes per GPU of ``spec`` (the estimate's caching-allocator replay + context; CPU: the
        peak)."""
        return self.estimate(spec).reserved_bytes

    def fits(self, target: Target, spec: RunSpec) -> bool:
        """Whether ``spec`` fits ``target`` by :mod:`memfit.estimate.fits`' rule on the estimate's reserved figure.
        The replay (tens of ms for a 70B) runs only for runs whose peak + the CUDA context fits: the replayed
        reserved figure is never below that (:func:`memfit.estimate.budget.replayed_reserved_bytes`)."""
        peak = self.peak(spec)
        if spec.device != "cuda":
            return target.fits(peak, spec.device)
        if not target.fits(peak, spec.device, reserved=peak + CUDA_CONTEXT_BYTES):
            return False
        return target.fits(peak, spec.device, reserved=self.reserved(spec))

    def peak(self, spec: RunSpec) -> int:
        """Peak bytes per GPU of ``spec``."""
        value = self._peaks.get(spec)
        if value is None:
            value = self.estimate(spec).peak_bytes
            self._peaks[spec] = value
        return value
