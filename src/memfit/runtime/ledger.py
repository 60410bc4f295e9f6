"""Which category each live storage is booked under, and the bytes per category, kept at every change.

The rule (the tracker's module docstring has the categories): a storage registered as a weight keeps that
category; one known to be a parameter's ``.grad`` is ``gradients``; one found in an optimizer's state is
``optimizer``; anything else is ``logits`` when it was made vocabulary-wide inside the output layer's span,
else ``activations`` when made in the forward (or before the step), else ``temporaries``. Gradients and
optimizer state become known after their storage was counted (autograd attaches ``.grad`` later, the optimizer
makes its state inside ``step()``), so a storage is re-classified when that becomes known.

Worked: a weight registered as ``weights_trainable`` (160 B) and an activation (64 B) give
``{weights_trainable: 160, activations: 64}``; when the activation's storage turns out to be a gradient, the
64 B move to ``gradients``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from memfit.estimate.category import Category

__all__ = ["TRACKED_CATEGORIES", "CategoryLedger", "StorageRecord", "optimizer_state_tensors"]

TRACKED_CATEGORIES: tuple[Category, ...] = tuple(c for c in Category if c not in (Category.INPUTS,
                                                                                  Category.UNTRACKED))
"""What the tracker tells apart. The input ids are made inside the step, so they count with the forward's
activations; ``untracked`` is what a device counter sees beyond tensors (measure adds it on CUDA)."""


@dataclass(slots=True)
class StorageRecord:
    """One live storage as the tracker counts it."""

    nbytes: int  # booked bytes
    size: int  # the storage's own bytes (what a program asked the allocator for)
    phase: str
    hint: Category | None  # LOGITS for vocabulary-shaped tensors
    tag: str | None
    ref: Any = None


class CategoryLedger:
    """The category of every live storage (keyed by the tracker's uid) and the bytes per category.

    >>> ledger = CategoryLedger()
    >>> ledger.register(1, Category.WEIGHTS_TRAINABLE)
    >>> w, a = StorageRecord(160, 160, "setup", None, None), StorageRecord(64, 64, "forward", None, None)
    >>> ledger.add(1, w), ledger.add(2, a)
    (<Category.WEIGHTS_TRAINABLE: 'weights_trainable'>, <Category.ACTIVATIONS: 'activations'>)
    >>> ledger.note_grad(2, a); ledger.bytes[Category.GRADIENTS], ledger.bytes[Category.ACTIVATIONS]
    (64, 0)
    """

    def __init__(self) -> None:
        self.registered: dict[int, Category] = {}  # uid -> registered category
        self.grad_uids: set[int] = set()
        self.opt_uids: set[int] = set()
        self.category: dict[int, Category] = {}
        self.bytes: dict[Category, int] = dict.fromkeys(TRACKED_CATEGORIES, 0)

    def classify(self, uid: int, rec: StorageRecord) -> Category:
        """The category of a live storage now (the module docstring's rule)."""
        cat = self.registered.get(uid)
        if cat is None or cat in (Category.GRADIENTS, Category.OPTIMIZER):
            if uid in self.grad_uids:
                return Category.GRADIENTS
            if uid in self.opt_uids:
                return Category.OPTIMIZER
            if cat is None:
                return rec.hint or (Category.ACTIVATIONS if rec.phase in ("forward", "setup") else Category.TEMPORARIES)
        return cat

    def add(self, uid: int, rec: StorageRecord) -> Category:
        """Book a newly counted storage; returns its category."""
        cat = self.category[uid] = self.classify(uid, rec)
        self.bytes[cat] += rec.nbytes
        return cat

    def resize(self, uid: int, delta: int) -> None:
        self.bytes[self.category[uid]] += delta

    def reclassify(self, uid: int, rec: StorageRecord | None) -> None:
        """Move a storage's bytes to the category the rule gives now."""
        if rec is None:
            return
        new, old = self.classify(uid, rec), self.category.get(uid)
        if new is not old:
            if old is not None:
                self.bytes[old] -= rec.nbytes
            self.category[uid] = new
            self.bytes[new] += rec.nbytes

    def register(self, uid: int, category: Category) -> None:
        self.registered[uid] = category

    def note_grad(self, uid: int, rec: StorageRecord | None) -> None:
        self.grad_uids.add(uid)
        self.reclassify(uid, rec)

    def set_optimizer_uids(self, found: set[int], live: dict[int, StorageRecord]) -> None:
        """The optimizer state's storages are ``found`` now: re-classify those that joined or left."""
        changed = found ^ self.opt_uids
        self.opt_uids = found
        for uid in changed:
            self.reclassify(uid, live.get(uid))

    def forget(self, uid: int, rec: StorageRecord) -> Category:
        """A storage freed: unbook it; returns the category it had."""
        self.registered.pop(uid, None)
        self.grad_uids.discard(uid)
        self.opt_uids.discard(uid)
        cat = self.category.pop(uid)
        self.bytes[cat] -= rec.nbytes
        return cat

    def detail(self, live: Iterable[tuple[int, StorageRecord]]) -> list[tuple[int, Category, str | None]]:
        """``(nbytes, category, tag)`` for each live storage."""
        return [(rec.nbytes, self.category[uid], rec.tag) for uid, rec in live]


def optimizer_state_tensors(optimizer: Any) -> Iterator[torch.Tensor]:
    """Every tensor in ``optimizer.state`` (AdamW's ``exp_avg``, ``exp_avg_sq`` and ``step``; SGD's
    ``momentum_buffer``; Adafactor's factors), as the tracker classifies them."""
    # bitsandbytes' 8-bit maps ("dynamic", "udynamic"), made when the optimizer is, shared by every parameter
    yield from (v for v in getattr(optimizer, "name2qmap", {}).values() if isinstance(v, torch.Tensor))
    state = getattr(optimizer, "state", {})
    for per_param in list(state.values()):
        if isinstance(per_param, dict):
            for v in per_param.values():
                if isinstance(v, torch.Tensor):
                    yield v


def local_of(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor holding ``t``'s bytes on this process: a ``DTensor`` (FSDP2's sharded parameters, their
    gradients and optimizer state, torch 2.13.0) is a wrapper whose own storage is its full logical size; its one
    inner tensor (``__tensor_flatten__``, here ``_local_tensor``) is the shard this rank holds."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    while is_traceable_wrapper_subclass(t):
        inner = [x for x in (getattr(t, n) for n in t.__tensor_flatten__()[0]) if isinstance(x, torch.Tensor)]
        if len(inner) != 1:  # DTensor 2.13 also names its device_mesh, not a tensor
            break
        t = inner[0]
    return t
