"""The fit advisor: which knobs to turn, in which order, for a run to fit a GPU (estimate only, no torch).

``fit(shape, spec, target)`` walks the ordered remedies (:data:`REMEDY_ORDER`) and searches every knob
combination for the cheapest fitting configuration. The per-GPU bytes of ZeRO / FSDP sharding are the
estimate's (:mod:`memfit.estimate.sharding`); the rule that says "fits" is :class:`memfit.estimate.fits.Target`.
"""

from memfit.advise.cache import PeakCache
from memfit.advise.costs import Cost, GivesUp, TimeModel, setup_cost, time_model_from_measurement
from memfit.advise.fit import fit, rank_reduction
from memfit.advise.ordered import OrderedPlan
from memfit.advise.profile import DataProfile, LengthStats
from memfit.advise.remedies import REMEDY_ORDER, Remedy
from memfit.advise.result import CheapestFit, FitReport, FitStep, Need, RankReduction, Skipped, SkipReason
from memfit.advise.search import candidates, cheapest_fit, requirements, setup_changes
from memfit.advise.setup import Setup

__all__ = [
    "REMEDY_ORDER",
    "CheapestFit",
    "Cost",
    "DataProfile",
    "FitReport",
    "FitStep",
    "GivesUp",
    "LengthStats",
    "Need",
    "OrderedPlan",
    "PeakCache",
    "RankReduction",
    "Remedy",
    "Setup",
    "SkipReason",
    "Skipped",
    "TimeModel",
    "candidates",
    "cheapest_fit",
    "fit",
    "rank_reduction",
    "requirements",
    "setup_changes",
    "setup_cost",
    "time_model_from_measurement",
]
