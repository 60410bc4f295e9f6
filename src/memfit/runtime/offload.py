"""Activation offloading: the checkpoints' copies in host memory, counted apart from the device's bytes.

What ``--offload`` runs is transformers 5.24.0's ``activation_checkpointing_enable(offload=True)``
(``PreTrainedModel._activation_checkpointing_enable``, modeling_utils.py): each checkpointed layer runs as ::

    with torch.autograd.graph.save_on_cpu(pin_memory=True, device_type=<the accelerator, else "cpu">):
        return checkpoint(layer_forward, *args, use_reentrant=False)

Which tensors that moves (torch 2.13.0): non-reentrant ``checkpoint`` saves the layer's *positional* arguments
with ``_CheckpointFrame.save_inputs`` (``_make_saved_tensor``: the ambient saved-tensor hooks apply, so
``save_on_cpu`` packs them), while everything the layer saves inside goes through checkpoint's own inner hooks
(innermost wins) and is recomputed in backward. transformers' ``GradientCheckpointingLayer`` passes only
``hidden_states`` positionally (the rest, position embeddings and the attention mask, are bound in a
``functools.partial``), so what goes to the host is one block input per checkpointed layer: b*s*h in the residual
dtype. ``save_on_cpu``'s pack with ``pin_memory=True`` is ``torch.empty(size, pin_memory=...)`` + ``copy_``: a
new host tensor, even when the source is already on the CPU. Unpack (backward) is ``tensor.to(device)``: on CUDA a
device copy of that one input while its layer is recomputed; on a CPU run the host tensor itself.

On a CPU-only torch ``pin_memory=True`` raises ("requires a CUDA or other accelerator backend"), so transformers'
own offload cannot run on a CPU machine. :func:`offloaded_checkpoint` is the same wrapper with the same pack,
pinning only where an accelerator exists, and marks the packed storages as host memory while it packs
(:class:`HostCopies`): the tracker leaves them out of the device's bytes (``ignore_storage``) and ``HostCopies``
counts them, so ``measure`` and ``trace`` report the device and the host apart. In a CUDA trace (CPU fake
tensors) unpack makes the device copy CUDA's ``.to("cuda")`` would make.

transformers' ``offload=True`` only exists with checkpointing, so ``--offload`` with ``--checkpointing none`` is
refused. TRL's ``activation_offloading=True`` wraps the whole step in its own saved-tensor hooks
(``OffloadActivations``: every saved tensor above a size threshold goes to the host, with or without
checkpointing): that is ``--offload-activations`` (:mod:`memfit.runtime.act_offload`), booked in the same
:class:`HostCopies`.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks
from torch.utils.checkpoint import checkpoint

__all__ = ["HostCopies", "active_host", "apply_offload", "counting_host", "offloaded_checkpoint"]

_ACTIVE: list[HostCopies] = []  # the HostCopies the current step counts into (innermost last)


class HostCopies:
    """The storages offloading packed into host memory: their live bytes and peak (integers).

    Use as the tracker's ``ignore_storage`` (:meth:`claims`) and enter :func:`counting_host` around the step."""

    def __init__(self, *, device_copy_on_unpack: bool = False) -> None:
        self.device_copy_on_unpack = device_copy_on_unpack  # a CUDA trace: unpack copies back to the device
        self.live_bytes = 0
        self.peak_bytes = 0
        self._packing = 0
        self._seen: dict[int, int] = {}

    def claims(self, storage: Any) -> bool:
        """True for a storage made while packing (it lives on the host): counted here, not on the device; and for
        such a storage seen again later (a view of it an unpack returns: ``as_strided`` in
        :mod:`memfit.runtime.act_offload`)."""
        key = id(storage)
        if key in self._seen:
            return True
        if not self._packing:
            return False
        if key not in self._seen:
            nbytes = int(storage.nbytes())
            self._seen[key] = nbytes
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            weakref.finalize(storage, self._free, key).atexit = False
        return True

    def _free(self, key: int) -> None:
        self.live_bytes -= self._seen.pop(key, 0)

    @contextlib.contextmanager
    def packing(self) -> Iterator[None]:
        self._packing += 1
        try:
            yield
        finally:
            self._packing -= 1


@contextlib.contextmanager
def counting_host(host: HostCopies) -> Iterator[HostCopies]:
    """Within the block, offloaded checkpoints count their host copies in ``host``."""
    _ACTIVE.append(host)
    try:
        yield host
    finally:
        _ACTIVE.remove(host)


def active_host() -> HostCopies | None:
    """The HostCopies the current step counts into (:func:`counting_host`), or None."""
    return _ACTIVE[-1] if _ACTIVE else None


class _HostSaveOnCpu(saved_tensors_hooks):
    """``save_on_cpu(pin_memory=True)``'s pack and unpack (torch 2.13.0 autograd/graph.py), pinning only where an
    accelerator is present, with the packed copy marked as host memory."""

    def __init__(self) -> None:
        pinnable = torch.cuda.is_available()

        def pack(tensor: torch.Tensor) -> tuple[torch.device, torch.Tensor]:
            host = _ACTIVE[-1] if _ACTIVE else None
            with host.packing() if host is not None else contextlib.nullcontext():
                packed = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout,
                                     pin_memory=pinnable and not tensor.is_sparse)
                packed.copy_(tensor, non_blocking=pinnable)
                if host is not None:
                    host.claims(packed.untyped_storage())
            return tensor.device, packed

        def unpack(packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
            device, tensor = packed
            host = _ACTIVE[-1] if _ACTIVE else None
            if host is not None and host.device_copy_on_unpack:
                return tensor.clone()  # a CUDA trace: .to("cuda") makes a device copy
            return tensor.to(device, non_blocking=pinnable)

        super().__init__(pack, unpack)


def offloaded_checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
    """transformers' offloading checkpoint function (module docstring) with memfit's host accounting."""
    with _HostSaveOnCpu():
        return checkpoint(function, *args, **kwargs)


def apply_offload(model: torch.nn.Module, checkpoint_kwargs: dict[str, Any]) -> int:
    """Swap the checkpoint function of every checkpointed layer for :func:`offloaded_checkpoint`; returns how many.

    Called after transformers enabled checkpointing (``every_n_layers`` decides which layers have it)."""
    func = functools.partial(offloaded_checkpoint, **checkpoint_kwargs)
    n = 0
    for module in model.modules():
        if hasattr(module, "gradient_checkpointing"):  # where _set_gradient_checkpointing put transformers' one
            module._gradient_checkpointing_func = func
            n += bool(module.gradient_checkpointing)
    return n
