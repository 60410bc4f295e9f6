"""Which module created a storage, and which storages autograd saved for backward, per module.

:class:`ModuleScopes` keeps a stack of module paths with global forward pre/post hooks (so modules
re-run by checkpoint recomputation in backward are named too) and writes the innermost path into the
tracker's ``tag`` before every operator: each new storage is recorded with the module whose forward
created it. Outside any module forward the tag is the tracker's phase (``"(backward)"``, ``"(optimizer)"``),
followed through :meth:`~memfit.runtime.tracker.LiveTensorTracker.subscribe`.

Not torch's ``ModTracker`` (``torch.distributed._tools.mod_tracker``, torch 2.13.0): it keeps the *set* of
running modules (``parents``), not the innermost one, and follows backward by registering multi-grad hooks
on every module's inputs and outputs, which adds nodes to the autograd graph the step would not have.

:class:`SavedTensorLedger` is a ``saved_tensors_hooks`` pair whose pack hook returns the tensor
unchanged (autograd hands a pack hook a storage-sharing alias without ``grad_fn`` for a saved output,
so no reference cycle is made and lifetimes are those of a run without hooks: a test checks this) and
records, once per storage, its bytes and the module saving it. Non-reentrant checkpointing installs
its own hooks inside each checkpointed block, so under checkpointing only what the checkpoint keeps
(the block inputs) is seen, attributed to the module that calls the block.
"""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from memfit.estimate.arch import block_containers
from memfit.runtime.tracker import LiveTensorTracker

_LAYER = re.compile(rf"(?:^|\.)(?:{'|'.join(block_containers())})\.(\d+)(?:\.|$)")


def layer_index(path: str | None) -> int | None:
    """The decoder-block index in a module path (``model.layers.3.mlp`` -> 3), or None.

    >>> layer_index("base_model.model.model.layers.12.self_attn.q_proj.lora_A.default")
    12
    >>> layer_index("transformer.h.0.attn") , layer_index("lm_head")
    (0, None)
    """
    if not path:
        return None
    m = _LAYER.search(path)
    return int(m.group(1)) if m else None


def short_path(path: str) -> str:
    """Drop PEFT's wrapper prefix so trace tables read like the base model (``model.layers.0.mlp``)."""
    for prefix in ("base_model.model.", "base_model."):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


class ModuleScopes:
    """Context manager: set ``tracker.tag`` to the innermost running module's path (PEFT prefix dropped),
    and to the tracker's phase in parentheses while no module runs."""

    def __init__(self, model: torch.nn.Module, tracker: LiveTensorTracker) -> None:
        self.tracker = tracker
        self._names = {id(m): short_path(n) or "(model)" for n, m in model.named_modules()}
        self._stack: list[str] = []
        self._handles: list[Any] = []
        self._unsubscribe: Callable[[], None] | None = None
        self.outside = f"({tracker.current_phase})"

    def __enter__(self) -> ModuleScopes:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._pre),
                         register_module_forward_hook(self._post, always_call=True)]
        self._unsubscribe = self.tracker.subscribe(on_phase=lambda name: self.set_outside(f"({name})"))
        self.tracker.tag = self.outside
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack.clear()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def set_outside(self, label: str) -> None:
        """The tag used while no module forward runs (the phase: ``"(backward)"``, ``"(optimizer)"``)."""
        self.outside = label
        if not self._stack:
            self.tracker.tag = label

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        name = self._names.get(id(module))
        if name is not None:
            self._stack.append(name)
            self.tracker.tag = name

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if id(module) in self._names and self._stack:
            self._stack.pop()
            self.tracker.tag = self._stack[-1] if self._stack else self.outside


class SavedTensorLedger:
    """Bytes autograd saves for backward, per module, counting each storage once."""

    def __init__(self, scopes: ModuleScopes, exclude: set[int] | None = None) -> None:
        self.scopes = scopes
        self.by_module: dict[str, int] = defaultdict(int)
        self._seen: weakref.WeakSet[Any] = weakref.WeakSet()
        self._exclude = exclude or set()  # id()s of parameter/buffer storages: weights are not activations
        self._ctx: Any = None

    @classmethod
    def for_model(cls, model: torch.nn.Module, scopes: ModuleScopes) -> SavedTensorLedger:
        ids = set()
        for t in list(model.parameters()) + list(model.buffers()):
            ids.add(id(t.untyped_storage()))
        return cls(scopes, ids)

    def __enter__(self) -> SavedTensorLedger:
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.by_module.values())

    def by_layer(self) -> dict[str, int]:
        """Saved bytes per decoder block (``"layer 3"``) with everything else under its module path."""
        out: dict[str, int] = defaultdict(int)
        for path, n in self.by_module.items():
            i = layer_index(path)
            out[f"layer {i}" if i is not None else path] += n
        return dict(out)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return t
        if id(storage) in self._exclude or storage in self._seen:
            return t
        self._seen.add(storage)
        tag = self.scopes.tracker.tag or self.scopes.outside
        self.by_module[tag] += int(storage.nbytes())
        return t


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t
