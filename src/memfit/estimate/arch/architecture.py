"""One architecture family: its block layout, its config keys, its module names and what PEFT and
transformers allow for it. Instances live in :data:`memfit.estimate.arch.registry.REGISTRY`."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.errors import MemfitError
from memfit.estimate.arch.keys import ConfigKeys
from memfit.estimate.arch.layout import BlockLayout
from memfit.estimate.arch.names import ModuleNames
from memfit.estimate.spec import Attention, RunSpec


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class Architecture:
    """Everything memfit knows about one ``model_type``, looked up in transformers 5.24.0 and PEFT 0.21.2.

    - ``source``: the transformers modeling file the layout follows.
    - ``lora_targets``: PEFT's default LoRA targets
      (``peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``), used when ``--targets``
      is not given; None where PEFT has none, and then memfit, like PEFT, asks for ``--targets`` with
      ``lora_hint``.
    - ``all_linear_moe``: PEFT's ``all-linear`` also adapts the MoE router and fused experts (through
      ``target_parameters``); PEFT 0.21.2 does so only for the model types transformers' weight conversion
      table maps (``peft.utils.transformers_weight_conversion``: Mixtral, Qwen2/3-MoE), not GPT-OSS.
    - ``peft_expert_names``: the ``nn.Linear`` leaf names PEFT 0.21.2 converts into the fused experts' parameters
      for this model type (``peft.utils.transformers_weight_conversion._convert_peft_config_moe``, the
      ``qwen2_moe`` pattern: gate_proj, up_proj, down_proj): ``all-linear`` adapts the experts under those names
      and never an ``nn.Linear`` of that name (a dense-MLP layer's or the shared experts' MLP). In that order: the
      two fused into gate_up_proj, then down_proj's (Mixtral's pattern: w1, w3, w2); named in ``--targets`` they
      adapt the experts too, and ``gate`` the router (``_MOE_TARGET_MODULE_MAPPING``: ``gate`` -> ``gate.weight``).
    - ``attention_kernels``: the ``--attention`` values transformers builds the model with (a model class with
      ``_supports_sdpa = False`` has no sdpa path); ``kernel_note`` says why one is missing.

    Compared by identity: each registry entry is one object, so a :class:`~memfit.estimate.shape.ModelShape`
    hashes its architecture in constant time.
    """

    model_type: str
    source: str
    layout: BlockLayout
    keys: ConfigKeys
    names: ModuleNames
    lora_targets: tuple[str, ...] | None
    lora_hint: str = "q_proj,v_proj"
    attention_kernels: tuple[Attention, ...] = ("eager", "sdpa", "flash")
    kernel_note: str = ""
    all_linear_moe: bool = True
    peft_expert_names: tuple[str, ...] = ()

    def default_lora_targets(self) -> tuple[str, ...]:
        """PEFT's default targets; a MemfitError naming --targets where PEFT has none."""
        if self.lora_targets is None:
            raise MemfitError(f"PEFT has no default LoRA targets for {self.model_type}: pass --targets "
                              f"{self.lora_hint} (or all-linear)")
        return self.lora_targets

    def check_attention(self, attention: Attention) -> None:
        """A MemfitError when transformers has no ``attention`` path for this architecture."""
        if attention in self.attention_kernels:
            return
        plain = [k for k in self.attention_kernels if k != "flash"]
        fix = " or ".join(plain) + (" (or flash on CUDA)" if "flash" in self.attention_kernels else "")
        raise MemfitError(f"{self.model_type} has no {attention} path in transformers ({self.kernel_note}): "
                          f"pass --attention {fix}")

    def runnable_spec(self, spec: RunSpec) -> RunSpec:
        """``spec`` as this architecture can run it: its first attention kernel where transformers has none for
        ``spec.attention``, and ``lora_hint``'s targets for an adapter without targets where PEFT has no
        default (how the agreement matrix and the catalogue-wide tests apply one spec to every model)."""
        if spec.attention not in self.attention_kernels:
            spec = spec.with_(attention=self.attention_kernels[0])
        if spec.is_adapter and not spec.targets and self.lora_targets is None:
            spec = spec.with_(targets=tuple(self.lora_hint.split(",")))
        return spec
