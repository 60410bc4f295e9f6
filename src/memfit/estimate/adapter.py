"""What PEFT trains beyond one block's adapters, as PEFT 0.21.2 builds it: which decoder layers carry adapters
(``layers_to_transform``, ``layers_pattern``), which biases train (``bias``), and the run's trainable total.

``layers_to_transform`` (``peft/tuners/tuners_utils.py`` ``check_target_module_exists``): a targeted module is
adapted only if the layer index read from its full name is listed; the index is the first numbered segment of
the name (``model.layers.5.self_attn.q_proj`` -> 5), or with ``layers_pattern`` the one after that name.
Worked: Llama-2-7B, r=16 on q_proj, v_proj, ``layers_to_transform=[0, 1, 5]``: 3 x 262,144 = 786,432 trainable
parameters (all 32 layers: 8,388,608).

The layers without an adapter still run in the graph: once an earlier layer's adapter makes the residual stream
require grad, they save what their frozen ops need for the input gradient (the replay of each layer kind,
:mod:`memfit.estimate.activations`); before the first adapted layer nothing requires grad and they save nothing.

``bias`` (``BaseTuner._mark_only_adapters_as_trainable``): ``"all"`` sets ``requires_grad`` on every parameter whose
name is ``bias`` or ends with ``.bias`` (the block linears', LayerNorms', the final norm's and a biased lm_head's),
in every layer whatever ``layers_to_transform`` says; ``"lora_only"`` on the bias of each LoRA layer (the adapted
linears'). They keep the weights' dtype (fp32 under QLoRA: ``prepare_model_for_kbit_training`` upcasts them) and
train with gradients and optimizer states like any parameter. Worked: Qwen2.5-0.5B (24 layers, q/k/v biased:
896 + 128 + 128), PEFT's default q_proj, v_proj, ``lora_only``: (896 + 128) * 24 = 24,576 biases; ``all``:
(896 + 128 + 128) * 24 = 27,648 (RMSNorm has no bias).

On a mixture of experts (transformers 5.24.0) the fused experts' biases are named ``experts.gate_up_proj_bias`` and
``experts.down_proj_bias`` (GPT-OSS): not ``*.bias``, so no ``--bias`` trains them; a router's bias is
(GPT-OSS's ``mlp.router.bias``, trained under ``all``); ``lora_only`` trains none of either (PEFT's ``ParamWrapper``
has no ``bias``). Mixtral, Qwen3-MoE and DeepSeek-V3 have no bias in their MoE block (DeepSeek's
``e_score_correction_bias`` is a buffer). Worked: gpt-oss-20b, q_proj, v_proj, ``all``: (4096 + 512 + 512 + 2880 +
32) * 24 = 192,768 biases; the expert biases (32 x 5760 + 32 x 2880 per layer) stay frozen.

``trainable_token_indices`` (``peft/tuners/trainable_tokens/layer.py`` ``TrainableTokensLayer``): the input
embedding gains a trained delta (k, h) and a frozen copy of the original rows (a buffer, k, h), both in the
table's dtype, k the listed ids. Each forward builds ``W = weight.index_copy(0, index, delta)``, a (V, h) copy
freed once the lookup is done, and keeps the int64 index for the backward; the backward's embedding gradient is
dense, (V, h) in the table's dtype, before ``index_select`` takes the k rows that become the delta's gradient.
Worked: Llama-2-7B (V 32,000, h 4,096, bf16), 2 ids: 8,192 trained parameters (16 KiB), and a 250 MiB gradient
temporary at the end of the backward.

Tied embeddings (``peft/utils/other.py`` ``set_additional_trainable_modules`` -> ``_set_trainable(tied_adapter=...)``,
``_get_module_names_tied_with_embedding``; transformers 5.24.0 ties ``lm_head.weight`` to the embedding's Parameter):
PEFT wraps the lm_head in a second ``TrainableTokensWrapper`` whose ``TrainableTokensLayer`` is tied to the
embedding's: it takes the same ``trainable_tokens_delta`` ParameterDict, ``trainable_tokens_original`` BufferDict and
indices, so the trained (k, h) delta and the frozen copy exist once (``print_trainable_parameters`` counts k * h, as
untied). Its forward is ``F.linear(x, W)`` with its own ``W = weight.index_copy(0, index, delta)``: a second (V, h)
merged table in the weight's dtype that requires grad, so the matmul saves W (under autocast its compute-dtype copy; the
fp32 W, a local of ``forward_adapters``, is freed when it returns) and its input x until the lm_head's backward, which
makes W's dense (V, h) gradient (under autocast: in the compute dtype, then cast to W's dtype) before ``index_select``
takes the delta's k rows.
The embedding's table and gradient are as untied. Under FSDP2's MixedPrecisionPolicy the table is built from the
gathered parameters, already in the compute dtype (no copy); the sharded case is not measured. Worked: Llama-3.2-1B
(V 128,256, h 2,048, fp32), 1 id: the head keeps a 1,002 MiB merged table from its forward to its backward, and its
backward adds another 1,002 MiB gradient.
"""

