"""LiveTensorTracker: the bytes held by live tensors, their peak, and what was alive at the peak.

A ``TorchDispatchMode`` sees every tensor an operator returns. Each output's untyped storage is counted
once (views and aliases share a storage) and a ``weakref.finalize`` on the storage subtracts its bytes
when the last reference dies, so ``live_bytes`` is exactly what ``torch.cuda.memory_allocated`` would
show for the tensors (not allocator rounding, not workspaces a kernel allocates privately). Works on
real CPU/CUDA tensors and on ``FakeTensor`` outputs (a fake storage has ``nbytes`` but no memory).

Categories, the estimate's components:

=====================  ==================================================================================
category               storages
=====================  ==================================================================================
``weights_frozen``     parameters without ``requires_grad`` and buffers (registered by :meth:`track_model`)
``weights_trainable``  parameters with ``requires_grad``
``gradients``          the ``.grad`` of a tracked parameter
``optimizer``          tensors in ``optimizer.state`` (registered by :meth:`track_optimizer`)
``logits``             other storages of a vocabulary-wide tensor (last dimension = ``vocab``) made from the
                       output layer on: the logits, their fp32 upcast, log-softmax, and in backward their
                       gradients until the output layer's input gradient exists (a hook marks the span, so
                       an MLP as wide as the vocabulary is not mistaken for logits)
``activations``        other storages allocated in the forward phase (kept for backward, checkpoints, the
                       residual stream); any forward transient alive at the peak counts here too
``temporaries``        other storages allocated in backward / optimizer phases (gradients flowing through
                       activations, recomputed checkpoints, the optimizer's foreach buffers)
=====================  ==================================================================================

Classification of gradients and optimizer state is done when a snapshot is taken (grads are attached to
``.grad`` by autograd after their storage was allocated), so the peak snapshot is exact at the moment
of the peak. The peak is reached just before the first free after a run of allocations, so a snapshot
is taken lazily at that free, not on every allocation.

Worked example (fp32, one ``nn.Linear(4, 8)``, input ``(2, 4)``): weights 4*8*4 + 8*4 = 160 B; the
output ``(2, 8)`` is 64 B; ``live_bytes`` after the forward = 160 + 32 (input, created outside) + 64.

A simulated device: ``memory_limit=`` raises :class:`SimulatedOutOfMemoryError` as soon as live bytes
exceed it, so the out-of-memory path is testable on CPU.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CATEGORIES: tuple[str, ...] = (
    "weights_frozen",
    "weights_trainable",
    "gradients",
    "optimizer",
    "activations",
    "logits",
    "temporaries",
)
PHASES: tuple[str, ...] = ("setup", "forward", "backward", "optimizer")
_REGISTERED = ("weights_frozen", "weights_trainable", "optimizer", "gradients")


class SimulatedOutOfMemoryError(RuntimeError):
    """Live bytes went over the tracker's ``memory_limit`` (a simulated device size)."""

    def __init__(self, *, live_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"simulated out of memory: {live_bytes:,} B live > limit {limit_bytes:,} B")
        self.live_bytes = live_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class PeakSnapshot:
    """Bytes alive at a peak, by category, with the phase it happened in."""

    peak_bytes: int
    phase: str
    by_category: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "phase": self.phase, "by_category": dict(self.by_category)}


@dataclass(slots=True)
class _Storage:
    nbytes: int
    phase: str
    hint: str | None  # "logits" for vocabulary-shaped tensors
    tag: str | None
    ref: Any = None


