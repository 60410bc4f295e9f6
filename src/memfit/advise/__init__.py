"""The fit search: which knobs to turn, in which order, for a run to fit a GPU (estimate only, no torch).

``fit(shape, spec, gpu=...)`` walks the lesson's ordered remedies and searches every knob combination for
the cheapest fitting configuration; ``shard_peak`` models ZeRO / FSDP per-GPU bytes.
"""

from memfit.advise.costs import Cost, TimeModel, time_model_from_measurement
from memfit.advise.data import DataProfile
from memfit.advise.plan import (
    ACTIONS,
    LESSON_ORDER,
    Cheapest,
    FitReport,
    FitStep,
    Headroom,
    RankLesson,
    Setup,
    fit,
    smallest_gpu,
)
from memfit.advise.sharding import SHARDINGS, ShardedPeak, shard_components, shard_peak

__all__ = [
    "ACTIONS",
    "LESSON_ORDER",
    "SHARDINGS",
    "Cheapest",
    "Cost",
    "DataProfile",
    "FitReport",
    "FitStep",
    "Headroom",
    "RankLesson",
    "Setup",
    "ShardedPeak",
    "TimeModel",
    "fit",
    "shard_components",
    "shard_peak",
    "smallest_gpu",
    "time_model_from_measurement",
]