from __future__ import annotations

import re
from functools import cache

from memfit.errors import MemfitError
from memfit.estimate.block_parts import Linear, Norm
from memfit.estimate.lora import adapted_linears, lora_params_per_layer, modules_to_save_params, saved_modules
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec


def _layer_index(key: str, patterns: tuple[str, ...]) -> int | None:
    """The layer index PEFT 0.21.2 ``check_target_module_exists`` reads from a full module name under
    ``layers_to_transform``: the first numbered segment (``.*?\\.[^.]*\\.(\\d+)\\.``), or the one after a
    ``layers_pattern`` name (``(?:^|.*?\\.)PATTERN\\.(\\d+)\\.``, the first pattern that matches)."""
    if not patterns:
        hit = re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", key)
    else:
        hit = None
        for pattern in patterns:
            hit = re.match(rf"(?:^|.*?\.){pattern}\.(?P<idx>\d+)\.", key)
            if hit is not None:
                break
    return int(hit.group("idx")) if hit else None


def wrapped(lin: Linear) -> bool:
    """Whether PEFT adapts ``lin`` through ``target_parameters`` (``ParamWrapper``): fused experts, or a router that
    is no ``nn.Linear``. PEFT 0.21.2 ``BaseTuner._inject_parameters`` matches parameter names only, never the layer
    index: ``layers_to_transform`` does not apply to them."""
    return lin.experts > 1 or not lin.is_nn_linear


def adapted_layers(shape: ModelShape, spec: RunSpec) -> tuple[bool, ...]:
    """Whether PEFT adapts something in each decoder layer: all of them, or with ``--layers-to-transform`` those
    whose index (:func:`_layer_index` of each targeted module's full name) is listed, and every layer whose fused
    experts or router carry adapters (:func:`wrapped`: PEFT adapts them in every layer whatever
    ``layers_to_transform`` lists). A MemfitError for an index the model does not have and for a listing that
    leaves no adapter (PEFT: "Target modules ... not found")."""
    if not spec.is_adapter or not spec.layers_to_transform:
        return (spec.is_adapter,) * shape.n_layers
    return tuple(bool(paths) for paths in layer_adapters(shape, spec))


def module_layers(shape: ModelShape, spec: RunSpec) -> tuple[bool, ...]:
    """Whether the ``nn.Linear`` targets carry adapters in each decoder layer (``layers_to_transform`` applies to
    them: :func:`adapted_layers` less the layers where only fused experts or a router are adapted)."""
    if not spec.is_adapter or not spec.layers_to_transform:
        return (spec.is_adapter,) * shape.n_layers
    return _adapted_layers(shape, spec.layers_to_transform, spec.layers_pattern, spec)[0]


def layer_adapters(shape: ModelShape, spec: RunSpec) -> tuple[frozenset[str], ...]:
    """The paths of the block linears PEFT adapts in each decoder layer (empty for a layer without adapters)."""
    if not spec.is_adapter or not spec.layers_to_transform:
        return _every_layer(shape, spec)
    return _adapted_layers(shape, spec.layers_to_transform, spec.layers_pattern, spec)[1]


@cache
def _every_layer(shape: ModelShape, spec: RunSpec) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(lin.path for lin in adapted_linears(shape.layer_shape(i), spec, check=False))
                 if spec.is_adapter else frozenset() for i in range(shape.n_layers))