class LiveTensorTracker(TorchDispatchMode):
    """Count live tensor storage bytes; record the peak, what was alive then, and per-phase peaks.

    Usage::

        tracker = LiveTensorTracker(vocab=cfg["vocab_size"])
        tracker.track_model(model)
        tracker.track_optimizer(optimizer)
        with tracker:
            with tracker.phase("forward"):
                loss = model(input_ids=ids, labels=ids).loss
            with tracker.phase("backward"):
                loss.backward()
            with tracker.phase("optimizer"):
                optimizer.step(); optimizer.zero_grad(set_to_none=True)
        tracker.peak_bytes, tracker.peak.by_category, tracker.phase_peaks

    ``tag`` may be set by the caller (e.g. from module hooks) and is recorded with each new storage;
    :meth:`peak_storages` returns the storages alive at the peak with their tags.
    """

    def __init__(self, *, vocab: int | None = None, memory_limit: int | None = None,
                 device_type: str | None = None) -> None:
        super().__init__()
        self.vocab = vocab
        self.device_type = device_type  # count only storages on this device type ("cuda"); None = all
        self.memory_limit = memory_limit
        self.tag: str | None = None
        self.live_bytes = 0
        self.peak_bytes = 0
        self._phase = "setup"
        self._live: dict[int, _Storage] = {}
        self._ids = itertools.count()
        self._by_storage: dict[int, int] = {}  # id(storage object) -> uid, while alive
        self._registered: dict[int, str] = {}  # uid -> registered category
        self._params: list[weakref.ref[torch.Tensor]] = []
        self._optimizers: list[weakref.ref[Any]] = []
        self._pending = False
        self._peak_uids: dict[int, int] = {}
        self.peak = PeakSnapshot(peak_bytes=0, phase="setup", by_category=dict.fromkeys(CATEGORIES, 0))
        self.phase_peaks: dict[str, int] = {}
        self.phase_snapshots: dict[str, PeakSnapshot] = {}
        self._phase_pending = False
        self._in_head = False
        self._head_seen = False
        self._hooks: list[Any] = []
        # storages known to be a parameter's .grad: recorded when autograd has accumulated a gradient (a
        # post-accumulate hook), never read from p.grad inside a storage finalizer: a finalizer can run
        # while that very gradient is being torn down (zero_grad(set_to_none=True)), and reading p.grad
        # there crashes the interpreter.
        self._grad_uids: set[int] = set()
        self._active = False
        self._peak_detail: list[tuple[int, str, str | None]] = []
        self._detail: list[tuple[int, str, str | None]] = []

    # ---- registration ------------------------------------------------------------------------
    def track_model(self, model: torch.nn.Module) -> None:
        """Count the model's parameters and buffers (which already exist) and classify them."""
        for p in model.parameters():
            self._params.append(weakref.ref(p))
            self._register(p, "weights_trainable" if p.requires_grad else "weights_frozen")
            if p.grad is not None:
                self._register(p.grad, "gradients")
                self._note_grad(p.grad)
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    functools.partial(_grad_ready, weakref.ref(self))))
        for b in model.buffers():
            self._register(b, "weights_frozen")
        get_head = getattr(model, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        if isinstance(head, torch.nn.Module):
            weight = getattr(head, "weight", None)
            if self.vocab is None and isinstance(weight, torch.Tensor) and weight.dim() == 2:
                self.vocab = int(weight.shape[0])
            self._hooks.append(head.register_forward_pre_hook(functools.partial(_enter_head, weakref.ref(self))))

    def track_optimizer(self, optimizer: Any) -> None:
        """Classify the optimizer's state tensors, those that exist now and those created later."""
        self._optimizers.append(weakref.ref(optimizer))
        for t in _state_tensors(optimizer):
            self._register(t, "optimizer")

    def track_tensors(self, tensors: Iterable[torch.Tensor], category: str | None = None) -> None:
        """Count tensors created outside the mode (inputs); ``category`` None = by phase."""
        for t in tensors:
            if category is None:
                self._see(t)
            else:
                self._register(t, category)

    # ---- phases ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute allocations and peaks inside the block to phase ``name``."""
        self._flush()
        previous, self._phase = self._phase, name
        if name == "forward":
            self._in_head = self._head_seen = False
        elif name == "backward":
            self._in_head = self._head_seen
        else:
            self._in_head = False
        self.phase_peaks[name] = max(self.phase_peaks.get(name, 0), self.live_bytes)
        try:
            yield
        finally:
            self._flush()
            self._phase = previous

    @property
    def peak_phase(self) -> str:
        return self.peak.phase

    def peak_storages(self) -> list[tuple[int, str, str | None]]:
        """``(nbytes, category, tag)`` for each storage alive at the peak, largest first."""
        return sorted(self._peak_detail, key=lambda r: -r[0])

    def summary(self) -> dict[str, Any]:
        """JSON-ready: peak, its phase and categories, per-phase peaks."""
        self._flush()
        return {"peak_bytes": self.peak_bytes, "peak_phase": self.peak.phase,
                "by_category": dict(self.peak.by_category), "phase_peaks": dict(self.phase_peaks)}

    # ---- dispatch ----------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor):
                self._see(t)
        return out

    def __enter__(self) -> Any:
        self._active = True
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        self._flush()
        self._active = False
        return super().__exit__(*exc)

    # ---- internals ---------------------------------------------------------------------------
    def _storage(self, t: torch.Tensor) -> Any:
        try:
            return t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested, ... : nothing to count
            return None

    def _uid(self, storage: Any) -> int | None:
        uid = self._by_storage.get(id(storage))
        if uid is not None and uid in self._live and self._live[uid].ref() is storage:
            return uid
        return None

    def _see(self, t: torch.Tensor) -> int | None:
        storage = self._storage(t)
        if storage is None or (self.device_type is not None and storage.device.type != self.device_type):
            return None
        uid = self._uid(storage)
        if uid is not None:
            rec = self._live[uid]
            nbytes = int(storage.nbytes())
            if nbytes != rec.nbytes:  # resized in place (resize_, set_)
                self._add(nbytes - rec.nbytes)
                rec.nbytes = nbytes
            return uid
        hint = "logits" if (self._in_head and self.vocab and t.dim() >= 1 and t.shape[-1] == self.vocab) else None
        uid = next(self._ids)
        rec = _Storage(nbytes=int(storage.nbytes()), phase=self._phase, hint=hint, tag=self.tag)
        rec.ref = weakref.ref(storage)
        self._live[uid] = rec
        self._by_storage[id(storage)] = uid
        weakref.finalize(storage, self._free, uid, id(storage)).atexit = False
        self._add(rec.nbytes)
        return uid

    def _register(self, t: torch.Tensor, category: str) -> None:
        uid = self._see(t)
        if uid is not None:
            self._registered[uid] = category

    def _add(self, nbytes: int) -> None:
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._pending = True
        if self.live_bytes > self.phase_peaks.get(self._phase, 0):
            self.phase_peaks[self._phase] = self.live_bytes
            self._phase_pending = True
        if self.memory_limit is not None and self.live_bytes > self.memory_limit and nbytes > 0:
            self._flush()
            raise SimulatedOutOfMemoryError(live_bytes=self.live_bytes, limit_bytes=self.memory_limit)

    def _free(self, uid: int, storage_id: int) -> None:
        self._flush()
        rec = self._live.pop(uid, None)
        if rec is None:
            return
        if self._by_storage.get(storage_id) == uid:
            del self._by_storage[storage_id]
        self._registered.pop(uid, None)
        self._grad_uids.discard(uid)
        self.live_bytes -= rec.nbytes

    def _flush(self) -> None:
        """Take the pending snapshots: live bytes are at a (phase) peak right now."""
        if not (self._pending or self._phase_pending):
            return
        snap = self._snapshot()
        if self._pending and self.live_bytes == self.peak_bytes:
            self.peak = snap
            self._peak_detail = self._detail
        if self._phase_pending and self.live_bytes == self.phase_peaks.get(self._phase, -1):
            self.phase_snapshots[self._phase] = snap
        self._pending = self._phase_pending = False

    def _note_grad(self, grad: torch.Tensor) -> None:
        uid = self._see(grad)
        if uid is not None:
            self._grad_uids.add(uid)

    def _snapshot(self) -> PeakSnapshot:
        grads = {uid for uid in self._grad_uids if uid in self._live}
        opt: set[int] = set()
        for oref in self._optimizers:
            o = oref()
            if o is None:
                continue
            for t in _state_tensors(o):
                s = self._storage(t)
                uid = self._uid(s) if s is not None else None
                if uid is not None:
                    opt.add(uid)
        by = dict.fromkeys(CATEGORIES, 0)
        detail = []
        for uid, rec in self._live.items():
            cat = self._registered.get(uid)
            if cat is None or cat == "gradients" or cat == "optimizer":
                if uid in grads:
                    cat = "gradients"
                elif uid in opt:
                    cat = "optimizer"
                elif cat is None:
                    cat = rec.hint or ("activations" if rec.phase in ("forward", "setup") else "temporaries")
            by[cat] += rec.nbytes
            detail.append((rec.nbytes, cat, rec.tag))
        self._detail = detail
        return PeakSnapshot(peak_bytes=self.live_bytes, phase=self._phase, by_category=by)


def _enter_head(ref: weakref.ref[LiveTensorTracker], module: torch.nn.Module, args: Any) -> None:
    """Forward pre-hook on the output layer: vocabulary-wide tensors from here on are logits; a hook on
    its input ends the span in backward, when the gradient reaches the last hidden state."""
    tracker = ref()
    if tracker is None:
        return
    tracker._in_head = tracker._head_seen = True
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.requires_grad:
        x.register_hook(functools.partial(_leave_head, ref))


def _grad_ready(ref: weakref.ref[LiveTensorTracker], param: torch.Tensor) -> None:
    """Post-accumulate-grad hook: ``param.grad`` now holds this step's gradient."""
    tracker = ref()
    if tracker is not None and tracker._active and param.grad is not None:
        tracker._note_grad(param.grad)


def _leave_head(ref: weakref.ref[LiveTensorTracker], grad: torch.Tensor) -> None:
    tracker = ref()
    if tracker is not None:
        tracker._in_head = False


def _state_tensors(optimizer: Any) -> Iterator[torch.Tensor]:
    state = getattr(optimizer, "state", {})
    for per_param in list(state.values()):
        if isinstance(per_param, dict):
            for v in per_param.values():
                if isinstance(v, torch.Tensor):
                    yield v
