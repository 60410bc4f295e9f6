"""The analytic engine: model shapes, parameter counts, the run spec and the memory budget.

Pure Python: this package never imports torch (a test imports it with torch blocked).
"""

import importlib as _importlib
import sys as _sys
import types as _types
from typing import Any

from memfit.estimate.activations import ActivationBytes, estimate_activations, rule_of_thumb_activation_bytes
from memfit.estimate.adapter import lora_trainable_params
from memfit.estimate.arch import REGISTRY, Architecture, BlockLayout
from memfit.estimate.block_parts import Linear, Norm
from memfit.estimate.budget import MemoryEstimate, estimate_memory
from memfit.estimate.catalogue import CatalogueEntry, catalogue, lookup, resolve_config, resolve_model
from memfit.estimate.category import Category
from memfit.estimate.config_file import read_config_file
from memfit.estimate.explain import Explanation, explain_estimate
from memfit.estimate.fits import FitVerdict, Headroom, Target
from memfit.estimate.gpus import GpuSpec, gpu_table, resolve_gpu, smallest_fitting_gpu
from memfit.estimate.lora import adapted_linears
from memfit.estimate.moments import Moment
from memfit.estimate.params import ParamCount, count_params
from memfit.estimate.shape import ModelShape, validate_config
from memfit.estimate.spec import RunSpec, parse_targets
from memfit.estimate.states import ModelStates, model_states

__all__ = [
    "REGISTRY",
    "Architecture",
    "BlockLayout",
    "ActivationBytes",
    "CatalogueEntry",
    "Category",
    "Explanation",
    "FitVerdict",
    "GpuSpec",
    "Headroom",
    "Linear",
    "MemoryEstimate",
    "ModelShape",
    "ModelStates",
    "Moment",
    "Norm",
    "ParamCount",
    "RunSpec",
    "Target",
    "adapted_linears",
    "catalogue",
    "count_params",
    "estimate_activations",
    "estimate_memory",
    "explain_estimate",
    "gpu_table",
    "lookup",
    "lora_trainable_params",
    "model_states",
    "parse_targets",
    "read_config_file",
    "resolve_config",
    "resolve_gpu",
    "resolve_model",
    "rule_of_thumb_activation_bytes",
    "smallest_fitting_gpu",
    "validate_config",
]


class _EstimatePackage(_types.ModuleType):
    """``memfit.estimate`` is this package and, called, :func:`memfit.api.estimate`:
    ``memfit.estimate("llama-3.1-8b", rank=16, batch=4)`` returns a :class:`MemoryEstimate`."""

    def __call__(self, model: str | None = None, /, **kwargs: Any) -> MemoryEstimate:
        # memfit.api reads config files (memfit.configs, a layer above this package): imported on call
        api = _importlib.import_module("memfit.api")
        result: MemoryEstimate = api.estimate(model, **kwargs)
        return result


_sys.modules[__name__].__class__ = _EstimatePackage
