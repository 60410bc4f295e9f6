"""FSDP2 units other than memfit's per-layer + root (:mod:`memfit.estimate.sharding`), and mixed precision's tied end.

``--fsdp-wrap accelerate`` is what accelerate 1.15.0's ``fsdp2_prepare_model`` (utils/fsdp_utils.py) builds, and so
what the Trainer's FSDP2 runs (``fsdp_config={"version": 2}``, ``auto_wrap_policy`` TRANSFORMER_BASED_WRAP by
default): each decoder layer (``_no_split_modules``); the input embedding alone when untied; the tail
``[final norm, (input embedding if tied), lm_head]`` with ``reshard_after_forward=False``; the root last with
torch's own default, holding no parameter in a causal LM. Tied, the tail is gathered from the forward's start to
the backward's end as the root of the per-layer wrap is: the same bytes (measured). Untied, the head and the
embedding are gathered only around their own compute: :func:`accelerate_untied`.

The flag's default stays ``layers``: it is torchtitan's ``apply_fsdp`` and what ``memfit measure`` has proven on
every sharded row since; for a tied embedding both wraps hold the same bytes, and for an untied one ``layers`` is
the larger (the safe side: 1,028,096,352 against 822,042,976 B measured, scaled Pythia fsdp x2). A run read from
an accelerate or Trainer FSDP2 config gets ``accelerate`` (:mod:`memfit.configs.accelerate`,
:mod:`memfit.configs.trainer`), which is what those runs wrap with.
"""

from __future__ import annotations

from memfit.estimate.category import Category
from memfit.estimate.fsdp_grads import block_grads
from memfit.estimate.moments import Moment
from memfit.estimate.params import count_params
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.estimate.states import ModelStates

LAST_GATHER = "forward: last block all-gather"
"""The moment an FSDP2 step gathers its last decoder layer (:func:`memfit.estimate.sharding.fsdp2_moment`): every
other layer's saved tensors, none of the head's."""


