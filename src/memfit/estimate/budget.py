"""The memory budget of one training step: the peak of live tensor bytes, its phase, and what is alive then.

The step is the HF Trainer's: ``loss = model(input_ids, labels=...).loss`` (the output and its logits are
dropped before backward), ``loss.backward()``, ``optimizer.step()``, ``zero_grad(set_to_none=True)``.
memfit predicts the steady state, from the second step on: the optimizer states (allocated lazily by the
first ``step()``) are alive through the forward and backward, gradients are not (set to None).

Candidates for the peak, with W weights, O optimizer states, A saved activations (see
:mod:`memfit.estimate.activations`), G gradients and Vf = b*s*V*4 (fp32 logits):

=====================  ===============================================================================
moment                 alive
=====================  ===============================================================================
forward, loss          W + O + A(blocks, head) + logits (b*s*V, compute dtype) + logits.float() (Vf,
                       when the compute dtype is not fp32) + log-softmax output (Vf)
backward, loss         W + O + A + log-softmax output + its gradient + the logits' gradient (3 Vf):
                       usually the peak of an adapter run with a real vocabulary
backward, last block   W + O + A - loss - head - (that block) + G(head, last block) + the block's own
                       backward: the tensors it saved up to its widest op plus the gradients of that
                       op's output and inputs (a reverse replay of the block's ops) + the residual
                       stream's gradient (b*s*h)
backward, first block  W + O + A(block 0's backward as above) + G(all blocks, head)
optimizer              W + G + O + the optimizer's temporaries (see :func:`optimizer_temporaries`)
=====================  ===============================================================================

With checkpointing, A(blocks) is the kept segment inputs (plus the (b, 1, s, s) attention mask that
eager attention passes to every checkpointed block), and each backward moment adds the activations of
the one segment being recomputed (its own input is the checkpoint, counted once).

Checked against real CPU steps (``bench/bench_estimate.py``, ``tests/estimate/test_agreement_fast.py``):
when the loss is the peak (real vocabularies), the estimate matches to a few kB; when a block's backward
is the peak (small vocabularies, long sequences, eager attention), within about 1.5%: the replay does not
model every backward temporary (e.g. transposed copies inside bmm backward).

``reserved_bytes`` (CUDA only) adds what ``torch.cuda.memory_reserved`` and ``nvidia-smi`` show on top:
the caching allocator rounds each block to 512 B and carves 2 MiB / 20 MiB segments, which with
fragmentation costs memfit's assumed 5% of the peak plus 256 MiB, and the CUDA context with cuBLAS /
cuDNN workspaces, assumed 512 MiB (commonly 300-600 MiB depending on driver and GPU; not measured
here). Whether the run fits is :mod:`memfit.estimate.fits`' rule, the same in ``estimate``, ``trace`` and
``fit``: ``reserved_bytes`` + the headroom (default 5% of the GPU) <= the GPU's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memfit.estimate.activations import ActivationBytes, estimate_activations, rule_of_thumb_activation_bytes
from memfit.estimate.fits import (
    ALLOCATOR_OVERHEAD_BYTES,
    ALLOCATOR_OVERHEAD_FRACTION,
    CUDA_CONTEXT_BYTES,
    FitVerdict,
    Headroom,
    judge_fit,
    reserved_bytes,
)
from memfit.estimate.gpus import GpuSpec, resolve_gpu
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.estimate.states import ModelStates, model_states, optimizer_temporaries

INT64 = 8
__all__ = ["ALLOCATOR_OVERHEAD_BYTES", "ALLOCATOR_OVERHEAD_FRACTION", "COMPONENT_KEYS", "CUDA_CONTEXT_BYTES",
           "Explanation", "MemoryEstimate", "estimate_memory"]

COMPONENT_KEYS = ("weights_frozen", "weights_trainable", "gradients", "optimizer", "activations", "logits",
                  "temporaries", "inputs")


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    """One line of ``--explain``: a component, its formula in symbols, the formula with numbers, bytes."""

    component: str
    formula: str
    numbers: str
    bytes: int


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """The analytic memory budget of one training step (integer bytes throughout)."""

    spec: RunSpec
    shape: ModelShape
    peak_bytes: int
    peak_phase: str  # "forward" | "backward" | "optimizer"
    peak_moment: str  # e.g. "backward: loss (log-softmax gradient)"
    components: dict[str, int]  # alive at the peak; sums to peak_bytes
    model_states: ModelStates
    activations: ActivationBytes
    activation_bytes: int  # everything the forward saves for backward (weights excluded)
    moments: dict[str, int]  # every candidate moment of the step and its live bytes
    reserved_bytes: int  # CUDA: what the caching allocator reserves + context (see module docstring)
    gpu: GpuSpec | None
    rule_of_thumb_bytes: int
    headroom: Headroom = Headroom()

    @property
    def model(self) -> str:
        return self.shape.name

    @property
    def gpu_bytes(self) -> int | None:
        return self.gpu.bytes if self.gpu else None

    @property
    def verdict(self) -> FitVerdict | None:
        """:mod:`memfit.estimate.fits`' rule on ``--gpu`` (None without one)."""
        if self.gpu is None:
            return None
        return judge_fit(self.peak_bytes, self.spec.device, self.gpu, self.headroom)

    @property
    def fits(self) -> bool | None:
        """Whether reserved + headroom fits the GPU (None without --gpu)."""
        v = self.verdict
        return None if v is None else v.fits

    @property
    def spare_bytes(self) -> int | None:
        """GPU bytes left beyond reserved + headroom (negative: short by that much); None without --gpu."""
        v = self.verdict
        return None if v is None else v.spare_bytes

    @property
    def per_layer(self) -> dict[str, int]:
        """Saved bytes of one typical block by component (``attention/kernel``, ``mlp/act`` ...)."""
        return dict(self.activations.by_component)

    def breakdown(self) -> dict[str, int]:
        """Hierarchical keys: ``peak/<component>``, ``model_states/...``, ``activations/layer/...``."""
        out = {f"peak/{k}": v for k, v in self.components.items()}
        out["peak/total"] = self.peak_bytes
        out.update(self.model_states.breakdown())
        out.update(self.activations.breakdown())
        out.update({f"moments/{k}": v for k, v in self.moments.items()})
        out["reserved"] = self.reserved_bytes
        return out

    def explain(self) -> tuple[Explanation, ...]:
        """The formula and the numbers behind each component (computed on demand)."""
        from memfit.estimate.explain import explain_estimate

        return explain_estimate(self.shape, self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "spec": self.spec.to_dict(),
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "peak_moment": self.peak_moment,
            "components": dict(self.components),
            "model_states": self.model_states.to_dict(),
            "activation_bytes": self.activation_bytes,
            "activations_per_layer": self.per_layer,
            "moments": dict(self.moments),
            "reserved_bytes": self.reserved_bytes,
            "gpu": self.gpu.to_dict() if self.gpu else None,
            "gpu_bytes": self.gpu_bytes,
            "fits": self.fits,
            "spare_bytes": self.spare_bytes,
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "rule_of_thumb_bytes": self.rule_of_thumb_bytes,
            "trainable_params": self.model_states.trainable_params,
        }


