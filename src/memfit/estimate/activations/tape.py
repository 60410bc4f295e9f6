"""A symbolic autograd tape: what PyTorch keeps for the backward, op by op, without any tensor data.

Each op saves what its derivative formula needs *for the inputs that require grad*, which is how
autograd decides:

=====================  ============================================================================
op                     saved for backward
=====================  ============================================================================
linear(x, W)           x if W requires grad; W (or its autocast copy) if x requires grad
a * b (tensors)        b if a requires grad; a if b requires grad
a @ b                  the same, on the operands as the matmul sees them (autocast copies)
f(x), saving input     x (silu, gelu)
f(x), saving output    f(x) (softmax, tanh, relu)
x.to(dtype), a + b     nothing (a cast makes a new storage unless the dtype already matches)
=====================  ============================================================================

A :class:`SymTensor` carries its shape, element size, ``requires_grad`` and its storage; a view shares the
storage of its base, and saving any view keeps the whole storage alive (a storage is counted once however
many ops save it). Parameters come from :meth:`Tape.param` and are never counted as saved activations.

Every op whose output requires grad records a :class:`BackwardEvent`: when its backward runs, the tensors
saved up to and including it are still alive and the gradients of its output and of each input that
requires grad are allocated at once. ``pending`` takes out gradients the caller knows do not exist yet at
that moment (a block's adapter gradients while its experts run backward, :mod:`.moe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod


@dataclass(frozen=True, slots=True)
class SymTensor:
    """A tensor as autograd sees it. ``storage`` identifies the storage (views share it) and
    ``storage_bytes`` is its size: what saving this tensor (or any view of it) keeps alive."""

    shape: tuple[int, ...]
    itemsize: int
    requires_grad: bool
    storage: int
    storage_bytes: int

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The tensor's own bytes (a view's part of its storage): what its gradient takes."""
        return self.numel * self.itemsize

    def view(self, *shape: int) -> SymTensor:
        """A view (or a slice) of this tensor's storage with ``shape``: ``qkv[..., :a*d]``, ``x.view(b, a, s, d)``."""
        return SymTensor(shape, self.itemsize, self.requires_grad, self.storage, self.storage_bytes)


@dataclass(frozen=True, slots=True)
class Saved:
    nbytes: int
    component: str  # where it is kept: "attention/scores", "mlp/act" ...


