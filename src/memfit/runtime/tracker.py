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

Gradients and optimizer state are classified when they become known (:mod:`memfit.runtime.ledger`), so the
peak snapshot is exact at the moment of the peak. The peak is reached just before the first free after a run
of allocations, so a snapshot is taken lazily at that free, not on every allocation.

Worked example (fp32, one ``nn.Linear(4, 8)``, input ``(2, 4)``): weights 4*8*4 + 8*4 = 160 B; the
output ``(2, 8)`` is 64 B; ``live_bytes`` after the forward = 160 + 32 (input, created outside) + 64.
A simulated device: ``memory_limit=`` raises :class:`SimulatedOutOfMemoryError` as soon as live bytes
exceed it, so the out-of-memory path is testable on CPU. A DTensor (FSDP2) counts its local shard's storage.

Extension points (the trace engine uses them; so can a timeline recorder or a Trainer callback):
``booked_size(nbytes)``, the bytes the target device books for a storage (the trace's CUDA prediction rounds
each up to 512 B); ``ignore_storage(storage)``, storages that live elsewhere on the target (the optimizer's
host-side step counters on CUDA); :meth:`subscribe`, a :class:`StorageEvent` per storage counted, freed or
resized (operator, phase, tag, live bytes after) and each phase entered or returned to; :meth:`set_phase`
for callers that cannot wrap a step in :meth:`phase`; :meth:`snapshot`, what is alive now, by category;
:meth:`live_by_category`, the same bytes kept up to date at every change (cheap enough to read at each event:
a timeline recorder does, :mod:`memfit.runtime.timeline`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from memfit.estimate.category import Category
from memfit.runtime.events import (
    LiveStorage,
    PeakSnapshot,
    PhaseObserver,
    SimulatedOutOfMemoryError,
    StorageEvent,
    StorageObserver,
)
from memfit.runtime.ledger import TRACKED_CATEGORIES, CategoryLedger, StorageRecord, local_of, optimizer_state_tensors
from memfit.runtime.quantise import quant_state_tensors

__all__ = ["TRACKED_CATEGORIES", "LiveStorage", "LiveTensorTracker", "PeakSnapshot", "SimulatedOutOfMemoryError",
           "StorageEvent", "optimizer_state_tensors"]

_PRIM_DEVICE = torch.ops.prim.device.default  # a device query: allocates nothing (a third of all fake calls)


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

    ``tag`` may be set by the caller (e.g. from module hooks, :class:`memfit.runtime.scopes.ModuleScopes`)
    and is recorded with each new storage; :meth:`peak_storages` returns the storages alive at the peak with
    their tags. ``booked_size``, ``ignore_storage`` and :meth:`subscribe`: the module docstring.
    """

    def __init__(self, *, vocab: int | None = None, memory_limit: int | None = None,
                 device_type: str | None = None, booked_size: Callable[[int], int] | None = None,
                 ignore_storage: Callable[[Any], bool] | None = None) -> None:
        super().__init__()
        self.vocab = vocab
        self.device_type = device_type  # count only storages on this device type ("cuda"); None = all
        self.memory_limit = memory_limit
        self.booked_size = booked_size
        self.ignore_storage = ignore_storage
        self.tag: str | None = None
        self.live_bytes = 0
        self.peak_bytes = 0
        self._phase = "setup"
        self._live: dict[int, StorageRecord] = {}
        self._ids = itertools.count()
        self._by_storage: dict[int, int] = {}  # id(storage object) -> uid, while alive
        self._optimizers: list[weakref.ref[Any]] = []
        self._pending = False
        self.peak = PeakSnapshot(peak_bytes=0, phase="setup", by_category=dict.fromkeys(TRACKED_CATEGORIES, 0))
        self.phase_peaks: dict[str, int] = {}
        self.phase_snapshots: dict[str, PeakSnapshot] = {}
        self._phase_pending = False
        self._in_head = False
        self._head_seen = False
        self._hooks: list[Any] = []
        self._active = False
        self._peak_detail: list[tuple[int, Category, str | None]] = []
        self._on_storage: list[StorageObserver] = []
        self._on_phase: list[PhaseObserver] = []
        self._op: Any = None  # the operator whose outputs are being counted
        # categories kept at every change (memfit.runtime.ledger). Gradients are recorded by a post-accumulate
        # hook, never read from p.grad in a storage finalizer (which can run while zero_grad tears that very
        # gradient down: reading p.grad there crashes). Optimizer state is looked for after allocations
        # outside forward/backward, where the optimizer makes it.
        self._ledger = CategoryLedger()
        self._opt_dirty = False

    # ---- registration ------------------------------------------------------------------------
    def track_model(self, model: torch.nn.Module) -> None:
        """Count the model's parameters and buffers (which already exist) and classify them."""
        for p in model.parameters():
            self._register(p, Category.WEIGHTS_TRAINABLE if p.requires_grad else Category.WEIGHTS_FROZEN)
            if p.grad is not None:
                self._register(p.grad, Category.GRADIENTS)
                self._note_grad(p.grad)
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    functools.partial(_grad_ready, weakref.ref(self))))
        for b in [*model.buffers(), *quant_state_tensors(model)]:  # bitsandbytes' QuantState / SCB: frozen weights
            self._register(b, Category.WEIGHTS_FROZEN)
        get_head = getattr(model, "get_output_embeddings", None)
        head = get_head() if callable(get_head) else None
        if isinstance(head, torch.nn.Module):
            # PEFT 0.21.2 TrainableTokensWrapper (tied lm_head): .weight makes a merged (V, h) table; read the Linear
            weight = getattr(getattr(getattr(head, "token_adapter", None), "base_layer", head), "weight", None)
            if self.vocab is None and isinstance(weight, torch.Tensor) and weight.dim() == 2:
                self.vocab = int(weight.shape[0])
            self._hooks.append(head.register_forward_pre_hook(functools.partial(_enter_head, weakref.ref(self))))

    def track_optimizer(self, optimizer: Any) -> None:
        """Classify the optimizer's state tensors, those that exist now and those created later."""
        self._optimizers.append(weakref.ref(optimizer))
        for t in optimizer_state_tensors(optimizer):
            self._register(t, Category.OPTIMIZER)

    def track_tensors(self, tensors: Iterable[torch.Tensor], category: Category | None = None) -> None:
        """Count tensors created outside the mode (inputs); ``category`` None = by phase."""
        for t in tensors:
            if category is None:
                self._see(t)
            else:
                self._register(t, category)

    def subscribe(self, *, on_storage: StorageObserver | None = None,
                  on_phase: PhaseObserver | None = None) -> Callable[[], None]:
        """Call ``on_storage(event)`` at every change of the live bytes and ``on_phase(name)`` at every phase
        change; returns the function that unsubscribes both."""
        if on_storage is not None:
            self._on_storage.append(on_storage)
        if on_phase is not None:
            self._on_phase.append(on_phase)

        def unsubscribe() -> None:
            if on_storage is not None and on_storage in self._on_storage:
                self._on_storage.remove(on_storage)
            if on_phase is not None and on_phase in self._on_phase:
                self._on_phase.remove(on_phase)

        return unsubscribe

    # ---- phases ------------------------------------------------------------------------------
    @property
    def current_phase(self) -> str:
        return self._phase

    def set_phase(self, name: str) -> str:
        """Attribute allocations and peaks from now on to phase ``name``; returns the phase it replaces."""
        self._flush()
        previous, self._phase = self._phase, name
        if name == "forward":
            self._in_head = self._head_seen = False
        elif name == "backward":
            self._in_head = self._head_seen
        else:
            self._in_head = False
        self.phase_peaks[name] = max(self.phase_peaks.get(name, 0), self.live_bytes)
        for observer in self._on_phase:
            observer(name)
        return previous

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute allocations and peaks inside the block to phase ``name``."""
        previous = self.set_phase(name)
        try:
            yield
        finally:
            self._flush()
            self._phase = previous
            for observer in self._on_phase:
                observer(previous)

    @property
    def peak_phase(self) -> str:
        return self.peak.phase

    def peak_storages(self) -> list[tuple[int, Category, str | None]]:
        """``(nbytes, category, tag)`` for each storage alive at the peak, largest first."""
        return sorted(self._peak_detail, key=lambda r: -r[0])

    def snapshot(self) -> PeakSnapshot:
        """What is alive now, by category (``peak_bytes`` is the live bytes now)."""
        return self._snapshot()[0]

    def live_by_category(self) -> dict[Category, int]:
        """The bytes alive now by category: :meth:`snapshot`'s ``by_category``, from a ledger kept at every
        change instead of a scan of every live storage (so an observer may read it at each event)."""
        if self._opt_dirty:
            self._refresh_optimizer_uids()
        return dict(self._ledger.bytes)

    def live_storages(self) -> list[LiveStorage]:
        """Every storage alive now, in the order it was counted."""
        cats = self._ledger.category
        return [LiveStorage(storage=uid, nbytes=rec.nbytes, size=rec.size, category=cats[uid], tag=rec.tag)
                for uid, rec in self._live.items()]

    def category_of(self, storage: int) -> Category | None:
        """The category a live storage (a :class:`StorageEvent`'s ``storage``) is booked under now."""
        return self._ledger.category.get(storage)

    def booked_bytes(self, t: torch.Tensor) -> int:
        """The bytes this tracker books for ``t``'s storage: ``booked_size`` of its size, 0 if ignored."""
        storage = self._storage(t)
        if storage is None or (self.ignore_storage is not None and self.ignore_storage(storage)):
            return 0
        return self._booked(int(storage.nbytes()))

    def summary(self) -> dict[str, Any]:
        """JSON-ready: peak, its phase and categories, per-phase peaks."""
        self._flush()
        return {"peak_bytes": self.peak_bytes, "peak_phase": self.peak.phase,
                "by_category": dict(self.peak.by_category), "phase_peaks": dict(self.phase_peaks)}

    # ---- dispatch ----------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is _PRIM_DEVICE:
            return out
        self._op = func
        try:
            if isinstance(out, torch.Tensor):  # the common case needs no pytree flattening
                self._see(out)
            else:
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        self._see(t)
        finally:
            self._op = None
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
            return local_of(t).untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested, ... : nothing to count
            return None

    def _uid(self, storage: Any) -> int | None:
        uid = self._by_storage.get(id(storage))
        if uid is not None and uid in self._live and self._live[uid].ref() is storage:
            return uid
        return None

    def _booked(self, nbytes: int) -> int:
        return nbytes if self.booked_size is None else self.booked_size(nbytes)

    def _see(self, t: torch.Tensor) -> int | None:
        storage = self._storage(t)
        if storage is None or (self.device_type is not None and storage.device.type != self.device_type):
            return None
        uid = self._uid(storage)
        if uid is not None:
            rec = self._live[uid]
            size = int(storage.nbytes())
            nbytes = self._booked(size)
            if nbytes != rec.nbytes:  # resized in place (resize_, set_)
                delta, rec.nbytes = nbytes - rec.nbytes, nbytes
                size_delta, rec.size = size - rec.size, size
                self._ledger.resize(uid, delta)
                self._add(delta)
                self._notify("resize", uid, delta, size_delta)
                self._check_limit(delta)
            return uid
        if self.ignore_storage is not None and self.ignore_storage(storage):
            return None
        hint = (Category.LOGITS if (self._in_head and self.vocab and t.dim() >= 1 and t.shape[-1] == self.vocab)
                else None)
        uid = next(self._ids)
        size = int(storage.nbytes())
        rec = StorageRecord(nbytes=self._booked(size), size=size, phase=self._phase, hint=hint, tag=self.tag)
        rec.ref = weakref.ref(storage)
        self._live[uid] = rec
        self._by_storage[id(storage)] = uid
        weakref.finalize(storage, self._free, uid, id(storage)).atexit = False
        if self._optimizers and self._phase not in ("forward", "backward"):
            self._opt_dirty = True  # the optimizer makes its state in its step: look for it at the next read
        self._ledger.add(uid, rec)
        self._add(rec.nbytes)
        self._notify("alloc", uid, rec.nbytes, size)
        self._check_limit(rec.nbytes)
        return uid

    def _notify(self, kind: Literal["alloc", "free", "resize"], uid: int, nbytes: int, size: int,
                category: Category | None = None) -> None:
        if not self._on_storage:
            return
        op = None if self._op is None else str(self._op)
        event = StorageEvent(kind=kind, storage=uid, nbytes=nbytes, live_bytes=self.live_bytes, phase=self._phase,
                             tag=self.tag, op=op, size=size, category=category or self._ledger.category.get(uid))
        for observer in self._on_storage:
            observer(event)

    def _register(self, t: torch.Tensor, category: Category) -> None:
        uid = self._see(t)
        if uid is not None:
            self._ledger.register(uid, category)
            if category is Category.OPTIMIZER:
                self._opt_dirty = True
            self._ledger.reclassify(uid, self._live.get(uid))

    def _refresh_optimizer_uids(self) -> None:
        self._opt_dirty = False
        self._ledger.set_optimizer_uids(self._optimizer_uids(), self._live)

    def _optimizer_uids(self) -> set[int]:
        found: set[int] = set()
        for oref in self._optimizers:
            o = oref()
            if o is None:
                continue
            for t in optimizer_state_tensors(o):
                s = self._storage(t)
                uid = self._uid(s) if s is not None else None
                if uid is not None:
                    found.add(uid)
        return found

    def _add(self, nbytes: int) -> None:
        self.live_bytes += nbytes
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._pending = True
        if self.live_bytes > self.phase_peaks.get(self._phase, 0):
            self.phase_peaks[self._phase] = self.live_bytes
            self._phase_pending = True

    def _check_limit(self, nbytes: int) -> None:
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
        cat = self._ledger.forget(uid, rec)
        self.live_bytes -= rec.nbytes
        self._notify("free", uid, -rec.nbytes, -rec.size, cat)

    def _flush(self) -> None:
        """Take the pending snapshots: live bytes are at a (phase) peak right now."""
        if not (self._pending or self._phase_pending):
            return
        snap, detail = self._snapshot()
        if self._pending and self.live_bytes == self.peak_bytes:
            self.peak = snap
            self._peak_detail = detail
        if self._phase_pending and self.live_bytes == self.phase_peaks.get(self._phase, -1):
            self.phase_snapshots[self._phase] = snap
        self._pending = self._phase_pending = False

    def _note_grad(self, grad: torch.Tensor) -> None:
        uid = self._see(grad)
        if uid is not None:
            self._ledger.note_grad(uid, self._live.get(uid))

    def _snapshot(self) -> tuple[PeakSnapshot, list[tuple[int, Category, str | None]]]:
        """What is alive now by category, from the ledger (optimizer state looked up afresh first)."""
        self._refresh_optimizer_uids()
        by = dict.fromkeys(TRACKED_CATEGORIES, 0)
        by.update(self._ledger.bytes)
        snap = PeakSnapshot(peak_bytes=self.live_bytes, phase=self._phase, by_category=by)
        return snap, self._ledger.detail(self._live.items())

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

