"""``memfit fit``: the ordered plan of remedies and the exhaustive search, on one run and one target.

The ordered plan (:mod:`memfit.advise.ordered`) walks :data:`~memfit.advise.remedies.REMEDY_ORDER` until the
step fits the target by :mod:`memfit.estimate.fits`' rule, the one ``memfit estimate`` prints: what the step
reserves (CUDA: the peak + the allocator's overhead + the CUDA context) plus the headroom (default 5% of
the GPU) within the GPU's bytes; the search (:mod:`memfit.advise.search`) finds the cheapest fitting
configuration beside it. If nothing fits, the report names the smallest GPU in the table on which the
final plan (and the run as given) would fit. With ``spec.gpus`` > 1 every peak is per GPU and the plan may
shard the model states (ZeRO-1/2/3).
"""

from __future__ import annotations

from collections.abc import Callable

from memfit.advise.cache import Estimator, PeakCache
from memfit.advise.costs import TimeModel, setup_cost
from memfit.advise.evaluation import EVAL_REMEDIES
from memfit.advise.ordered import OrderedPlan
from memfit.advise.profile import DataProfile
from memfit.advise.remedies import MIN_RANK, REMEDY_ORDER, Context
from memfit.advise.result import CheapestFit, FitReport, RankReduction
from memfit.advise.search import cheapest_fit
from memfit.advise.setup import Setup
from memfit.estimate import MemoryEstimate, ModelShape, RunSpec, estimate_memory
from memfit.estimate.adapter import lora_trainable_params
from memfit.estimate.allocator import AllocatorAdvice
from memfit.estimate.fits import Target, smallest_gpu
from memfit.estimate.synth_allocations import estimate_allocator


def fit(shape: ModelShape, spec: RunSpec, target: Target, *, time_model: TimeModel | None = None,
        data: DataProfile | None = None, search: bool = True, progress: Callable[[int, int], None] | None = None,
        estimate: Estimator = estimate_memory) -> FitReport:
    """Advise how to make ``spec`` fit ``target``: the lesson's ordered plan and the cheapest configuration.

    Args:
        shape: the model.
        spec: the run as the user gave it (``spec.gpus`` > 1 allows ZeRO sharding; peaks are then per GPU).
        target: the GPU and the headroom kept free on it (:meth:`Target.resolve` validates user input).
        time_model: the step-time factors (default: the compute model of :mod:`memfit.advise.costs`).
        data: the data's lengths and padding (``--data``); without it the sequence step uses the fallback rule.
        search: also run the exhaustive search for the cheapest fitting configuration.
        progress: called with (done, total) while searching.
        estimate: replaces :func:`memfit.estimate.estimate_memory` (tests).
    """
    time_model = time_model or TimeModel()
    cache = PeakCache(shape, estimate)
    initial = Setup(spec=spec)
    plan = OrderedPlan(cache, target, Context(initial=initial, time_model=time_model, data=data, shape=shape,
                                                   estimator=cache.estimate))
    initial_peak = plan.peak
    plan.run(EVAL_REMEDIES + REMEDY_ORDER if spec.eval_batch is not None else REMEDY_ORDER)
    final, final_peak = plan.current, plan.peak
    cheapest = (cheapest_fit(cache, target, initial, time_model=time_model, data=data, progress=progress,
                             extra_seqs=(final.spec.seq,)) if search
                else CheapestFit(setup=None, peak_bytes=None, cost=None, candidates=0, evaluated=0))
    device = spec.device
    return FitReport(
        model=shape.name or "model",
        target=target,
        initial=initial,
        initial_peak_bytes=initial_peak,
        steps=tuple(plan.steps),
        skipped=tuple(plan.skipped),
        final=final,
        final_peak_bytes=final_peak,
        final_cost=setup_cost(initial, final, time_model=time_model, data=data),
        cheapest=cheapest,
        rank_reduction=rank_reduction(cache, target, spec),
        smallest_gpu_initial=None if plan.fits_setup(initial) else smallest_gpu(
            initial_peak, device, target.headroom, reserved=cache.reserved(initial.spec)),
        smallest_gpu_final=None if plan.fits_setup(final) else smallest_gpu(
            final_peak, device, target.headroom, reserved=cache.reserved(final.spec)),
        initial_reserved=cache.reserved(initial.spec),
        final_reserved=cache.reserved(final.spec),
        time_model=time_model,
        data=data,
        seq_rule="fallback" if data is None else "data",
        allocator=_allocator(shape, final.spec, estimate),
    )


def _allocator(shape: ModelShape, spec: RunSpec, estimate: Estimator) -> AllocatorAdvice | None:
    """The final plan's allocation sequence, synthesised from its estimate, replayed through the CUDA caching
    allocator: names ``PYTORCH_CUDA_ALLOC_CONF`` settings when they lower the reserved peak notably."""
    est = estimate(shape, spec)
    return estimate_allocator(est) if isinstance(est, MemoryEstimate) else None


def rank_reduction(cache: PeakCache, target: Target, spec: RunSpec) -> RankReduction | None:
    """Lowering only the rank, to 8, on the user's run: bytes saved beside the activation bytes, and whether
    that alone would fit."""
    if not spec.is_adapter or spec.rank <= MIN_RANK:
        return None
    low = spec.with_(rank=MIN_RANK)
    after = cache.peak(low)
    return RankReduction(from_rank=spec.rank, to_rank=MIN_RANK, saved_bytes=cache.peak(spec) - after,
                         activation_bytes=cache.replica(spec).activation_bytes,
                         trainable_from=lora_trainable_params(cache.shape, spec),
                         trainable_to=lora_trainable_params(cache.shape, low),
                         peak_after_bytes=after, fits_after=cache.fits(target, low))