def estimate_memory(shape: ModelShape, spec: RunSpec, *, headroom: Headroom | None = None) -> MemoryEstimate:
    """Predict the peak memory of one training step of ``shape`` under ``spec``; see the module docstring.
    ``headroom`` (default 5% of the GPU) enters only the verdict against ``spec.gpu``."""
    gpu = resolve_gpu(spec.gpu) if spec.gpu else None
    headroom = headroom or Headroom()
    if gpu is not None:
        judge_fit(0, spec.device, gpu, headroom)  # a headroom that leaves nothing of the GPU: say so now
    st = model_states(shape, spec)
    act = estimate_activations(shape, spec)
    T = spec.batch * spec.seq
    O = st.optimizer  # noqa: E741
    inputs = 2 * T * INT64  # input_ids and labels
    base = {"weights_frozen": st.weights_frozen, "weights_trainable": st.weights_trainable,
            "optimizer": O, "inputs": inputs}
    Vf = act.logits_fp32
    blocks = act.layers
    other_saved = act.shared + act.embedding
    seg = act.segment
    n = shape.n_layers
    resid_grad = T * shape.hidden * (4 if spec.method == "qlora" else spec.weight_bytes)
    G = st.gradients
    g_head = st.grads_head + st.grads_other
    g_layers = st.grads_per_layer * n

    moments: dict[str, dict[str, int]] = {}
    acts_fwd = blocks + other_saved + act.head
    # forward, at the loss: logits in the compute dtype + fp32 copy + log-softmax output
    moments["forward: loss"] = {**base, "activations": acts_fwd,
                                "logits": act.logits_bytes + (Vf if act.logits_bytes != Vf else 0) + act.loss}
    # backward at the loss: log-softmax output + its gradient + the gradient of the logits (fp32)
    moments["backward: loss"] = {**base, "activations": acts_fwd, "logits": act.loss + 2 * Vf}
    # backward through lm_head: grad of logits (compute dtype) + lm_head weight grad
    moments["backward: lm_head"] = {**base, "activations": acts_fwd,
                                    "logits": act.logits_bytes + (Vf if act.logits_bytes != Vf else 0),
                                    "gradients": st.grads_head}
    # backward of the last block: the other blocks' saved tensors (or the checkpoints, plus the segment
    # being recomputed) + the block's own backward (saved + gradients at its widest op)
    if act.plain_blocks:
        # every-k: the last block is checkpointed when k divides L, otherwise it kept everything
        last_ckpt = n % spec.checkpoint_every == 0
        others = act.layers - (act.input_saved if last_ckpt else act.per_layer)
        last_grads = st.grads_per_layer
    elif seg:
        # the recomputed block saves its own input, which is the checkpoint itself: count it once
        others = act.checkpoints + (min(seg, n) - 1) * act.per_layer - act.input_saved
        last_grads = st.grads_per_layer * min(seg, n)
    else:
        others = blocks - act.per_layer
        last_grads = st.grads_per_layer
    bwd_per = act.backward_per if n > 1 else act.backward_first
    moments["backward: last block"] = {**base, "activations": others + other_saved,
                                       "gradients": g_head + last_grads,
                                       "temporaries": bwd_per + resid_grad}
    # backward of the first block: its own backward + every block's gradients
    first_others = act.layer_input - act.input_saved if seg and not spec.offload else 0
    if act.plain_blocks:
        first_others = 0  # block 0 is never the k-th: it kept everything, nothing else is left
    elif seg and seg > 1:
        first_others += (min(seg, n) - 1) * act.per_layer
    moments["backward: first block"] = {**base, "activations": first_others + other_saved,
                                        "gradients": g_head + g_layers,
                                        "temporaries": act.backward_first + resid_grad}
    # end of backward: embedding gradient (tied: the embedding backward's result is added in place)
    tied_extra = st.grads_embed if (shape.tie_embeddings and spec.method == "full") else 0
    moments["backward: embeddings"] = {**base, "gradients": G, "temporaries": tied_extra}
    moments["optimizer: step"] = {**base, "gradients": G, "temporaries": optimizer_temporaries(st, spec)}

    totals = {k: sum(v.values()) for k, v in moments.items()}
    peak_key = max(totals, key=lambda k: totals[k])
    comps = dict.fromkeys(COMPONENT_KEYS, 0)
    comps.update(moments[peak_key])
    peak = sum(comps.values())
    reserved = reserved_bytes(peak, spec.device)
    rot = rule_of_thumb_activation_bytes(shape.n_layers, spec.batch, spec.seq, shape.hidden)
    return MemoryEstimate(
        spec=spec, shape=shape, peak_bytes=peak, peak_phase=peak_key.split(":")[0],
        peak_moment=peak_key, components=comps, model_states=st, activations=act,
        activation_bytes=act.total, moments=totals, reserved_bytes=reserved, gpu=gpu,
        rule_of_thumb_bytes=rot, headroom=headroom,
    )
