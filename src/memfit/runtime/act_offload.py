"""TRL's activation offloading: every large saved tensor of the step in host memory, booked apart from the device.

What ``--offload-activations`` runs is TRL 1.16's ``SFTConfig(activation_offloading=True)``: ``SFTTrainer.__init__``
builds ``get_act_offloading_ctx_manager(model=self.model)`` (trl/models/activation_offloading.py, TRL's copy of
torchtune's ``OffloadActivations``, credited in its header) and ``SFTTrainer.training_step`` runs transformers'
whole ``training_step`` under it: the forward, the loss (transformers 5.24.0's ``ForCausalLMLoss`` runs inside the
model's forward, after lm_head) and the backward. ``OffloadActivations`` is a ``saved_tensors_hooks`` whose pack
(``pack_tensor``) keeps a saved tensor where it is when it is

- not on the accelerator, or smaller than ``min_offload_size`` (1024 B: ``element_size() * nelement()``),
- a ``Parameter`` (or buffer), or shares the storage of one of ``model.parameters()`` (``update_model_params``
  records their storages' ``data_ptr``; a frozen weight's ``t()`` view that ``addmm`` saves is caught here),
- saved inside the output head: a ``NoOpManager`` (identity hooks, innermost) is entered by forward hooks around
  ``lm_head`` (found after unwrapping ``.module`` and a PEFT model's ``base_model``: ``output``, else ``lm_head``,
  else ``decoder.output`` / ``decoder.lm_head``, else ``final_layer_norm`` / ``ln_f``, else ``head``),

and otherwise copies it to a new host tensor (``torch.empty_like(..., pin_memory=True, device="cpu")`` +
``copy_``; a view with a storage offset is cloned first, a non-contiguous one made contiguous; a broadcast one,
a stride 0, copies its whole storage instead). Nothing else keeps the device tensor alive, so it is freed. Unpack
(backward) is ``cpu.to(accelerator)`` re-strided: one device copy per saved tensor while its node runs.

With checkpointing, non-reentrant ``checkpoint``'s own hooks are innermost inside a checkpointed layer, so TRL's
pack sees only what checkpoint saves with the ambient hooks: the layer's positional input (hidden_states); the
layer's insides are recomputed as without offloading. Without checkpointing every block's saved tensors go.

:class:`ActivationOffload` is that pack rule with ``use_streams=False`` (single stream) and no pinning, so that it
runs on a CPU-only torch and on fake tensors (TRL's class needs an accelerator: ``torch.accelerator`` and
``data_ptr``, which fake tensors lack; parameters are recognised here by storage identity, the same test). On a
CPU run the "device" is the CPU: unpack ``.to("cpu")`` returns the host copy itself (no device copy); in a CUDA
trace unpack makes the device copy CUDA would. Not modelled: TRL's default ``use_streams=True`` on CUDA (a second
stream; up to ``max_fwd_stash_size`` = 5 offloaded tensors stay on the device until their copy is done, a tensor
saved again within that window is kept instead of copied twice, and backward frees a node's tensors one node
later), Liger modules (also excluded by TRL) and FP8 tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.autograd.graph import saved_tensors_hooks

from memfit.runtime.offload import active_host

__all__ = ["MIN_OFFLOAD_BYTES", "ActivationOffload", "offloading_activations", "output_head"]

MIN_OFFLOAD_BYTES = 1024  # get_act_offloading_ctx_manager(min_offload_size=1024), TRL 1.16's default


def output_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module TRL 1.16's ``get_act_offloading_ctx_manager`` keeps out of offloading (its search order)."""
    m: Any = model
    if hasattr(m, "module"):
        m = m.module
    if hasattr(m, "base_model") and hasattr(m, "peft_config"):
        m = m.base_model
    if hasattr(m, "output"):
        out = m.output
        if isinstance(out, torch.nn.Module):
            return out
        lin = getattr(out, "linear", None)
        return lin if isinstance(lin, torch.nn.Module) else None
    if hasattr(m, "lm_head"):
        return m.lm_head  # type: ignore[no-any-return]
    if hasattr(m, "decoder"):
        dec = m.decoder
        return getattr(dec, "output", None) or getattr(dec, "lm_head", None)
    if hasattr(m, "final_layer_norm") or hasattr(m, "ln_f"):
        return getattr(m, "final_layer_norm", None) or m.ln_f  # type: ignore[no-any-return]
    head = getattr(m, "head", None)
    return head if isinstance(head, torch.nn.Module) else None


class ActivationOffload(saved_tensors_hooks):
    """TRL 1.16 ``OffloadActivations``' pack rule, single stream, unpinned (module docstring), with the host copies
    booked in the active :class:`~memfit.runtime.offload.HostCopies`; ``paused`` is the NoOpManager's region."""

    def __init__(self, model: torch.nn.Module, *, device_type: str, min_bytes: int = MIN_OFFLOAD_BYTES) -> None:
        self.paused = 0
        params = [p.untyped_storage() for p in model.parameters()]
        param_ids = {id(s) for s in params}
        self._params = params  # keeps the ids valid

        def pack(t: torch.Tensor) -> tuple[Any, ...]:
            if (self.paused or t.device.type != device_type or t.element_size() * t.nelement() < min_bytes
                    or isinstance(t, torch.nn.Parameter) or id(t.untyped_storage()) in param_ids):
                return (t,)
            broadcast = 0 in t.stride()
            if not broadcast and (not t.is_contiguous() or t.storage_offset() != 0):
                t = t.clone(memory_format=torch.contiguous_format) if t.storage_offset() else t.contiguous()
            stride, offset, shape = t.stride(), t.storage_offset(), t.size()
            host = active_host()
            with host.packing() if host is not None else contextlib.nullcontext():
                if broadcast:
                    n = t.untyped_storage().nbytes() // t.element_size()
                    cpu = torch.empty(n, dtype=t.dtype, device="cpu")
                    cpu.copy_(torch.as_strided(t, size=(n,), stride=(1,), storage_offset=0))
                else:
                    cpu = torch.empty_like(t, device="cpu")
                    cpu.copy_(t)
                if host is not None:
                    host.claims(cpu.untyped_storage())
            return (cpu, t.device, stride, offset, shape)

        def unpack(packed: tuple[Any, ...]) -> torch.Tensor:
            if len(packed) == 1:
                return packed[0]  # type: ignore[no-any-return]
            cpu, device, stride, offset, shape = packed
            host = active_host()
            back = cpu.clone() if host is not None and host.device_copy_on_unpack else cpu.to(device)
            return torch.as_strided(back, size=shape, stride=stride, storage_offset=offset)

        super().__init__(pack, unpack)


@contextlib.contextmanager
def offloading_activations(model: torch.nn.Module, *, device_type: str) -> Iterator[ActivationOffload]:
    """The step (forward, loss and backward, as ``SFTTrainer.training_step``) under TRL's offloading of ``model``."""
    ctx = ActivationOffload(model, device_type=device_type)
    head = output_head(model)
    handles = []
    if head is not None:
        def enter(*_: Any) -> None:
            ctx.paused += 1

        def leave(*_: Any) -> None:
            ctx.paused -= 1

        handles = [head.register_forward_pre_hook(enter), head.register_forward_hook(leave, always_call=True)]
    try:
        with ctx:
            yield ctx
    finally:
        for h in handles:
            h.remove()
