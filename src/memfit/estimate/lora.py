"""Which block linears a LoRA run adapts, and how many parameters it trains, as PEFT counts them.

PEFT wraps every module whose name equals a target or ends with ``"." + target``; ``all-linear`` means
every ``nn.Linear`` (and GPT-2's ``Conv1D``) except the output layer. Each adapted linear of shape
(in, out) gains ``lora_A`` (r x in) and ``lora_B`` (out x r)::

    lora params per linear = r * (in + out)

Worked: Llama-2-7B with r=16 on q_proj, v_proj: per layer 16*(4096+4096) * 2 = 262,144;
x 32 layers = 8,388,608 trainable parameters.

Mixtral (transformers 5) keeps its experts as fused 3-D parameters (E, 2i, h) and (E, h, i) and its router
``mlp.gate`` as a plain weight. PEFT 0.21's ``all-linear`` adapts all three (the experts through
``target_parameters``), with these shapes, observed on the meta device and pinned by a test::

    router     lora_A (r, h),      lora_B (E, r)          r*(h + E)
    gate_up    lora_A (2rE, h),    lora_B (2i, 2rE)       2rE*(h + 2i)
    down       lora_A (rE, i),     lora_B (h, rE)         rE*(i + h)

Naming them one by one in ``--targets`` is an error (PEFT matches module names, not parameters).
``modules_to_save`` (``embed_tokens``, ``lm_head``) trains a full copy of the module beside the frozen
original (PEFT's ``ModulesToSaveWrapper``).
"""

from __future__ import annotations

from functools import cache

from memfit.errors import MemfitError
from memfit.estimate.shape import DEFAULT_LORA_TARGETS, Linear, ModelShape
from memfit.estimate.spec import ALL_LINEAR, RunSpec

_TOP_MODULES = ("embed_tokens", "lm_head")


@cache
def block_linears(shape: ModelShape) -> tuple[Linear, ...]:
    """``shape.linears()``, memoised (estimates run thousands of times per second in ``memfit fit``)."""
    return shape.linears()


@cache
def block_linears_by_path(shape: ModelShape) -> dict[str, Linear]:
    return {lin.path: lin for lin in shape.linears()}


def default_lora_targets(model_type: str) -> tuple[str, ...]:
    """PEFT's default LoRA targets for ``model_type``; a MemfitError naming --targets where PEFT has none."""
    targets = DEFAULT_LORA_TARGETS.get(model_type)
    if targets is None:
        hint = "qkv_proj,o_proj" if model_type == "phi3" else "q_proj,v_proj"
        raise MemfitError(f"PEFT has no default LoRA targets for {model_type}: pass --targets {hint} "
                          "(or all-linear)")
    return targets


def lora_targets(shape: ModelShape, spec: RunSpec) -> tuple[str, ...]:
    """The target names in effect: ``spec.targets`` or PEFT's default for the architecture."""
    if spec.targets:
        return spec.targets
    return default_lora_targets(shape.model_type)


def adapted_linears(shape: ModelShape, spec: RunSpec) -> tuple[Linear, ...]:
    """The block linears that carry a LoRA adapter (empty for ``--method full``)."""
    if not spec.is_adapter:
        return ()
    targets = lora_targets(shape, spec)
    lins = block_linears(shape)
    if targets == (ALL_LINEAR,):
        return lins
    chosen = []
    matched: set[str] = set()
    for lin in lins:
        for t in targets:
            if lin.path == t or lin.path.endswith("." + t):
                if not lin.is_nn_linear:
                    raise MemfitError(f"--targets {t} names {lin.path}, which is not an nn.Linear in "
                                      f"{shape.model_type} (fused experts or a router); PEFT cannot adapt it: "
                                      "drop it or use all-linear")
                chosen.append(lin)
                matched.add(t)
                break
    unknown = [t for t in targets if t not in matched and t not in _TOP_MODULES]
    if unknown:
        names = ", ".join(sorted({lin.name for lin in lins if lin.is_nn_linear}))
        raise MemfitError(f"--targets {', '.join(unknown)} matches no linear layer of {shape.model_type}; "
                          f"its linears are: {names} (or all-linear)")
    return tuple(chosen)


def lora_rank(lin: Linear, rank: int) -> int:
    """The adapter's inner width on ``lin``: r, r*E on fused experts, 2*r*E on the fused gate_up experts."""
    if lin.experts > 1:
        return rank * lin.experts * (2 if lin.path.endswith("gate_up_proj") else 1)
    return rank


def lora_linear_params(lin: Linear, rank: int) -> int:
    """lora_A (r' x in) + lora_B (out x r') with r' = :func:`lora_rank`."""
    return lora_rank(lin, rank) * (lin.in_features + lin.out_features)


def lora_params_per_layer(shape: ModelShape, spec: RunSpec) -> int:
    """r * (in + out) summed over the adapted linears of one block."""
    return sum(lora_linear_params(lin, spec.rank) for lin in adapted_linears(shape, spec))


def modules_to_save_params(shape: ModelShape, spec: RunSpec) -> int:
    """Parameters of the trained copies of ``--modules-to-save`` (embed_tokens: V*h; lm_head: V*h)."""
    n = 0
    for m in spec.modules_to_save:
        if m == "embed_tokens":
            n += shape.vocab * shape.embed_dim
        elif m == "lm_head":
            n += shape.vocab * shape.embed_dim
        else:
            raise MemfitError(f"--modules-to-save {m!r}: memfit models embed_tokens and lm_head; "
                              "use `memfit trace` for other modules")
    return n


def lora_trainable_params(shape: ModelShape, spec: RunSpec) -> int:
    """Trainable parameters of a LoRA / QLoRA run, as PEFT's ``print_trainable_parameters`` counts them.

    ``L * sum(r * (in + out))`` over the adapted linears, plus the ``modules_to_save`` copies.
    """
    if not spec.is_adapter:
        raise MemfitError("lora_trainable_params needs --method lora or qlora")
    return shape.n_layers * lora_params_per_layer(shape, spec) + modules_to_save_params(shape, spec)
