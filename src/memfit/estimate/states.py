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
sgd / sgd-momentum                          0 / 1 x the parameter's dtype
adafactor                                   fp32 row + column second moments per >= 2-D tensor, a
                                            full fp32 second moment per 1-D tensor (see below)
==========================================  =====================================================

AdamW also keeps one ``step`` tensor per parameter tensor: fp32 0-dim, on the CPU unless
``capturable``/``fused`` (so it counts only for ``--device cpu``).

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

from memfit.estimate.block_parts import Linear
from memfit.estimate.constants import FP32_BYTES
from memfit.estimate.lora import adapted_linears, block_linears, lora_rank, rank_of, saved_modules
from memfit.estimate.params import ParamCount, count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

NF4_BLOCK = 64
DQ_BLOCK = 256
ADAM8_BLOCK = 256
ADAM8_MIN_SIZE = 4096


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

    @property
    def total(self) -> int:
        return self.weights_frozen + self.weights_trainable + self.gradients + self.optimizer

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


def nf4_bytes(numel: int, double_quant: bool) -> int:
    """bitsandbytes NF4 storage of ``numel`` weights: 4 bits each plus the per-64-block absmax constants.

    Without double quantisation the absmax is fp32 (4 B per 64 weights); with it, the absmax is 8-bit
    (1 B per 64) with one fp32 scale per 256 absmax values. Worked for a 4096 x 4096 weight
    (16,777,216 elements): 8,388,608 + 1,048,576 = 9,437,184 B plain; 8,388,608 + 262,144 + 4,096 =
    8,654,848 B with double quantisation.
    """
    blocks = -(-numel // NF4_BLOCK)
    if double_quant:
        return numel // 2 + blocks + FP32_BYTES * -(-blocks // DQ_BLOCK)
    return numel // 2 + FP32_BYTES * blocks


def optimizer_bytes(tensors: list[tuple[int, int, int]], spec: RunSpec) -> int:
    """Optimizer state bytes for trainable tensors given as (elements, bytes per element, rows + cols).

    ``rows + cols`` is 0 for a 1-D tensor; for a tensor of >= 2 dimensions it is prod(shape[:-1]) +
    prod(shape[:-2]) * shape[-1] (Adafactor's factored second moment, see the module docstring).
    """
    total = 0
    step = FP32_BYTES if spec.device == "cpu" else 0
    for numel, bpe, factored in tensors:
        if spec.optimizer == "adamw":
            total += 2 * numel * bpe + step
        elif spec.optimizer == "adamw-8bit":
            if numel >= ADAM8_MIN_SIZE:
                total += 2 * numel + 2 * FP32_BYTES * -(-numel // ADAM8_BLOCK)
            else:
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


def _linear_tensors(lin: Linear, w: int) -> list[tuple[int, int, int]]:
    """A block linear's weight (out, in) or fused experts (E, out, in), and its bias."""
    out = [(lin.weight_numel, w, lin.experts * (lin.in_features + lin.out_features))]
    if lin.bias:
        out.append((lin.out_features * lin.experts, w, lin.experts + lin.out_features if lin.experts > 1 else 0))
    return out


def model_states(shape: ModelShape, spec: RunSpec) -> ModelStates:
    """Weights, gradients and optimizer states of the run; see the module docstring."""
    pc = _count(shape)
    w = spec.weight_bytes
    # (elements, bytes per element, rows + cols or 0 for a vector) of each trainable tensor of one block
    per_layer_tensors: list[tuple[int, int, int]] = []
    if spec.method == "full":
        for lin in block_linears(shape):
            per_layer_tensors += _linear_tensors(lin, w)
        for norm in shape.norms():
            per_layer_tensors.append((norm.size, w, 0))
            if norm.bias:
                per_layer_tensors.append((norm.size, w, 0))
        for param in shape.block_params():
            per_layer_tensors.append((param.size, w, 0))
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
        tensors = per_layer_tensors + rest
        return ModelStates(
            weights_frozen=0, weights_trainable=trainable * w, gradients=trainable * w,
            optimizer=optimizer_bytes(per_layer_tensors, spec) * shape.n_layers + optimizer_bytes(rest, spec),
            trainable_params=trainable, frozen_params=0,
            largest_tensor=max(n * b for n, b, _ in tensors),
            adafactor_step=max(adafactor_step_bytes(*t) for t in tensors),
            n_tensors=len(per_layer_tensors) * shape.n_layers + len(rest),
            grads_per_layer=sum(n * b for n, b, _ in per_layer_tensors),
            grads_head=sum(n * b for n, b, _ in head), grads_embed=sum(n * b for n, b, _ in embed),
            grads_other=sum(n * b for n, b, _ in other),
        )
    # LoRA / QLoRA: the base is frozen, adapters (and modules_to_save copies) train
    for lin in adapted_linears(shape, spec):
        r = lora_rank(lin, rank_of(shape, spec, lin))
        # lora_A (r', in) and lora_B (out, r')
        per_layer_tensors += [(r * lin.in_features, FP32_BYTES, r + lin.in_features),
                              (r * lin.out_features, FP32_BYTES, lin.out_features + r)]
        if spec.use_dora:  # DoRA's magnitude (lora_magnitude_vector[...].weight): one fp32 vector of out
            per_layer_tensors.append((lin.out_features, FP32_BYTES, 0))
    lora_params = sum(n for n, _, _ in per_layer_tensors) * shape.n_layers
    saved = saved_modules(shape, spec)
    mts = sum(m.numel for m in saved)
    mts_b = FP32_BYTES if spec.method == "qlora" else w
    head_t = [(m.numel, mts_b, m.rows + m.cols) for m in saved if m.role == "head"]
    emb_t = [(m.numel, mts_b, m.rows + m.cols) for m in saved if m.role == "embed"]
    rest = head_t + emb_t
    tensors = per_layer_tensors + rest
    trainable_bytes = lora_params * FP32_BYTES + mts * mts_b
    if spec.method == "qlora":
        lin_numel = sum(lin.weight_numel for lin in block_linears(shape)) * shape.n_layers
        frozen = nf4_bytes(lin_numel, spec.double_quant) + (pc.total - lin_numel) * FP32_BYTES
    else:
        frozen = pc.total * w
    return ModelStates(
        weights_frozen=frozen, weights_trainable=trainable_bytes, gradients=trainable_bytes,
        optimizer=optimizer_bytes(per_layer_tensors, spec) * shape.n_layers + optimizer_bytes(rest, spec),
        trainable_params=lora_params + mts, frozen_params=pc.total,
        largest_tensor=max((n * b for n, b, _ in tensors), default=0),
        adafactor_step=max((adafactor_step_bytes(*t) for t in tensors), default=0),
        n_tensors=len(per_layer_tensors) * shape.n_layers + len(rest),
        grads_per_layer=sum(n * b for n, b, _ in per_layer_tensors),
        grads_head=sum(n * b for n, b, _ in head_t), grads_embed=sum(n * b for n, b, _ in emb_t), grads_other=0,
    )


def optimizer_temporaries(states: ModelStates, spec: RunSpec) -> int:
    """Extra bytes torch's optimizer step allocates on top of its states.

    torch.optim.AdamW picks the single-tensor loop on the CPU and the foreach kernels on CUDA. The loop
    computes ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` one tensor at a time: two
    temporaries the size of the largest trainable tensor. ``_foreach_sqrt(exp_avg_sqs)`` makes one
    temporary per tensor at once: the size of all trainable tensors. 8-bit AdamW runs a fused kernel (none);
    SGD with momentum none; transformers' Adafactor, on either device, what its update of the costliest
    tensor allocates (:func:`adafactor_step_bytes`).
    """
    if spec.optimizer == "adafactor":
        return states.adafactor_step
    if spec.optimizer == "adamw":
        if spec.device == "cuda":
            return states.weights_trainable
        return 2 * states.largest_tensor
    return 0
