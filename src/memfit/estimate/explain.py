"""``--explain``: the formula and the numbers behind each component of an estimate."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.budget import MemoryEstimate
from memfit.estimate.params import count_params
from memfit.estimate.trl_loss import trl_loss_bytes, trl_scored_tokens


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    """One line of ``--explain``: a component, its formula in symbols, the formula with numbers, bytes."""

    component: str
    formula: str
    numbers: str
    bytes: int


def explain_estimate(est: MemoryEstimate) -> tuple[Explanation, ...]:
    """One line per component: symbols, numbers, bytes."""
    shape, spec, st, act = est.shape, est.spec, est.model_states, est.activations
    b, s, h, L, V = spec.batch, spec.seq, shape.hidden, shape.n_layers, shape.vocab
    P = count_params(shape).total
    w = spec.weight_bytes
    out = []
    if spec.method == "full":
        out.append(Explanation(component="weights_trainable", formula="P x bytes(weight dtype)",
                               numbers=f"{P:,} x {w}", bytes=st.weights_trainable))
        out.append(Explanation(component="gradients", formula="P x bytes(param dtype)",
                               numbers=f"{P:,} x {w}", bytes=st.gradients))
    else:
        out.append(Explanation(component="weights_frozen",
                               formula="P x bytes(weight dtype)" if spec.method == "lora"
                               else "NF4 linears (0.5 B + absmax) + the rest in fp32",
                               numbers=f"{P:,} x {w}" if spec.method == "lora" else f"{P:,} parameters",
                               bytes=st.weights_frozen))
        out.append(Explanation(component="weights_trainable",
                               formula="L x sum(r x (in + out)) over adapted linears x 4 B (fp32 adapters)",
                               numbers=f"{st.trainable_params:,} x 4", bytes=st.weights_trainable))
        out.append(Explanation(component="gradients", formula="trainable params x 4 B",
                               numbers=f"{st.trainable_params:,} x 4", bytes=st.gradients))
    opt = {"adamw": "2 moments x trainable bytes (parameter dtype)",
           "adamw-8bit": "2 x 1 B per element + fp32 absmax per 256-block",
           "sgd": "none", "sgd-momentum": "1 momentum buffer x trainable bytes",
           "adafactor": "fp32 row + column second moments per matrix, full per vector, 4 B RMS per tensor"}[
               spec.optimizer]
    out.append(Explanation(component="optimizer", formula=opt, numbers=f"{st.trainable_params:,} params",
                           bytes=st.optimizer))
    out.append(Explanation(
        component="activations/layer", formula="sum of tensors autograd saves in one block (see breakdown)",
        numbers=", ".join(f"{k} {v:,}" for k, v in act.by_component.items()), bytes=act.per_layer))
    if act.segment:
        out.append(Explanation(component="activations/checkpoints",
                               formula="ceil(L / segment) x b x s x h x bytes(residual)",
                               numbers=f"ceil({L}/{act.segment}) x {b} x {s} x {h} x "
                                       f"{act.layer_input // max(1, b * s * h)}",
                               bytes=act.checkpoints))
    else:
        out.append(Explanation(component="activations/layers", formula="first block + (L - 1) x block",
                               numbers=f"{act.first_layer:,} + {L - 1} x {act.per_layer:,}", bytes=act.layers))
    if spec.loss == "trl":
        out.append(Explanation(component="logits", formula="TRL's fused LM head: N scored positions (labels != -100 "
                               "on CUDA) in tiles of min(N, 4096) x 32768, no (b, s, V) logits",
                               numbers=f"N = {trl_scored_tokens(spec):,}",
                               bytes=trl_loss_bytes(spec, est.shape, head_trained=est.model_states.grads_head > 0)))
    elif spec.loss == "chunked":
        out.append(Explanation(component="logits", formula="C x V x 4 per chunk of C rows (fused linear "
                               "cross-entropy; d(hidden) b x s x h kept instead)",
                               numbers=f"{act.loss_workspace // (4 * V):,} x {V:,} x 4", bytes=act.loss_workspace))
    else:
        out.append(Explanation(component="logits", formula="b x s x V x 4 (fp32 log-softmax; x3 at backward start)",
                               numbers=f"{b} x {s} x {V:,} x 4", bytes=act.loss_workspace))
    out.append(Explanation(component="rule of thumb", formula="L x b x s x h x 20 (the lesson)",
                           numbers=f"{L} x {b} x {s} x {h} x 20", bytes=est.rule_of_thumb_bytes))
    out.append(Explanation(component="peak", formula=f"alive at {est.peak_moment}",
                           numbers=" + ".join(f"{k} {v:,}" for k, v in est.components.items() if v),
                           bytes=est.peak_bytes))
    return tuple(out)
