"""Which decoder layers' gradients an FSDP2 rank holds in full, reduce-scattered or in the reduce-scatter buffer at a
backward moment, layer by layer (:mod:`memfit.estimate.sharding`'s per-layer units, accelerate's too).

torch 2.13.0 ``FSDPParamGroup.post_backward`` (``_fully_shard/_fsdp_param_group.py``), run once a unit's backward
is done: it first drops the oldest reduce-scatter input kept in ``comm_ctx.reduce_scatter_states`` (at most
``reduce_scatter_max_input_buffers`` = 1 of them), then, only if some parameter of the unit has a gradient,
reduce-scatters that unit's gradients and keeps the new input buffer. So while layer i computes its backward, a
rank holds: layer i's gradients in full; the layers after it reduce-scattered, 1/N each; and the buffer of
layer i+1's reduce-scatter, which is empty when layer i+1 trains nothing (its post_backward dropped the buffer
before it, and added none). Under ``--layers-to-transform`` the layers without an adapter have no trainable
parameter in their unit (their frozen base is sharded and gathered all the same), so those terms differ layer by
layer; with the same adapters in every layer it is the uniform rule ``g + g + (done - 1) g / N``.

The first layer whose backward runs is the first one with a gradient: before it nothing requires grad (PEFT's
frozen layers ahead of the first adapter run no backward, :mod:`memfit.estimate.adapter`), so the step's
"first block" moment is that layer's.

Worked: scaled Llama 3.2 (4 layers), LoRA on layers 0 and 2 (53,248 B of fp32 adapter gradients each, 0 in
layers 1 and 3), over N = 2 ranks. ``backward: last block`` (layer 3): full 0, reduced 0, buffer 0.
``backward: first block`` (layer 0): full 53,248 (layer 0), reduced ceil((0 + 53,248 + 0) / 2) = 26,624, buffer 0
(layer 1 trains nothing): 79,872 B of block gradients, where the uniform rule, counting layers in units of the
last layer's 0 B, found none done and kept all 106,496 B in full.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.category import Category
from memfit.estimate.moments import Moment


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockGrads:
    """The decoder layers' gradients on one FSDP2 rank at a backward moment, in bytes."""

    done: int  # layers whose backward has started (the one computing, and those after it)
    booked: int  # what the unsharded moment holds of them (every one in full)
    current: int  # the layer computing: its gradients in full
    reduced: int  # the layers already reduce-scattered, in full (a rank keeps 1/N of it)
    buffer: int  # the last reduce-scatter's input, kept until the next unit's post_backward

    def on_rank(self, n_s: int) -> int:
        """Bytes one of ``n_s`` ranks holds: the layer computing, the buffer and its 1/N of the reduced."""
        return self.current + self.buffer + -(-self.reduced // n_s)


def block_grads(moment: Moment, grads_blocks: int, layer_grads: tuple[int, ...]) -> BlockGrads:
    """The layers' gradients at ``moment``, whose unsharded gradients hold ``grads_blocks`` bytes of the layers'
    (the rest: the head's, the final norm's), ``layer_grads`` each layer's (:meth:`ModelStates.layer_grads`).

    With the same gradients in every layer the layers done are counted from the bytes (``grads_blocks // g``, as
    the per-layer model always did); otherwise from the moment: a block moment has at least the layer computing,
    the first block's is the first layer with a gradient (module docstring), any other the fewest layers from the
    last whose gradients cover the bytes.
    """
    n = len(layer_grads)
    if len(set(layer_grads)) <= 1:
        g = layer_grads[0] if layer_grads else 0
        done = max(0, grads_blocks) // g if g else 0
        current = 1 if done else 0
        return BlockGrads(done=done, booked=done * g, current=current * g, reduced=(done - current) * g,
                          buffer=g if done >= 2 else 0)
    label = moment.label
    first = next(i for i, g in enumerate(layer_grads) if g)
    if label.endswith("first block"):
        done = n - first
    else:
        done, covered = 0, 0
        while done < n and (covered < grads_blocks or (done == 0 and label.endswith("block"))):
            done += 1
            covered += layer_grads[n - done]
    if done == 0:
        return BlockGrads(done=0, booked=0, current=0, reduced=0, buffer=0)
    i = n - done
    return BlockGrads(done=done, booked=min(sum(layer_grads[i:]), max(0, grads_blocks)), current=layer_grads[i],
                      reduced=sum(layer_grads[i + 1:]), buffer=layer_grads[i + 1] if i + 1 < n else 0)


MIDDLE_BLOCKS = ("backward: second-last block", "backward: second block")
"""The FSDP2 backward moments between the last and the first block (:func:`middle_blocks`)."""


def middle_blocks(last: Moment, n: int, per_layer_saved: int, grads_per_layer: int) -> tuple[Moment, ...]:
    """The backward of layer n-2 and of layer 1 as one replica holds them, from ``last`` (the last block's
    backward): k = 1 and n-2 more layers done, their saved tensors freed and their gradients made.

    They are FSDP2's candidates only (:func:`memfit.estimate.sharding.fsdp2_moment` shards them): unsharded, the
    first and last block bound them; on a rank a middle block holds the layer computing, the one prefetched ahead
    and the last reduce-scatter's input together, which neither end does (the last block has no reduce-scatter
    before it, the first block nothing ahead to prefetch). Per GPU the moment grows with k by one reduced shard
    (g / N) and shrinks by one layer's saved tensors, so the largest is at one of the two ends (k = 1 or n-2).
    Traced (torch 2.13.0 FSDP2 on a fake process group, transformers 5.24.0): scaled Mixtral (h 512, 4 layers,
    8 experts) full bf16 b1 s64 over 2 ranks peaks at 699,264,452 B in layer 1's backward (the experts'
    gate_up_proj gradient), with layer 0's all-gather output prefetched and layer 2's reduce-scatter input kept;
    the first block's moment was 676,615,502 B."""
    if n < 3:
        return ()
    act, grads = Category.ACTIVATIONS, Category.GRADIENTS
    out = []
    for label, k in zip(MIDDLE_BLOCKS, sorted({1, n - 2}), strict=False):
        parts = dict(last.parts)
        parts[act] = max(0, parts.get(act, 0) - k * per_layer_saved)
        parts[grads] = parts.get(grads, 0) + k * grads_per_layer
        out.append(Moment(phase="backward", label=label, parts=parts))
    return tuple(out)
