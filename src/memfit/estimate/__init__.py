"""The analytic engine: model shapes, parameter counts, the run spec and the memory budget.

Pure Python: this package never imports torch (a test imports it with torch blocked).
"""

from memfit.estimate.catalogue import CatalogueEntry, catalogue, lookup, resolve_config, resolve_model
from memfit.estimate.params import ParamCount, count_params
from memfit.estimate.shape import SUPPORTED_MODEL_TYPES, Linear, ModelShape, Norm
from memfit.estimate.spec import RunSpec, parse_targets

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "CatalogueEntry",
    "Linear",
    "ModelShape",
    "Norm",
    "ParamCount",
    "RunSpec",
    "catalogue",
    "count_params",
    "lookup",
    "parse_targets",
    "resolve_config",
    "resolve_model",
]
