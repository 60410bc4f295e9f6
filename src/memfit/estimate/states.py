"""Model states: weights (frozen and trained), gradients and optimizer states, in bytes.

Bytes per parameter (the lesson's warm-up, worked):

==========================================  =====================================================
run                                         bytes
==========================================  =====================================================
trainable, mixed precision, torch AdamW     4 (fp32 master) + 4 (fp32 grad) + 4 + 4 (exp_avg,
                                            exp_avg_sq in the parameter's dtype)  = 16
frozen, bf16                                2
trainable LoRA adapter (fp32, PEFT default) 4 + 4 + 8 = 16
QLoRA base linear, NF4                      0.5 + 4/64 (fp32 absmax per 64-block) = 0.5625; with
                                            double quantisation 0.5 + 1/64 + 4/(64*256) = 0.5159
adamw-8bit (bitsandbytes)                   2 x 1 byte + 2 x 4 B absmax per 256-block (tensors of
                                            >= 4096 elements; smaller ones keep 32-bit states)
paged-adamw-8bit / paged-adamw-32bit        as adamw-8bit / 2 x 4 B (fp32 states whatever the
                                            parameter's dtype), in CUDA unified memory (see below)
LLM.int8 base linear (int8-lora)            1 (int8) + 4 B per output row (fp32 ``SCB``)
sgd / sgd-momentum                          0 / 1 x the parameter's dtype
adafactor                                   fp32 row + column second moments per >= 2-D tensor, a
                                            full fp32 second moment per 1-D tensor (see below)
==========================================  =====================================================

AdamW also keeps one ``step`` tensor per parameter tensor: fp32 0-dim, on the CPU unless
``capturable``/``fused`` (torch 2.13.0 ``Adam._init_group``): it counts for ``--device cpu``, and on CUDA for the
fused kernel, as one 512-byte allocator block each (``CUDA_BLOCK_BYTES``).

Per 4-bit linear, bitsandbytes 0.50 (``functional.quantize_4bit``, checked against its tensors in
``tests/estimate/test_quant_storage.py``) keeps, besides the packed weight (ceil(n/2) B, uint8) and the absmax
(fp32 per 64-block): its own NF4 code (16 fp32 = 64 B, not shared between layers); with double quantisation the
absmax is uint8 and the nested state adds an fp32 ``offset`` (4 B), ``state2.absmax`` (fp32 per 256 absmax values)
and ``state2.code`` (the 256-entry fp32 dynamic map, 1,024 B, again per layer).

bitsandbytes' paged optimizers (``paged-adamw-*``, transformers' ``paged_adamw_8bit`` / ``paged_adamw_32bit``)
allocate their states with ``cudaMallocManaged`` (``bitsandbytes.functional.get_paged``): unified memory that
``torch.cuda.memory_allocated`` / ``memory_reserved`` do not count and that the driver pages out to host memory
when the GPU runs short. The estimate keeps them out of the device peak and reports them apart
(:attr:`ModelStates.paged_optimizer`); ``nvidia-smi`` shows them while they are resident.

Adafactor is ``transformers.optimization.Adafactor`` (transformers 5.24), the one the HF Trainer builds for
``optim="adafactor"`` (``trainer_optimizer._get_adafactor``: ``scale_parameter=False, relative_step=False``,
``beta1=None``) and the one ``memfit measure`` and ``memfit trace`` run. It has no foreach path: CPU and CUDA
run the same per-tensor loop. Per trainable tensor of n elements:

- state: for a tensor of >= 2 dimensions, ``exp_avg_sq_row`` of shape[:-1] and ``exp_avg_sq_col`` of
  shape[:-2] + shape[-1:], so rows + cols elements (a (out, in) weight: out + in; Mixtral's fused experts
  (E, a, b): E*a + E*b); for a 1-D tensor, ``exp_avg_sq`` of n elements. Both fp32 whatever the parameter's
  dtype (created ``.to(grad)`` from the fp32-upcast gradient). Plus ``RMS``, a 0-dim fp32 tensor on the
  parameter's device (4 B); ``step`` is a Python int. No first moment (``beta1=None``).
- step temporaries, alive while that tensor is updated: for a bf16/fp16 parameter, fp32 copies of the
  gradient and of the parameter (4n + 4n); then ``update`` (4n) and the next ``update`` (4n) with, for a
  factored tensor, the row and column factors (4 * (rows + cols)) alive at ``torch.mul(r_factor, c_factor)``.
  The step's peak is at the tensor for which that is largest (the embedding, in practice).

Worked for Llama-3.2-1B, bf16, full fine-tune: the tied embedding (128,256 x 2,048, n = 262,668,288) keeps
4 * (128,256 + 2,048) + 4 = 521,220 B of state, and its update allocates 16 * n + 4 * 130,304 =
4,203,213,824 B, against 2 * 2 * n = 1,050,673,152 B for two copies of the bf16 tensor (memfit's figure
before it modelled this). ``torch.optim.Adafactor`` (torch >= 2.5) keeps other state (a ``step`` tensor,
row/col variances in the parameter's dtype) and has a foreach path; memfit does not model it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from memfit.estimate.adapter import (
    adapted_layers,
    adapter_layer_groups,
    bias_layer_groups,
    bias_size,
    layer_adapters,
    module_layers,
    trainable_tokens,
    trained_biases,
)
from memfit.estimate.block_parts import Linear
from memfit.estimate.constants import CUDA_BLOCK_BYTES, FP32_BYTES
from memfit.estimate.lora import adapted_linears, block_linears, lora_rank, rank_of, saved_modules
from memfit.estimate.params import ParamCount, count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

NF4_BLOCK = 64
DQ_BLOCK = 256
ADAM8_BLOCK = 256
ADAM8_MIN_SIZE = 4096
NF4_CODE_BYTES = 16 * FP32_BYTES  # bitsandbytes get_4bit_type("nf4"): 16 fp32 values, one copy per quantised layer
DQ_CODE_BYTES = 256 * FP32_BYTES  # create_dynamic_map(signed=True): 256 fp32 values, per layer (state2.code)
DQ_OFFSET_BYTES = FP32_BYTES  # QuantState.offset: 0-dim fp32
ADAM8_QMAP_BYTES = 2 * 256 * FP32_BYTES  # AdamW8bit's "dynamic" and "udynamic" maps, shared by every parameter


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStates:
    """Full sizes of the model states, whatever the phase of the step."""

    weights_frozen: int
    weights_trainable: int
    gradients: int
    optimizer: int
    trainable_params: int
    frozen_params: int
    largest_tensor: int  # bytes of the largest trainable tensor (the CPU optimizer loop's temporaries)
    adafactor_step: int  # bytes Adafactor's update of its costliest tensor allocates (adafactor_step_bytes)
    n_tensors: int  # number of trainable tensors
    grads_per_layer: int  # gradient bytes of one block's trainable tensors
    grads_head: int  # lm_head (or its modules_to_save copy) gradient bytes
    grads_embed: int  # token (+ position) embedding gradient bytes
    grads_other: int  # final norm etc.
    paged_optimizer: int = 0  # optimizer states in CUDA unified memory (paged-adamw-*), not in ``optimizer``
    grads_layers: tuple[int, ...] = ()  # --layers-to-transform: each decoder layer's gradient bytes, in layer order

    def layer_grads(self, n_layers: int) -> tuple[int, ...]:
        """Gradient bytes of each decoder layer as the step books them: each layer's own under
        ``--layers-to-transform`` (0 for a layer without an adapter or a trained bias), else the typical block's
        ``grads_per_layer`` in every layer."""
        return self.grads_layers or (self.grads_per_layer,) * n_layers

    @property
    def total(self) -> int:
        return self.weights_frozen + self.weights_trainable + self.gradients + self.optimizer

    @property
    def grads_blocks(self) -> int:
        """Gradient bytes of every decoder block's trainable tensors (the gradients outside the head, the
        embeddings and the final norm)."""
        return self.gradients - self.grads_head - self.grads_embed - self.grads_other

    def to_dict(self) -> dict[str, int]:
        return {"weights_frozen": self.weights_frozen, "weights_trainable": self.weights_trainable,
                "gradients": self.gradients, "optimizer": self.optimizer}

    def breakdown(self) -> dict[str, int]:
        out = {f"model_states/{k}": v for k, v in self.to_dict().items()}
        out["model_states/total"] = self.total
        return out


@cache
def _count(shape: ModelShape) -> ParamCount:
    return count_params(shape)


def bnb_quantised(lin: Linear) -> bool:
    """Whether transformers 5.24's bitsandbytes integration quantises this block linear: an ``nn.Linear`` module,
    not the MoE router or the fused experts (3-D ``nn.Parameter`` tensors: module docstring of the quantised states)."""
    return lin.experts == 1 and lin.role != "router"


def nf4_bytes(numel: int, double_quant: bool) -> int:
    """bitsandbytes NF4 storage of one quantised weight of ``numel`` elements: 4 bits each, the per-64-block
    absmax constants and the layer's quantisation maps (module docstring).

    Without double quantisation the absmax is fp32 (4 B per 64 weights); with it, the absmax is 8-bit
    (1 B per 64) with one fp32 scale per 256 absmax values, an fp32 offset and the nested 256-entry code.
    Worked for a 4096 x 4096 weight (16,777,216 elements, 262,144 blocks): 8,388,608 + 1,048,576 + 64 =
    9,437,248 B plain; 8,388,608 + 262,144 + 4,096 + 64 + 4 + 1,024 = 8,655,940 B with double quantisation.
    """
    blocks = -(-numel // NF4_BLOCK)
    packed = -(-numel // 2) + NF4_CODE_BYTES
    if double_quant:
        return packed + blocks + FP32_BYTES * -(-blocks // DQ_BLOCK) + DQ_OFFSET_BYTES + DQ_CODE_BYTES
    return packed + FP32_BYTES * blocks


def int8_bytes(out_features: int, in_features: int) -> int:
    """bitsandbytes LLM.int8 storage of one (out, in) weight (``Int8Params`` after ``int8_vectorwise_quant``):
    the int8 matrix (``CB``, 1 B per element) and one fp32 absmax per output row (``SCB``). Worked for 4096 x
    4096: 16,777,216 + 16,384 = 16,793,600 B."""
    return out_features * in_features + FP32_BYTES * out_features


def optimizer_bytes(tensors: list[tuple[int, int, int]], spec: RunSpec) -> int:
    """Optimizer state bytes for trainable tensors given as (elements, bytes per element, rows + cols).

    ``rows + cols`` is 0 for a 1-D tensor; for a tensor of >= 2 dimensions it is prod(shape[:-1]) +
    prod(shape[:-2]) * shape[-1] (Adafactor's factored second moment, see the module docstring).
    """
    total = 0
    step = FP32_BYTES if spec.device == "cpu" else (CUDA_BLOCK_BYTES if spec.adamw_impl == "fused" else 0)
    for numel, bpe, factored in tensors:
        if spec.optimizer == "adamw":
            total += 2 * numel * bpe + step
        elif spec.optimizer in ("adamw-8bit", "paged-adamw-8bit"):
            if numel >= ADAM8_MIN_SIZE:
                total += 2 * numel + 2 * FP32_BYTES * -(-numel // ADAM8_BLOCK)
            else:
                total += 2 * numel * FP32_BYTES
        elif spec.optimizer == "paged-adamw-32bit":  # bitsandbytes' 32-bit states are fp32 (Optimizer2State)
            total += 2 * numel * FP32_BYTES
        elif spec.optimizer == "sgd":
            total += 0
        elif spec.optimizer == "sgd-momentum":
            total += numel * bpe
        else:  # adafactor: fp32 rows + cols per matrix, a full fp32 second moment per vector, a 0-dim fp32 RMS
            total += FP32_BYTES * (factored or numel) + FP32_BYTES
    return total


def adafactor_step_bytes(numel: int, bpe: int, factored: int) -> int:
    """What transformers' Adafactor allocates while it updates one tensor (module docstring): fp32 copies of a
    16-bit gradient and parameter, two ``update`` tensors and, for a matrix, its row and column factors."""
    upcast = 2 * FP32_BYTES * numel if bpe < FP32_BYTES else 0
    return upcast + 2 * FP32_BYTES * numel + FP32_BYTES * factored


def _router_fp32(shape: ModelShape, lin: Linear) -> bool:
    """Whether ``lin`` is a router weight the model keeps in fp32 whatever its dtype (``MoeLayout.router_weight_fp32``:
    DeepSeek-V3's ``gate.weight``)."""
    moe = shape.layout.moe
    return lin.role == "router" and moe is not None and moe.router_weight_fp32


def fp32_router_extra(shape: ModelShape, w: int) -> int:
    """Bytes the fp32-kept router weights add over ``w`` bytes per element, over all layers: 0 unless
    ``w`` < 4. Worked for Moonlight-16B-A3B in bf16 (26 MoE layers of a 64 x 2,048 router):
    26 x 131,072 x (4 - 2) = 6,815,744 B."""
    if w >= FP32_BYTES:
        return 0
    return sum(lin.weight_numel * n * (FP32_BYTES - w) for sub, n in shape.layer_groups()
               for lin in block_linears(sub) if _router_fp32(sub, lin))


def _linear_tensors(lin: Linear, w: int) -> list[tuple[int, int, int]]:
    """A block linear's weight (out, in) or fused experts (E, out, in), and its bias."""
    out = [(lin.weight_numel, w, lin.experts * (lin.in_features + lin.out_features))]
    if lin.bias:
        out.append((lin.out_features * lin.experts, w, lin.experts + lin.out_features if lin.experts > 1 else 0))
    return out


def _block_tensors(shape: ModelShape, spec: RunSpec, paths: frozenset[str] | None = None
                   ) -> list[tuple[int, int, int]]:
    """(elements, bytes per element, rows + cols or 0 for a vector) of each trainable tensor of one block of
    ``shape``'s (uniform) kind (``paths``: the adapted linears of this layer, under ``--layers-to-transform``)."""
    w, out = spec.weight_bytes, []
    if spec.method == "full":
        for lin in block_linears(shape):
            out += _linear_tensors(lin, FP32_BYTES if _router_fp32(shape, lin) else w)
        for norm in shape.norms():
            out += [(norm.size, w, 0)] * (2 if norm.bias else 1)
        return out + [(param.size, w, 0) for param in shape.block_params()]
    for lin in adapted_linears(shape, spec, check=False):
        if paths is not None and lin.path not in paths:
            continue
        r = lora_rank(lin, rank_of(shape, spec, lin))
        # lora_A (r', in) and lora_B (out, r')
        out += [(r * lin.in_features, FP32_BYTES, r + lin.in_features),
                (r * lin.out_features, FP32_BYTES, lin.out_features + r)]
        if spec.use_dora:  # DoRA's magnitude (lora_magnitude_vector[...].weight): one fp32 vector of out
            out.append((lin.out_features, FP32_BYTES, 0))
    return out


def _layer_tensors(shape: ModelShape, spec: RunSpec, i: int) -> list[tuple[int, int, int]]:
    """:func:`_block_tensors` of decoder layer ``i`` as trained: its adapters where PEFT adapts it (every block
    linear under ``--method full``) and the biases ``--bias`` trains in it (in every layer with ``all``, in the layers
    whose ``nn.Linear`` targets carry LoRA with ``lora_only``), in the weights' dtype (fp32 under a quantised base)."""
    sub = shape.layer_shape(i)
    tensors = _block_tensors(sub, spec, layer_adapters(shape, spec)[i]) \
        if adapted_layers(shape, spec)[i] or spec.method == "full" else []
    if spec.bias == "all" or (spec.bias == "lora_only" and module_layers(shape, spec)[i]):
        bias_b = FP32_BYTES if spec.is_quantised else spec.weight_bytes
        tensors += [(bias_size(p), bias_b, 0) for p in trained_biases(sub, spec)[0]]
    return tensors


def _adapter_layer_grads(shape: ModelShape, spec: RunSpec) -> tuple[int, ...]:
    """Gradient bytes of each decoder layer under ``--layers-to-transform`` (:func:`_layer_tensors`). Worked: scaled
    Llama 3.2 (h 256, kv 64, 4 layers), r 16 on q_proj, v_proj, layers 0,2: 4 x 16 x ((256 + 256) + (256 + 64)) =
    53,248 B in layers 0 and 2, 0 in 1 and 3."""
    return tuple(sum(n * b for n, b, _ in _layer_tensors(shape, spec, i)) for i in range(shape.n_layers))


def model_states(shape: ModelShape, spec: RunSpec) -> ModelStates:
    """Weights, gradients and optimizer states of the run; see the module docstring."""
    pc = _count(shape)
    w = spec.weight_bytes
    fp32_routers = fp32_router_extra(shape, w)
    adapted_linears(shape, spec)  # the targets' check, against every layer kind
    # each block kind's trainable tensors and its number of layers; the last layer's kind is the typical block
    # (--layers-to-transform: the adapted layers only, and the last layer may have no adapter)
    trained = adapter_layer_groups(shape, spec) if spec.is_adapter else tuple(
        (sub, None, n) for sub, n in shape.layer_groups())
    groups = [(_block_tensors(sub, spec, paths), n) for sub, paths, n in trained]
    per_layer_tensors = _layer_tensors(shape, spec, shape.n_layers - 1)
    # --bias: the trained biases, in the weights' dtype (fp32 under a quantised base), per layer kind
    bias_b = FP32_BYTES if spec.is_quantised else w
    bias_groups = [([(bias_size(p), bias_b, 0) for p in trained_biases(sub, spec)[0]], n)
                   for sub, n in bias_layer_groups(shape, spec)] if spec.bias != "none" else []
    groups += bias_groups
    all_blocks = [t for tensors, _ in groups for t in tensors]
    blocks_optimizer = sum(optimizer_bytes(tensors, spec) * n for tensors, n in groups)
    blocks_tensors = sum(len(tensors) * n for tensors, n in groups)
    if spec.method == "full":
        embed = [(shape.vocab * shape.embed_dim, w, shape.vocab + shape.embed_dim)]
        if shape.layout.position == "learned":
            positions = pc.embeddings - shape.vocab * shape.embed_dim
            embed.append((positions, w, positions // shape.hidden + shape.hidden))
        head = [] if shape.tie_embeddings else [(shape.vocab * shape.embed_dim, w, shape.vocab + shape.embed_dim)]
        if shape.layout.head_bias:
            head.append((shape.vocab, w, 0))
        other: list[tuple[int, int, int]] = []
        if pc.final_norm:  # weight, and bias for LayerNorm
            other += [(shape.hidden, w, 0)] * (pc.final_norm // shape.hidden)
        if pc.other:  # OPT's project_in (h, proj) and project_out (proj, h)
            other += [(pc.other // 2, w, shape.hidden + shape.embed_proj_dim)] * 2
        rest = embed + head + other
        trainable = pc.total
        tensors = all_blocks + rest
        opt = blocks_optimizer + optimizer_bytes(rest, spec)
        if spec.optimizer in ("adamw-8bit", "paged-adamw-8bit") and any(n >= ADAM8_MIN_SIZE for n, _, _ in tensors):
            opt += ADAM8_QMAP_BYTES
        return ModelStates(
            weights_frozen=0, weights_trainable=trainable * w + fp32_routers,
            gradients=trainable * w + fp32_routers,
            optimizer=0 if spec.is_paged else opt, paged_optimizer=opt if spec.is_paged else 0,
            trainable_params=trainable, frozen_params=0,
            largest_tensor=max(n * b for n, b, _ in tensors),
            adafactor_step=max(adafactor_step_bytes(*t) for t in tensors),
            n_tensors=blocks_tensors + len(rest),
            grads_per_layer=sum(n * b for n, b, _ in per_layer_tensors),
            grads_head=sum(n * b for n, b, _ in head), grads_embed=sum(n * b for n, b, _ in embed),
            grads_other=sum(n * b for n, b, _ in other),
        )
    # LoRA / QLoRA: the base is frozen, adapters (and modules_to_save copies) train
    lora_params = sum(sum(n for n, _, _ in tensors) * layers for tensors, layers in groups)
    saved = saved_modules(shape, spec)
    mts = sum(m.numel for m in saved)
    mts_b = FP32_BYTES if spec.is_quantised else w
    head_t = [(m.numel, mts_b, m.rows + m.cols) for m in saved if m.role == "head"]
    emb_t = [(m.numel, mts_b, m.rows + m.cols) for m in saved if m.role == "embed"]
    top_biases = [(n, bias_b, 0) for n in trained_biases(shape, spec)[1]]  # --bias all: final norm, lm_head
    k = trainable_tokens(shape, spec)
    if k:  # --trainable-tokens: the delta rows (k, h) in the table's dtype
        emb_t.append((k * shape.embed_dim, mts_b, k + shape.embed_dim))
    rest = head_t + emb_t + top_biases
    tensors = all_blocks + rest
    block_biases = sum(sum(n for n, _, _ in ts) * layers for ts, layers in bias_groups)
    lora_params -= block_biases  # the groups' sum above counted them
    biases = block_biases + sum(n for n, _, _ in top_biases)
    tokens = k * shape.embed_dim
    trainable_bytes = lora_params * FP32_BYTES + mts * mts_b + biases * bias_b + tokens * mts_b
    if spec.is_quantised:
        # each block linear quantised on its own (its blocks, its maps), per layer kind; the rest upcast to fp32
        # by PEFT's prepare_model_for_kbit_training. transformers 5.24 quantises nn.Linear / Conv1D modules only
        # (integrations/bitsandbytes.py replace_with_bnb_linear: ``type(module) is nn.Linear``): the MoE router
        # and fused experts are nn.Parameters of MixtralExperts / Qwen3MoeExperts / GptOssExperts /
        # DeepseekV3Experts and their TopKRouters, kept in the load dtype, then fp32 (PEFT 0.21.2 casts every
        # fp16/bf16 parameter that is not Params4bit)
        lin_groups = [(tuple(lin for lin in block_linears(sub) if bnb_quantised(lin)), n)
                      for sub, n in shape.layer_groups()]
        lin_numel = sum(lin.weight_numel * n for lins, n in lin_groups for lin in lins)
        if spec.method == "qlora":
            quantised = sum(nf4_bytes(lin.weight_numel, spec.double_quant) * n
                            for lins, n in lin_groups for lin in lins)
        else:
            quantised = sum(int8_bytes(lin.out_features * lin.experts, lin.in_features) * n
                            for lins, n in lin_groups for lin in lins)
        frozen = quantised + (pc.total - lin_numel) * FP32_BYTES
    else:
        frozen = pc.total * w + fp32_routers
    frozen -= biases * bias_b  # a trained bias is the base's own tensor, not a copy
    frozen += tokens * mts_b  # --trainable-tokens: the original rows, kept as a buffer
    opt = blocks_optimizer + optimizer_bytes(rest, spec)
    if spec.optimizer in ("adamw-8bit", "paged-adamw-8bit") and any(n >= ADAM8_MIN_SIZE for n, _, _ in tensors):
        opt += ADAM8_QMAP_BYTES
    return ModelStates(
        grads_layers=_adapter_layer_grads(shape, spec) if spec.layers_to_transform else (),
        weights_frozen=frozen, weights_trainable=trainable_bytes, gradients=trainable_bytes,
        optimizer=0 if spec.is_paged else opt, paged_optimizer=opt if spec.is_paged else 0,
        trainable_params=lora_params + mts + biases + tokens, frozen_params=pc.total - biases,
        largest_tensor=max((n * b for n, b, _ in tensors), default=0),
        adafactor_step=max((adafactor_step_bytes(*t) for t in tensors), default=0),
        n_tensors=blocks_tensors + len(rest),
        grads_per_layer=sum(n * b for n, b, _ in per_layer_tensors),
        grads_head=sum(n * b for n, b, _ in head_t), grads_embed=sum(n * b for n, b, _ in emb_t),
        grads_other=sum(n * b for n, b, _ in top_biases),
    )


def optimizer_temporaries(states: ModelStates, spec: RunSpec) -> int:
    """Extra bytes the optimizer step allocates on top of its states (torch 2.13.0 ``torch/optim/adam.py``).

    ``--adamw-impl`` picks torch AdamW's path explicitly (``fused=True`` / ``foreach=True`` / both False), as the
    Trainer's ``optim`` names do (``adamw_torch_fused``, the default, and ``adamw_torch``, which on CUDA takes
    torch's default for-each path):

    - ``fused``: ``torch._fused_adamw_`` updates every tensor in place, no temporaries (CPU and CUDA);
    - ``foreach``: ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`` makes one temporary per tensor at
      once: the size of every trainable tensor (the second moments are in the parameters' dtype);
    - ``forloop``: ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` one tensor at a time: two
      temporaries the size of the largest trainable tensor.

    bitsandbytes' 8-bit and paged kernels update in place (none); SGD with momentum none; transformers'
    Adafactor, on either device, what its update of the costliest tensor allocates (:func:`adafactor_step_bytes`).
    """
    if spec.optimizer == "adafactor":
        return states.adafactor_step
    if spec.optimizer == "adamw":
        if spec.adamw_impl == "foreach":
            return states.weights_trainable
        if spec.adamw_impl == "forloop":
            return 2 * states.largest_tensor
    return 0
