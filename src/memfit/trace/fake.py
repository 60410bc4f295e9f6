"""Build the real transformers (+ PEFT) model with no memory behind it: meta first, then fake tensors.

Why two steps. Constructing a model directly under ``FakeTensorMode`` runs every weight initialiser
(``kaiming_uniform_`` on each linear) as fake operators, slow for 70B, and a fake ``cuda`` factory call
fails on a CPU-only torch. Building under ``torch.device("meta")`` runs the same Python (transformers
``from_config``, PEFT ``get_peft_model`` with its adapter layers, ``gradient_checkpointing_enable``,
``enable_input_require_grads``) with no storage at all and initialisers that are no-ops. Then each
parameter and buffer is swapped for a ``FakeTensor`` of the same shape, dtype, stride and
``requires_grad`` (tied weights stay tied: one fake parameter per meta parameter).

Why not stay on meta. The meta device has no kernels of its own choosing: ``scaled_dot_product_attention``
on meta takes the math path and materialises the ``(b, a, s, s)`` scores, which a CPU or CUDA run does
not; and anything that reads a value (a mask's ``.all()``) raises. A fake CPU tensor dispatches exactly as
a real CPU tensor would (the CPU flash kernel, the same decompositions), and transformers'
``is_tracing`` recognises it, so mask utilities build the mask instead of reading it.

The same builder as ``memfit measure`` (:func:`memfit.runtime.build.build_model`) is used, so trace
and measure run the same model code for the same spec.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec
from memfit.runtime.build import build_model


def build_meta_model(config: dict[str, Any], spec: RunSpec) -> torch.nn.Module:
    """The training-ready model for ``spec`` on the meta device: no storage, no initialisation cost.

    The whole builder runs under ``torch.device("meta")`` so PEFT's adapter layers (created outside
    the builder's own device block) are meta too.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            try:
                return build_model(config, spec, device="meta")
            except (ValueError, ImportError) as exc:  # transformers refusing an attention implementation
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                about_attention = "attn" in str(exc).lower() or "attention" in str(exc).lower()
                if not about_attention:
                    raise MemfitError(f"transformers cannot build this {config.get('model_type')} model: "
                                      f"{first}") from exc
                hint = " (try --attention eager)" if spec.attention != "eager" else ""
                raise MemfitError(f"transformers cannot build this {config.get('model_type')} model with "
                                  f"--attention {spec.attention}: {first}{hint}") from exc


def to_fake(model: torch.nn.Module, mode: FakeTensorMode, device: str | torch.device = "cpu") -> int:
    """Swap every meta parameter, buffer and tensor attribute of ``model`` for a fake tensor on ``device``.

    Returns the number of tensors swapped. Shared tensors (tied embeddings) map to one fake tensor, so
    they stay shared and are counted once. ``requires_grad`` and the ``Parameter`` type are kept.
    """
    device = torch.device(device)
    converter = mode.fake_tensor_converter
    memo: dict[int, torch.Tensor] = {}

    def fake_of(t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        if key in memo:
            return memo[key]
        if isinstance(t, FakeTensor):
            out: torch.Tensor = t
        elif t.device.type == "meta":
            out = converter.from_meta_and_device(mode, t.detach(), device)
        else:  # a real tensor (a buffer a builder computed on CPU): fake it, keep no reference
            out = mode.from_tensor(t.detach())
        if isinstance(t, torch.nn.Parameter):
            out = torch.nn.Parameter(out, requires_grad=t.requires_grad)
        memo[key] = out
        return out

    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = fake_of(p)  # type: ignore[assignment]
        for name, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[name] = fake_of(b)
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and not name.startswith("_"):
                setattr(module, name, fake_of(value))
    return len(memo)


def fake_model(config: dict[str, Any], spec: RunSpec, mode: FakeTensorMode,
               device: str | torch.device = "cpu") -> torch.nn.Module:
    """:func:`build_meta_model` then :func:`to_fake`: the model for ``spec`` as fake tensors on ``device``."""
    model = build_meta_model(config, spec)
    to_fake(model, mode, device)
    return model
