"""Segment checkpointing: ``size`` consecutive decoder layers kept as ONE non-reentrant checkpoint (Chen et al.
2016, "Training Deep Nets with Sublinear Memory Cost", section 4; ``--checkpointing sqrt`` takes segments of
ceil(sqrt(L)) layers, :func:`memfit.estimate.activations.checkpoint_segment`).

transformers 5.24.0 checkpoints decoder layers one at a time (``GradientCheckpointingLayer.__call__`` wraps each
layer's call in ``torch.utils.checkpoint.checkpoint``); its decoder loop calls each layer itself, so a segment
cannot be one Python function without rewriting every model's forward. This does what
``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` does (torch 2.13.0, checkpoint.py: ``gen =
_checkpoint_without_reentrant_generator(fn, ...); next(gen); fn(*args); next(gen)``) with the two ``next(gen)``
calls in forward hooks: the first layer of a segment opens the checkpoint (its input is the checkpoint; from
then on autograd's saved tensors go into the checkpoint's frame, not the graph), the segment's last layer
closes it. ``fn``, run only when the backward first needs the segment, replays the layers as the forward
called them (each layer's own arguments, recorded at its call, the previous layer's output in place of
its hidden-state input), with the RNG state of the forward (dropout draws the same masks).

No reference to a hidden state inside a segment is kept: a layer's recorded arguments hold a marker where the
previous layer's output went. A model that changes the hidden state between two layers (no argument of a
layer is the previous layer's output) cannot be segmented this way: a MemfitError says so.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import checkpoint as torch_checkpoint

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec
from memfit.runtime.offload import apply_offload


class _Previous:
    """Marks where a layer took the previous layer's output (``item``: None for the output itself, 0 for
    ``output[0]`` when a layer returns a tuple)."""

    def __init__(self, item: int | None) -> None:
        self.item = item

    def value(self, output: Any) -> Any:
        return output if self.item is None else output[self.item]


@dataclass
class _Call:
    layer: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class _Segment:
    calls: list[_Call] = field(default_factory=list)
    gen: Iterator[None] | None = None
    last_output: Any = None


def _mark_previous(value: Any, previous: Any) -> Any:
    if value is previous:
        return _Previous(None)
    if isinstance(previous, tuple) and previous and value is previous[0]:
        return _Previous(0)
    return value


class SegmentCheckpointing:
    """Forward hooks on ``layers`` (in call order) that checkpoint them ``size`` at a time."""

    def __init__(self, layers: list[torch.nn.Module], size: int) -> None:
        if size < 1:
            raise MemfitError(f"a checkpointed segment holds at least one layer, got {size}")
        self.layers = layers
        self.size = size
        self._local = threading.local()  # replaying: the hooks stand aside while a segment is recomputed
        self._open: _Segment | None = None
        self.handles = []
        for i, layer in enumerate(layers):
            self.handles.append(layer.register_forward_pre_hook(self._pre_hook(i), with_kwargs=True))
            self.handles.append(layer.register_forward_hook(self._post_hook(i), with_kwargs=True))

    @property
    def segments(self) -> int:
        return -(-len(self.layers) // self.size)

    def _replaying(self) -> bool:
        return bool(getattr(self._local, "replaying", False))

    def _is_first(self, i: int) -> bool:
        return i % self.size == 0

    def _is_last(self, i: int) -> bool:
        return i % self.size == self.size - 1 or i == len(self.layers) - 1

    def _pre_hook(self, i: int) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if self._replaying():
                return
            if self._is_first(i):
                self._abandon()  # a forward that raised left a segment open
                seg = _Segment(calls=[_Call(module, args, kwargs)])
                seg.gen = torch_checkpoint._checkpoint_without_reentrant_generator(
                    self._replay_fn(seg), True, torch_checkpoint.noop_context_fn, "default", False, True,
                    *args, **kwargs)
                next(seg.gen)
                self._open = seg
                return
            seg = self._open
            if seg is None:
                return  # the model did not call the segment's first layer (a partial forward): no checkpoint
            prev = seg.last_output
            new_args = tuple(_mark_previous(a, prev) for a in args)
            new_kwargs = {k: _mark_previous(v, prev) for k, v in kwargs.items()}
            if not any(isinstance(v, _Previous) for v in (*new_args, *new_kwargs.values())):
                self._abandon()
                raise MemfitError(
                    f"segment checkpointing: decoder layer {i} does not take layer {i - 1}'s output as its input "
                    f"(the model changes the hidden state between its layers): use --checkpointing full or every-k")
            seg.calls.append(_Call(module, new_args, new_kwargs))
            seg.last_output = None
        return hook

    def _post_hook(self, i: int) -> Any:
        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            if self._replaying() or self._open is None:
                return
            seg = self._open
            if self._is_last(i):
                self._open = None
                seg.last_output = None
                assert seg.gen is not None
                gen, seg.gen = seg.gen, None
                try:
                    next(gen)
                except StopIteration:
                    pass
            else:
                seg.last_output = output
        return hook

    def _abandon(self) -> None:
        seg, self._open = self._open, None
        if seg is not None and seg.gen is not None:
            seg.gen.close()  # leaves the checkpoint's saved-tensor hooks
            seg.gen = None
            seg.last_output = None

    def _replay_fn(self, seg: _Segment) -> Any:
        def replay(*args: Any, **kwargs: Any) -> None:
            self._local.replaying = True
            try:
                first = seg.calls[0]
                out = first.layer(*args, **kwargs)
                for call in seg.calls[1:]:
                    a = tuple(v.value(out) if isinstance(v, _Previous) else v for v in call.args)
                    kw = {k: v.value(out) if isinstance(v, _Previous) else v for k, v in call.kwargs.items()}
                    out = call.layer(*a, **kw)
            finally:
                self._local.replaying = False
        return replay

    def remove(self) -> None:
        self._abandon()
        for h in self.handles:
            h.remove()
        self.handles.clear()


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder blocks, in module order: the modules transformers 5.24.0 counts for
    ``every_n_layers`` (``PreTrainedModel._set_gradient_checkpointing``: instances of
    ``GradientCheckpointingLayer``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def enable_segment_checkpointing(model: torch.nn.Module, size: int) -> SegmentCheckpointing:
    """Checkpoint ``model``'s decoder layers ``size`` at a time; the hooks are kept on the model
    (``model._memfit_segments``) so they live as long as it does."""
    layers = decoder_layers(model)
    if not layers:
        raise MemfitError(f"{type(model).__name__} has no transformers decoder layers (GradientCheckpointingLayer) "
                          "to checkpoint in segments: use --checkpointing full")
    segs = SegmentCheckpointing(layers, size)
    model._memfit_segments = segs  # type: ignore[assignment]
    return segs


def apply_checkpointing(model: torch.nn.Module, spec: RunSpec) -> None:
    """Activation checkpointing as ``spec.checkpointing`` asks, the way transformers applies it: non-reentrant
    (``use_reentrant=False``), ``full`` on every decoder layer, ``every-k`` on one layer in
    ``spec.checkpoint_every``, ``offload`` keeping the checkpoints in host memory; ``sqrt``: segments of
    :func:`~memfit.estimate.activations.checkpoint_segment` layers (the estimate's ceil(sqrt(L))), one
    checkpoint each (:mod:`memfit.runtime.segments`)."""
    if spec.checkpointing == "none":
        return
    if spec.checkpointing == "sqrt":
        from memfit.estimate.activations import checkpoint_segment

        enable_segment_checkpointing(model, checkpoint_segment(spec, len(decoder_layers(model))))
        return
    every = spec.checkpoint_every if spec.checkpointing == "every-k" else 1
    kwargs = {"use_reentrant": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, every_n_layers=every)
        elif every == 1:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            raise MemfitError("--checkpointing every-k needs transformers with activation_checkpointing_enable; "
                              "use --checkpointing full")
    if spec.offload:
        # transformers' offload=True wraps each checkpoint in save_on_cpu(pin_memory=True), which raises on a
        # CPU-only torch; memfit's equivalent also books the host copies apart (memfit.runtime.offload)
        apply_offload(model, kwargs)
