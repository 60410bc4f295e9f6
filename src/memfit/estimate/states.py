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
adafactor (torch.optim.Adafactor)           factored second moment: rows + cols per matrix, in the
                                            parameter's dtype; no first moment
==========================================  =====================================================

AdamW also keeps one ``step`` tensor per parameter tensor: fp32 0-dim, on the CPU unless
``capturable``/``fused`` (so it counts only for ``--device cpu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from memfit.estimate.lora import adapted_linears, block_linears, lora_linear_params, lora_rank, saved_modules
from memfit.estimate.params import ParamCount, count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

FP32 = 4
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
        return numel // 2 + blocks + FP32 * -(-blocks // DQ_BLOCK)
    return numel // 2 + FP32 * blocks


def optimizer_bytes(tensor_numels: list[tuple[int, int]], spec: RunSpec) -> int:
    """Optimizer state bytes for trainable tensors given as (elements, bytes per element)."""
    total = 0
    step = FP32 if spec.device == "cpu" else 0
    for numel, bpe in tensor_numels:
        if spec.optimizer == "adamw":
            total += 2 * numel * bpe + step
        elif spec.optimizer == "adamw-8bit":
            if numel >= ADAM8_MIN_SIZE:
                total += 2 * numel + 2 * FP32 * -(-numel // ADAM8_BLOCK)
            else:
                total += 2 * numel * FP32
        elif spec.optimizer == "sgd":
            total += 0
        elif spec.optimizer == "sgd-momentum":
            total += numel * bpe
        else:  # adafactor: vectors keep a full second moment; matrices rows + cols (approximated square)
            side = int(numel ** 0.5)
            total += (2 * side if side * side == numel and numel > 1 else numel) * bpe + step
    return total


def model_states(shape: ModelShape, spec: RunSpec) -> ModelStates:
    """Weights, gradients and optimizer states of the run; see the module docstring."""
    pc = _count(shape)
    w = spec.weight_bytes
    per_layer_tensors: list[tuple[int, int]] = []  # (numel, bytes per element) of each trainable tensor
    if spec.method == "full":
        for lin in block_linears(shape):
            per_layer_tensors.append((lin.weight_numel, w))
            if lin.bias:
                per_layer_tensors.append((lin.out_features * lin.experts, w))
        for norm in shape.norms():
            per_layer_tensors.append((norm.size, w))
            if norm.bias:
                per_layer_tensors.append((norm.size, w))
        embed = [(shape.vocab * shape.embed_dim, w)]
        if shape.position == "learned":
            embed.append((pc.embeddings - shape.vocab * shape.embed_dim, w))
        head = [] if shape.tie_embeddings else [(pc.lm_head, w)]
        other = [(pc.final_norm, w)] if pc.final_norm else []
        if pc.other:
            other.append((pc.other, w))
        rest = embed + head + other
        trainable = pc.total
        return ModelStates(
            weights_frozen=0, weights_trainable=trainable * w, gradients=trainable * w,
            optimizer=optimizer_bytes(per_layer_tensors, spec) * shape.n_layers + optimizer_bytes(rest, spec),
            trainable_params=trainable, frozen_params=0,
            largest_tensor=max(n * b for n, b in per_layer_tensors + rest),
            n_tensors=len(per_layer_tensors) * shape.n_layers + len(rest),
            grads_per_layer=sum(n * b for n, b in per_layer_tensors),
            grads_head=sum(n * b for n, b in head), grads_embed=sum(n * b for n, b in embed),
            grads_other=sum(n * b for n, b in other),
        )
    # LoRA / QLoRA: the base is frozen, adapters (and modules_to_save copies) train
    for lin in adapted_linears(shape, spec):
        r = lora_rank(lin, spec.rank)
        per_layer_tensors += [(r * lin.in_features, FP32), (r * lin.out_features, FP32)]
        assert lora_linear_params(lin, spec.rank) == r * (lin.in_features + lin.out_features)
    lora_params = sum(n for n, _ in per_layer_tensors) * shape.n_layers
    saved = saved_modules(shape, spec)
    mts = sum(m.numel for m in saved)
    mts_b = FP32 if spec.method == "qlora" else w
    head_t = [(m.numel, mts_b) for m in saved if m.role == "head"]
    emb_t = [(m.numel, mts_b) for m in saved if m.role == "embed"]
    rest = head_t + emb_t
    trainable_bytes = lora_params * FP32 + mts * mts_b
    if spec.method == "qlora":
        lin_numel = sum(lin.weight_numel for lin in block_linears(shape)) * shape.n_layers
        frozen = nf4_bytes(lin_numel, spec.double_quant) + (pc.total - lin_numel) * FP32
    else:
        frozen = pc.total * w
    return ModelStates(
        weights_frozen=frozen, weights_trainable=trainable_bytes, gradients=trainable_bytes,
        optimizer=optimizer_bytes(per_layer_tensors, spec) * shape.n_layers + optimizer_bytes(rest, spec),
        trainable_params=lora_params + mts, frozen_params=pc.total,
        largest_tensor=max((n * b for n, b in per_layer_tensors + rest), default=0),
        n_tensors=len(per_layer_tensors) * shape.n_layers + len(rest),
        grads_per_layer=sum(n * b for n, b in per_layer_tensors),
        grads_head=sum(n * b for n, b in head_t), grads_embed=sum(n * b for n, b in emb_t), grads_other=0,
    )


def optimizer_temporaries(states: ModelStates, spec: RunSpec) -> int:
    """Extra bytes torch's optimizer step allocates on top of its states.

    torch.optim.AdamW picks the single-tensor loop on the CPU and the foreach kernels on CUDA. The loop
    computes ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` one tensor at a time: two
    temporaries the size of the largest trainable tensor. ``_foreach_sqrt(exp_avg_sqs)`` makes one
    temporary per tensor at once: the size of all trainable tensors. 8-bit AdamW runs a fused kernel (none);
    SGD with momentum none; Adafactor about two of the largest tensor.
    """
    if spec.optimizer in ("adamw", "adafactor"):
        if spec.device == "cuda" and spec.optimizer == "adamw":
            return states.weights_trainable
        return 2 * states.largest_tensor
    return 0