@dataclass(frozen=True, slots=True)
class BackwardEvent:
    """One op's backward: ``saved_before`` bytes saved by the forward up to this op (still alive when its
    backward runs) and ``grad_bytes`` of gradients alive at once (its output's and its inputs')."""

    saved_before: int
    grad_bytes: int


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in the forward (:meth:`Tape.mark`), to ask what was saved and recorded since."""

    n_saved: int
    n_events: int
    saved_total: int
    n_forward: int = 0


@dataclass
class Tape:
    """One symbolic forward: the storages saved (in the order saved) and the backward events.

    ``compute_itemsize`` is the activations' element size (the autocast dtype under ``autocast``, else the
    weights'); under ``autocast`` every linear and matmul input is cast to it, and a weight of another dtype
    is copied at every use (:meth:`weight`).
    """

    compute_itemsize: int
    autocast: bool = False
    # FSDP2's MixedPrecisionPolicy(param_dtype=compute): every weight a module sees is its gathered parameter, already
    # in the compute dtype; autocast copies none (:meth:`weight`)
    params_in_compute: bool = False
    saved: dict[int, Saved] = field(default_factory=dict)
    events: list[BackwardEvent] = field(default_factory=list)
    saved_total: int = 0
    # storages an autograd Function keeps as a ctx attribute, not via save_for_backward: checkpointing cannot drop
    # them (bitsandbytes' LLM.int8 matmuls keep x as ``ctx.A``)
    held: dict[int, int] = field(default_factory=dict)
    forward: list[BackwardEvent] = field(default_factory=list)  # forward transients (:meth:`transient`)
    # --offload-activations (TRL 1.16's OffloadActivations, memfit.runtime.act_offload): a non-parameter tensor saved
    # with at least ``offload_min`` bytes goes to host memory, one copy per save (``host_total``), and keeps no device
    # bytes; ``offload_paused`` (lm_head: TRL's NoOpManager) keeps saves on the device; ``offload_copy_back`` (CUDA):
    # an op's backward holds a device copy of what it saved (``_unpacked``, added to its BackwardEvent)
    offload_min: int = 0
    offload_paused: bool = False
    offload_copy_back: bool = False
    host_total: int = 0
    cached_total: int = 0  # --offload-activations under autocast: trainable weights' cached casts (:meth:`weight`)
    cache_casts: bool = False  # count them (--offload-activations: nothing else holds them on the device)
    _unpacked: int = field(default=0, init=False, repr=False)
    _params: set[int] = field(default_factory=set, init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)

    # ---- tensors -------------------------------------------------------------------------
    def new(self, shape: tuple[int, ...], itemsize: int, requires_grad: bool) -> SymTensor:
        """A fresh tensor with its own storage."""
        self._next += 1
        return SymTensor(shape, itemsize, requires_grad, self._next, prod(shape) * itemsize)

    def param(self, shape: tuple[int, ...], itemsize: int, requires_grad: bool) -> SymTensor:
        """A parameter (or a view of one): an op may save it, but it is a weight, not an activation."""
        t = self.new(shape, itemsize, requires_grad)
        self._params.add(t.storage)
        return t

    def is_param(self, t: SymTensor) -> bool:
        return t.storage in self._params

    def weight(self, shape: tuple[int, ...], itemsize: int, requires_grad: bool) -> SymTensor:
        """A weight as a linear sees it: the parameter itself, or under autocast a copy in the compute dtype."""
        if self.params_in_compute:
            return self.param(shape, self.compute_itemsize, requires_grad)
        if self.autocast and itemsize != self.compute_itemsize:
            if requires_grad and self.cache_casts and not self.offload_paused:
                # autocast caches a trainable leaf's cast to the end of the forward: offloaded, it stays there too
                self.cached_total += prod(shape) * self.compute_itemsize
            return self.new(shape, self.compute_itemsize, requires_grad)
        return self.param(shape, itemsize, requires_grad)

    # ---- bookkeeping ---------------------------------------------------------------------
    def save(self, t: SymTensor, component: str, *, times: int = 1) -> None:
        """Keep ``t``'s storage for the backward (once; parameters never); offloaded: a host copy per save (``times``
        saves by as many ops)."""
        if t.storage in self._params:
            return
        if self.offload_min and not self.offload_paused and t.nbytes >= self.offload_min:
            self.host_total += times * t.nbytes
            self._unpacked += times * t.nbytes
            return
        if t.storage in self.saved:
            return
        self.saved[t.storage] = Saved(t.storage_bytes, component)
        self.saved_total += t.storage_bytes

    def op(self, inputs: tuple[SymTensor, ...], out: SymTensor, *, pending: int = 0) -> SymTensor:
        """Record an op for the backward replay (when its output requires grad); returns ``out``."""
        if out.requires_grad:
            grads = out.nbytes + sum(i.nbytes for i in inputs if i.requires_grad)
            back = self._unpacked if self.offload_copy_back else 0
            self.events.append(BackwardEvent(self.saved_total + back, grads - pending))
        self._unpacked = 0
        return out

    def event(self, grad_bytes: int, *, saved_before: int | None = None) -> None:
        """Record a backward moment the op rules above do not make (a fused kernel's weight gradient)."""
        self.events.append(BackwardEvent(self.saved_total if saved_before is None else saved_before, grad_bytes))

    def transient(self, nbytes: int) -> None:
        """Record a forward moment: ``nbytes`` of temporaries alive on top of everything saved so far (DoRA's
        weight norm, :func:`memfit.estimate.activations.ops.dora`); ``grad_bytes`` holds the temporaries."""
        self.forward.append(BackwardEvent(self.saved_total, nbytes))

    def forward_peak(self, mark: Mark) -> tuple[int, int]:
        """The widest forward transient recorded since ``mark`` (every one since it, as forward events are few):
        (bytes saved since ``mark`` at that moment, the temporaries); (0, 0) when none was recorded."""
        events = [(e.saved_before - mark.saved_total, e.grad_bytes) for e in self.forward[mark.n_forward:]]
        return max(events, key=sum, default=(0, 0))

    def mark(self) -> Mark:
        return Mark(len(self.saved), len(self.events), self.saved_total, len(self.forward))

    def saved_since(self, mark: Mark) -> dict[int, Saved]:
        """The storages saved after ``mark``, in the order saved."""
        return dict(list(self.saved.items())[mark.n_saved:])

    def backward_peak(self, mark: Mark) -> int:
        """Replay the backward of the ops after ``mark`` in reverse: when op j's backward runs, the tensors saved
        by the ops up to j are alive and its gradients are allocated; the widest such moment, counted from the
        bytes saved at ``mark``."""
        return max((e.saved_before - mark.saved_total + e.grad_bytes for e in self.events[mark.n_events:]),
                   default=0)

    # ---- ops -----------------------------------------------------------------------------
    def cast(self, t: SymTensor, itemsize: int) -> SymTensor:
        """``t.to(dtype)``: a new storage unless the dtype already matches; saves nothing."""
        return t if t.itemsize == itemsize else self.new(t.shape, itemsize, t.requires_grad)

    def add(self, a: SymTensor, b: SymTensor) -> SymTensor:
        """``a + b`` (broadcast): saves nothing, and its backward only passes the gradient on."""
        return self.new(_wider(a, b), max(a.itemsize, b.itemsize), a.requires_grad or b.requires_grad)

    def mul(self, a: SymTensor, b: SymTensor, component: str, *, pending: int = 0) -> SymTensor:
        """``a * b`` (broadcast; type promotion: the wider dtype)."""
        if a.requires_grad:
            self.save(b, component)
        if b.requires_grad:
            self.save(a, component)
        out = self.new(_wider(a, b), max(a.itemsize, b.itemsize), a.requires_grad or b.requires_grad)
        return self.op((a, b), out, pending=pending)

    def matmul(self, a: SymTensor, b: SymTensor, out_shape: tuple[int, ...], component: str) -> SymTensor:
        """``a @ b`` (under autocast on compute-dtype copies of both)."""
        if self.autocast:
            a, b = self.cast(a, self.compute_itemsize), self.cast(b, self.compute_itemsize)
        if b.requires_grad:
            self.save(a, component)
        if a.requires_grad:
            self.save(b, component)
        out = self.new(out_shape, max(a.itemsize, b.itemsize), a.requires_grad or b.requires_grad)
        return self.op((a, b), out)

    def linear(self, x: SymTensor, w: SymTensor, out_features: int, component: str) -> SymTensor:
        """``F.linear(x, w)`` with ``w`` from :meth:`weight`: x (..., in) -> (..., out)."""
        xc = self.cast(x, self.compute_itemsize) if self.autocast else x
        if w.requires_grad:
            self.save(xc, component)
        if xc.requires_grad:
            self.save(w, component if self.is_param(w) else component + "/weight_copy")
        itemsize = self.compute_itemsize if self.autocast else xc.itemsize
        out = self.new(x.shape[:-1] + (out_features,), itemsize, x.requires_grad or w.requires_grad)
        return self.op((xc,), out)

    def unary_saving_input(self, x: SymTensor, component: str, *, pending: int = 0) -> SymTensor:
        """silu, gelu: the backward reads the input."""
        if x.requires_grad:
            self.save(x, component)
        return self.op((x,), self.new(x.shape, x.itemsize, x.requires_grad), pending=pending)

    def unary_saving_output(self, x: SymTensor, component: str, itemsize: int | None = None, *,
                            pending: int = 0) -> SymTensor:
        """softmax, tanh, relu: the backward reads the output (``itemsize``: softmax(dtype=float32))."""
        out = self.new(x.shape, itemsize or x.itemsize, x.requires_grad)
        if x.requires_grad:
            self.save(out, component)
        return self.op((x,), out, pending=pending)


def _wider(a: SymTensor, b: SymTensor) -> tuple[int, ...]:
    """The broadcast result's shape: the operand with more elements (the other broadcasts into it)."""
    return a.shape if a.numel >= b.numel else b.shape