@cache
def _adapted_layers(shape: ModelShape, layers: tuple[int, ...], patterns: tuple[str, ...],
                    spec: RunSpec) -> tuple[tuple[bool, ...], tuple[frozenset[str], ...]]:
    n = shape.n_layers
    beyond = [i for i in layers if i >= n]
    if beyond:
        raise MemfitError(f"--layers-to-transform {','.join(map(str, beyond))}: {shape.model_type} has {n} decoder "
                          f"layers, indexed 0..{n - 1}")
    prefix = shape.arch.names.model.layers
    flags, sets = [], []
    for i in range(n):
        lins = adapted_linears(shape.layer_shape(i), spec, check=False)
        hits = {_layer_index(f"{prefix}.{i}.{lin.path}", patterns) in layers for lin in lins if not wrapped(lin)}
        if len(hits) > 1:
            raise MemfitError(f"--layers-pattern {','.join(patterns)} gives the linears of layer {i} different layer "
                              "indexes: memfit estimate models whole layers; run `memfit trace` or `memfit measure`")
        flag = bool(hits) and hits.pop()
        flags.append(flag)
        sets.append(frozenset(lin.path for lin in lins if flag or wrapped(lin)))
    if not any(sets):
        where = f" after {','.join(patterns)}" if patterns else ""
        raise MemfitError(f"--layers-to-transform {','.join(map(str, layers))}{where} leaves no module with an adapter "
                          f"(PEFT: 'Target modules ... not found'): its layers are {prefix}.0..{n - 1}"
                          + (f"; drop --layers-pattern or use {prefix.rsplit('.', 1)[-1]}" if patterns else ""))
    return tuple(flags), tuple(sets)


def adapter_layer_groups(shape: ModelShape, spec: RunSpec) -> tuple[tuple[ModelShape, frozenset[str], int], ...]:
    """:meth:`ModelShape.layer_groups` counting only the layers PEFT adapts (:func:`adapted_layers`), each kind with
    the paths of its adapted linears (:func:`layer_adapters`: a layer ``--layers-to-transform`` does not list keeps
    its fused experts' and router's adapters)."""
    flags, sets = adapted_layers(shape, spec), layer_adapters(shape, spec)
    counts: dict[tuple[ModelShape, frozenset[str]], int] = {}
    for i in range(shape.n_layers):
        if flags[i]:
            key = (shape.layer_shape(i), sets[i])
            counts[key] = counts.get(key, 0) + 1
    return tuple((sub, paths, n) for (sub, paths), n in counts.items())


def trained_biases(shape: ModelShape, spec: RunSpec) -> tuple[tuple[Linear | Norm, ...], tuple[int, ...]]:
    """The block linears and norms of one block of ``shape``'s (uniform) kind whose bias trains under ``--bias``,
    and the sizes of the biases outside the blocks that train (``all``: the final norm's, a biased lm_head's)."""
    if spec.bias == "none" or not spec.is_adapter:
        return (), ()
    if spec.bias == "lora_only":
        return tuple(lin for lin in adapted_linears(shape, spec, check=False) if lin.bias and _named_bias(lin)
                     and lin.is_nn_linear), ()
    parts: tuple[Linear | Norm, ...] = tuple(lin for lin in shape.linears() if lin.bias and _named_bias(lin)) + tuple(
        n for n in shape.norms() if n.bias)
    top = ((shape.hidden,) if shape.final_norm and shape.layout.norm_bias else ()) + (
        (shape.vocab,) if shape.layout.head_bias else ())
    return parts, top


def _named_bias(lin: Linear) -> bool:
    """Whether ``lin``'s bias is a parameter named ``*.bias``, which ``bias="all"`` trains: not fused experts'
    (GPT-OSS's ``experts.gate_up_proj_bias`` and ``experts.down_proj_bias``, transformers 5.24.0), which stay frozen
    under every ``--bias``; a router's is (GPT-OSS's ``mlp.router.bias``)."""
    return lin.experts == 1


def trains_bias(spec: RunSpec, adapted: bool, lin: Linear | None = None) -> bool:
    """Whether ``--bias`` trains a block linear's bias (``adapted``: the linear carries LoRA; ``lin``: the linear,
    whose fused experts' bias never trains, and whose bias ``lora_only`` trains only on an ``nn.Linear`` LoRA layer:
    PEFT's ``ParamWrapper`` has no ``bias``, :func:`trained_biases`)."""
    if lin is not None and not _named_bias(lin):
        return False
    return spec.bias == "all" or (spec.bias == "lora_only" and adapted and (lin is None or lin.is_nn_linear))


