"""The architecture registry: what each ``model_type`` is, as flags, config keys and module names.

Every engine asks here instead of comparing ``model_type`` strings: the estimate's shapes, parameter
counts, LoRA modelling and op replay read :class:`BlockLayout` flags; ``measure`` and ``trace`` read the
config keys, PEFT's targets and the MoE kernels; the reports read the block container names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.estimate.arch.architecture import Architecture
from memfit.estimate.arch.keys import SIZE_LIMITS, ConfigKeys, ConfigReader, MissingKey
from memfit.estimate.arch.layout import BlockLayout, LayerType, MoeLayout
from memfit.estimate.arch.names import BlockNames, ModelNames, ModuleNames
from memfit.estimate.arch.registry import REGISTRY

# Block lists of architectures memfit traces but does not model (``memfit trace`` runs any causal LM):
# MPT's ``transformer.blocks``, and ``layer`` as some encoders name it.
OTHER_BLOCK_CONTAINERS = ("blocks", "layer")


def block_containers() -> tuple[str, ...]:
    """The names of the decoder-block lists in module paths (``layers`` in ``model.layers.3``, ``h`` in
    ``transformer.h.3``): the registered architectures' and :data:`OTHER_BLOCK_CONTAINERS`.

    >>> block_containers()
    ('layers', 'h', 'blocks', 'layer')
    """
    names = [a.names.model.layers_container for a in REGISTRY.values()] + list(OTHER_BLOCK_CONTAINERS)
    return tuple(dict.fromkeys(names))


def experts_run_eager_loop(config: Mapping[str, Any], precision: str) -> bool:
    """Whether transformers 5 runs this config's MoE experts with its eager per-expert loop under
    ``precision`` (``torch._grouped_mm`` takes only :attr:`MoeLayout.grouped_mm_precisions`). An architecture
    memfit does not model counts as MoE when it names ``num_local_experts``.

    >>> experts_run_eager_loop({"model_type": "mixtral"}, "fp32")
    True
    >>> experts_run_eager_loop({"model_type": "mixtral"}, "bf16")
    False
    """
    arch = REGISTRY.get(str(config.get("model_type")))
    moe = arch.layout.moe if arch is not None else (MoeLayout() if config.get("num_local_experts") else None)
    return moe is not None and precision not in moe.grouped_mm_precisions


__all__ = [
    "OTHER_BLOCK_CONTAINERS",
    "REGISTRY",
    "SIZE_LIMITS",
    "Architecture",
    "BlockLayout",
    "BlockNames",
    "ConfigKeys",
    "ConfigReader",
    "LayerType",
    "MissingKey",
    "ModelNames",
    "ModuleNames",
    "MoeLayout",
    "block_containers",
    "experts_run_eager_loop",
]