def tied_mixed_end(parts: dict[Category, int], spec: RunSpec, st: ModelStates, n: int, root_w: int) -> int:
    """The backward's last moment of a full fine-tune with a tied embedding under mixed-bf16's
    ``MixedPrecisionPolicy``; sets ``parts``' gradients and temporaries, returns the gathered weight bytes.

    The larger of: the tied embedding's backward, its three bf16 embedding-sized terms (the head's gradient
    waiting, the embedding's and their sum, as without sharding) beside the gathered bf16 root and the last
    layer's reduce-scatter input; and the root's reduce-scatter, its gradients in the reduce dtype twice (input and
    copy) with the 1/N output, the bf16 weights and gradients freed. The reduce dtype is fp32 (``--fsdp-wrap
    layers``) or bf16 (accelerate's). Measured, scaled Llama 3.2 over 2 and 4 ranks: the reduce-scatter peaks with
    fp32 (540,554,080 B on 2 ranks), the embedding's backward with bf16 (476,786,524 B)."""
    n_s = spec.gpus // spec.nodes if spec.sharding == "hsdp" else spec.gpus
    half = 2 if spec.fsdp_wrap == "accelerate" else spec.weight_bytes  # bytes per element of the reduce dtype
    g_root, gpl = st.gradients - n * st.grads_per_layer, st.grads_per_layer
    reduced = -(-n * gpl // n_s)
    e_bf16 = st.grads_embed * 2 // spec.weight_bytes
    at_backward = root_w + 3 * e_bf16 + (gpl * half // spec.weight_bytes if n else 0)
    r_root = g_root * half // spec.weight_bytes
    at_reduce = 2 * r_root + -(-r_root // n_s)
    parts[Category.TEMPORARIES] = 0
    if at_backward > at_reduce:
        parts[Category.GRADIENTS] = reduced + at_backward - root_w
        return root_w
    parts[Category.GRADIENTS] = reduced + at_reduce
    return 0


def accelerate_untied(moment: Moment, shape: ModelShape, spec: RunSpec, st: ModelStates, parts: dict[Category, int],
                      layer_w: int, root_w: int, *, keep: bool) -> int:
    """The gathered weight bytes of ``moment`` under accelerate 1.15.0's FSDP2 units with an untied embedding
    (``fsdp2_prepare_model``: each decoder layer, the input embedding, the tail [final norm, lm_head] with
    ``reshard_after_forward=False``, an empty root); sets ``parts``' gradients as that rank holds them.

    - forward, at the last layer's all-gather (:data:`LAST_GATHER`): that layer's output and weights and the layer
      before's kept output (every layer, and the embedding, when they stay gathered), the tail not yet gathered;
    - forward, at the loss: the tail gathered and its all-gather output (the last all-gather of the forward,
      kept until the root's post-forward), every layer and the embedding too when they stay gathered;
    - backward before the first layer: the tail and the layer(s) prefetched; the head's gradients in full, and
      at the tail's reduce-scatter (its post-backward, once the logits' gradient is freed) twice, with the 1/N
      output (measured: scaled Pythia, zero2 over 2 ranks);
    - backward in the layers: the tail resharded and its gradients reduce-scattered (1/N; its reduce-scatter
      input kept until the next reduce-scatter), the layer computing and those prefetched, and the embedding
      once the prefetch reaches it (the backward order is tail, last layer ... first layer, embedding);
    - the embedding's reduce-scatter (the backward's last moment): its weight gathered, its gradient in full,
      the reduce-scatter's input copy and 1/N output, every other gradient 1/N.

    With a tied embedding the tail holds the embedding too and is gathered from the forward's start to the
    backward's end, as the root of ``--fsdp-wrap layers`` is: :func:`memfit.estimate.sharding.fsdp2_moment`'s own
    rule (measured the same bytes, scaled Llama 3.2 over 2 ranks: 741,357,408 B both ways).
    """
    n_s, n = spec.gpus // spec.nodes if spec.sharding == "hsdp" else spec.gpus, shape.n_layers
    count = count_params(shape)
    root_params = count.total - count.layers
    embed_w = root_w * count.embeddings // root_params if root_params else 0
    tail_w = root_w - embed_w
    g_embed = st.grads_embed
    g_tail = st.grads_head + st.grads_other
    # accelerate's mixed-bf16 policy reduces in bf16 (MixedPrecisionPolicy(reduce_dtype=bfloat16)): the gradients in
    # full and the reduce-scatter's input and output are bf16, the 1/N gradient it leaves is fp32 (measured)
    r_embed, r_tail = ((g_embed * 2 // spec.weight_bytes, g_tail * 2 // spec.weight_bytes)
                       if spec.precision == "mixed-bf16" else (g_embed, g_tail))
    grads = moment.parts.get(Category.GRADIENTS, 0)
    if moment.label == LAST_GATHER:  # as the per-layer wrap's (the layer before's output kept), the tail not yet
        return (n + 2 if keep else 3) * layer_w + (embed_w if keep else 0)
    if moment.phase == "forward":
        return 2 * tail_w + ((n * layer_w + embed_w) if keep else 0)
    if moment.phase != "backward":
        return 0
    if moment.label.endswith("embeddings"):
        parts[Category.GRADIENTS] = 2 * r_embed + -(-(st.gradients - g_embed) // n_s) + -(-r_embed // n_s)
        return embed_w
    blocks = block_grads(moment, grads - g_tail, st.layer_grads(n))
    done = blocks.done
    if done == 0:  # the head's backward: the tail, the last layer(s) prefetched (every layer if kept)
        logits = parts.get(Category.LOGITS, 0)
        rs = 2 * r_tail + -(-r_tail // n_s)  # the tail's reduce-scatter once the head's backward is over
        if moment.label.endswith("lm_head") and rs > grads + logits:
            parts[Category.GRADIENTS], parts[Category.LOGITS] = rs, 0
        return tail_w + (n if keep else min(n, spec.prefetch)) * layer_w + (embed_w if keep else 0)
    ahead = n - done if keep else min(spec.prefetch, n - done)
    embed_ahead = keep or spec.prefetch > n - done
    # the last reduce-scatter's input: the layer after the one computing (none if it trains nothing), or the tail's
    rs_tail = r_tail if done == 1 else 0
    parts[Category.GRADIENTS] = -(-g_tail // n_s) + blocks.on_rank(n_s) + rs_tail + (grads - g_tail - blocks.booked)
    return (1 + ahead) * layer_w + (embed_w if embed_ahead else 0)