def bias_size(part: Linear | Norm) -> int:
    """Elements of a linear's or a norm's bias."""
    return part.out_features if isinstance(part, Linear) else part.size


def bias_layer_groups(shape: ModelShape, spec: RunSpec) -> tuple[tuple[ModelShape, int], ...]:
    """The layers whose biases train: every layer with ``all``, with ``lora_only`` those whose ``nn.Linear`` targets
    are adapted (:func:`module_layers`; a ``ParamWrapper`` has no bias)."""
    if spec.bias != "lora_only":
        return shape.layer_groups()
    flags = module_layers(shape, spec)
    counts: dict[ModelShape, int] = {}
    for i in range(shape.n_layers):
        if flags[i]:
            sub = shape.layer_shape(i)
            counts[sub] = counts.get(sub, 0) + 1
    return tuple(counts.items())


def trained_bias_params(shape: ModelShape, spec: RunSpec) -> int:
    """Elements of the biases ``--bias`` trains (module docstring)."""
    if spec.bias == "none":
        return 0
    blocks = sum(n * sum(bias_size(p) for p in trained_biases(sub, spec)[0]) for sub, n in bias_layer_groups(shape,
                                                                                                             spec))
    return blocks + sum(trained_biases(shape, spec)[1])


def trainable_tokens(shape: ModelShape, spec: RunSpec) -> int:
    """k, the embedding rows ``--trainable-tokens`` trains (module docstring); 0 without it. A MemfitError for an id
    past the vocabulary, for the embedding also in ``--modules-to-save`` (PEFT's error), and for tied embeddings
    with a fused loss head (``--loss chunked`` / ``trl`` read the lm_head's merged weight: not modelled)."""
    ids = spec.trainable_token_indices if spec.is_adapter else ()
    if not ids:
        return 0
    beyond = [i for i in ids if i >= shape.vocab]
    if beyond:
        raise MemfitError(f"--trainable-tokens {','.join(map(str, beyond))}: past the vocabulary ({shape.vocab:,} "
                          f"ids, 0..{shape.vocab - 1})")
    if any(m.role == "embed" for m in saved_modules(shape, spec)):
        raise MemfitError("--trainable-tokens and --modules-to-save both train the embedding (PEFT: 'The embedding "
                          "layer is already marked to be trained fully'): pass one of them")
    if spec.loss != "standard" and not fused_loss_modelled(shape, spec):
        raise MemfitError(f"--trainable-tokens on tied embeddings with --loss {spec.loss}: the fused loss head reads "
                          "the lm_head's merged (V, h) weight, not modelled by memfit estimate; use --loss standard, "
                          "or run `memfit trace` or `memfit measure`")
    return len(ids)


def fused_loss_modelled(shape: ModelShape, spec: RunSpec) -> bool:
    """Whether the estimate models a fused loss head (``--loss chunked`` / ``trl``) for this run: not with
    ``--trainable-tokens`` on tied embeddings (the fused head reads the lm_head's merged weight), so that ``memfit
    fit`` leaves that remedy out."""
    return not (spec.is_adapter and spec.trainable_token_indices and shape.tie_embeddings)


def tied_token_head(shape: ModelShape, spec: RunSpec) -> bool:
    """Whether the lm_head is a ``TrainableTokensLayer`` tied to the embedding's (module docstring): tied embeddings
    and ``--trainable-tokens``."""
    return shape.tie_embeddings and trainable_tokens(shape, spec) > 0


def lora_trainable_params(shape: ModelShape, spec: RunSpec) -> int:
    """Trainable parameters of a LoRA / QLoRA run, as PEFT's ``print_trainable_parameters`` counts them.

    ``L * sum(r * (in + out))`` over the adapted linears (per layer kind; L the adapted layers, all of them unless
    ``--layers-to-transform``), plus the ``modules_to_save`` copies.
    """
    if not spec.is_adapter:
        raise MemfitError("lora_trainable_params needs --method lora or qlora")
    adapted_linears(shape, spec)  # the targets' check, against every layer kind
    blocks = sum(n * lora_params_per_layer(sub, spec, paths) for sub, paths, n in adapter_layer_groups(shape, spec))
    return blocks + modules_to_save_params(shape, spec) + trained_bias_params(shape, spec) + trainable_tokens(
        shape, spec) * shape.embed_dim
