"""A bitsandbytes base as ``from_pretrained(..., quantization_config=BitsAndBytesConfig(...))`` makes it, from a
config with random weights (no checkpoint), then PEFT's ``prepare_model_for_kbit_training``.

transformers 5.24.0 quantises while it loads a checkpoint: ``Bnb4BitHfQuantizer._process_model_before_weight_loading``
replaces every ``nn.Linear`` / ``Conv1D`` but the output embedding, tied weights and the last module
(``get_modules_to_not_convert``) with ``bnb.nn.Linear4bit`` (``Linear8bitLt`` for ``load_in_8bit``) on the meta
device (``integrations.bitsandbytes.replace_with_bnb_linear``); each loaded weight then becomes
``bnb.nn.Params4bit(value, requires_grad=False, **old.__dict__).to(device)``, which quantises it
(``Bnb4bitQuantize.convert``; ``Int8Params`` likewise in ``Bnb8bitQuantize``), and ``postprocess_model`` sets
``config.quantization_config`` and ``is_loaded_in_4bit``. :func:`quantise_model` runs those same transformers
functions on a ``from_config`` model, the random weights standing in for the checkpoint's.

The spec maps to ``BitsAndBytesConfig`` as:

================  ===============================================================================================
``method``        ``qlora``: ``load_in_4bit=True, bnb_4bit_quant_type="nf4"``; ``int8-lora``: ``load_in_8bit=True``
                  (LLM.int8, ``llm_int8_threshold`` 6.0, transformers' default)
``double_quant``  ``bnb_4bit_use_double_quant``
``precision``     ``bnb_4bit_compute_dtype``: float32 for ``fp32``, bfloat16 for ``bf16``/``mixed-bf16``, float16 for
                  ``fp16``/``mixed-fp16``; the model is created in the precision's weight dtype, then PEFT upcasts
                  every non-quantised 16-bit parameter to fp32
================  ===============================================================================================

CPU and CUDA differ in bitsandbytes 0.50: a CPU training step dequantises the 4-bit weight to the compute dtype
(``dequantize_4bit``) and multiplies with torch (the CUDA ``gemm_4bit`` path does the same in training:
``MatMul4Bit`` dequantises in forward and backward); LLM.int8 on the CPU trains through ``MatMul8bitFp``
(dequantised weight, ``F.linear``), on CUDA through ``MatMul8bitLt`` (int8 matmul with fp16 outlier columns,
whose count depends on the values: not modelled).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec

COMPUTE_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "mixed-bf16": torch.bfloat16,
                 "mixed-fp16": torch.float16}


def bnb_config(spec: RunSpec) -> Any:
    """transformers' ``BitsAndBytesConfig`` for a quantised ``spec`` (module docstring)."""
    from transformers import BitsAndBytesConfig

    if spec.method == "int8-lora":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=spec.double_quant,
                              bnb_4bit_compute_dtype=COMPUTE_DTYPE[spec.precision])


def require_bitsandbytes(spec: RunSpec) -> None:
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise MemfitError(f"--method {spec.method} and --optimizer {spec.optimizer} need bitsandbytes to run: "
                          "pip install 'memfit[torch]' (bitsandbytes >= 0.50 runs on the CPU too)")


def quantise_model(model: torch.nn.Module, spec: RunSpec) -> torch.nn.Module:
    """Quantise ``model``'s linears in place as transformers' bnb quantizer does on load, then
    ``prepare_model_for_kbit_training`` (PEFT 0.21.2) without its checkpointing (the builder applies
    ``spec.checkpointing`` itself, the way the quantizer's caller would with ``use_reentrant=False``)."""
    require_bitsandbytes(spec)
    import bitsandbytes as bnb  # type: ignore[import-not-found]
    from peft import prepare_model_for_kbit_training
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers import AutoHfQuantizer

    quantizer = AutoHfQuantizer.from_config(bnb_config(spec), pre_quantized=False)
    skip = quantizer.get_modules_to_not_convert(model, quantizer.quantization_config.llm_int8_skip_modules,
                                                getattr(model, "_keep_in_fp32_modules", None))
    originals = {name: (m.weight.detach(), None if m.bias is None else m.bias.detach(), isinstance(m, Conv1D))
                 for name, m in model.named_modules() if isinstance(m, Conv1D) or type(m) is torch.nn.Linear}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        replace_with_bnb_linear(model, modules_to_not_convert=skip, quantization_config=quantizer.quantization_config)
    for name, module in model.named_modules():
        if not isinstance(module, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)) or name not in originals:
            continue
        weight, bias, conv1d = originals[name]
        value = weight.T.contiguous() if conv1d else weight
        device = value.device
        if isinstance(module, bnb.nn.Linear4bit):
            param = bnb.nn.Params4bit(value, requires_grad=False, **module.weight.__dict__)
        else:
            kwargs = dict(module.weight.__dict__)
            kwargs.pop("SCB", None)
            param = bnb.nn.Int8Params(value if device.type == "meta" else value.to("cpu"), requires_grad=False,
                                      **kwargs)
        # .to(device) quantises, except to the meta device (the trace's build), where bitsandbytes' quantisation
        # ops run their fake implementations: the same packed weight and quantisation state, shapes only
        if device.type == "meta":
            with torch.device("cpu"):  # bitsandbytes builds its code tables from Python values (.tolist())
                _cpu_dynamic_map()
                module.weight = param._quantize(device)
        else:
            module.weight = param.to(device)
        if bias is not None:
            module.bias = torch.nn.Parameter(bias, requires_grad=False)
    del originals
    quantizer.postprocess_model(model)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def _cpu_dynamic_map() -> None:
    """bitsandbytes caches the double-quantisation code table in ``functional.name2qmap`` on the device of the
    first call (``quantize_blockwise``): made on the meta device it would break every later real quantisation
    (``code.to(A.device)`` cannot copy out of meta). Keep the CPU table there; meta calls copy it to meta."""
    import bitsandbytes.functional as bnb_f  # type: ignore[import-not-found]

    cached = bnb_f.name2qmap.get("dynamic")
    if cached is None or cached.device.type == "meta":
        bnb_f.name2qmap["dynamic"] = bnb_f.create_dynamic_map()


def quant_state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The tensors bitsandbytes keeps beside each quantised weight, which are no parameters or buffers: a 4-bit
    weight's ``QuantState`` (absmax, code, and with double quantisation offset, state2.absmax, state2.code) and
    an 8-bit weight's row scales (``SCB``)."""
    out: list[torch.Tensor] = []
    for p in model.parameters():
        qs = getattr(p, "quant_state", None)
        if qs is not None:
            out += [t for t in (qs.absmax, qs.code, getattr(qs, "offset", None)) if isinstance(t, torch.Tensor)]
            if getattr(qs, "state2", None) is not None:
                out += [t for t in (qs.state2.absmax, qs.state2.code) if isinstance(t, torch.Tensor)]
        scb = getattr(p, "SCB", None)
        if isinstance(scb, torch.Tensor):
            out.append(scb)
    return out


def fake_quantised(p: torch.Tensor, fake_of: Any) -> torch.Tensor | None:
    """A bitsandbytes ``Params4bit`` / ``Int8Params`` as a fake parameter for the trace (:func:`memfit.runtime.build.
    to_fake`): the data and every quantisation-state tensor swapped by ``fake_of``, the attributes bitsandbytes'
    modules read (``quant_state``, ``blocksize``, ``CB``, ``SCB`` ...) kept. A FakeTensor cannot become a
    ``Params4bit`` (torch refuses to re-type it), so the fake parameter carries the attributes instead, which
    ``Linear4bit.forward`` (``fix_4bit_weight_quant_state_from_module`` returns early when ``weight.quant_state``
    is set) and ``Linear8bitLt.forward`` read the same way. None for any other tensor."""
    import copy

    kind = type(p).__name__
    if kind == "Params4bit" and getattr(p, "quant_state", None) is not None:
        qs = p.quant_state
        new_qs = copy.copy(qs)
        for key in ("absmax", "code", "offset"):
            if isinstance(getattr(qs, key, None), torch.Tensor):
                setattr(new_qs, key, fake_of(getattr(qs, key)))
        if getattr(qs, "state2", None) is not None:
            new_qs.state2 = copy.copy(qs.state2)
            new_qs.state2.absmax, new_qs.state2.code = fake_of(qs.state2.absmax), fake_of(qs.state2.code)
        out = torch.nn.Parameter(fake_of(p.data), requires_grad=False)
        for key in ("blocksize", "compress_statistics", "quant_type", "quant_storage", "bnb_quantized", "module"):
            setattr(out, key, getattr(p, key, None))
        out.quant_state = new_qs  # type: ignore[attr-defined]
        if getattr(p, "module", None) is not None:
            p.module.quant_state = new_qs
        return out
    if kind == "Int8Params" and isinstance(getattr(p, "SCB", None), torch.Tensor):
        data = torch.nn.Parameter(fake_of(p.data), requires_grad=False)
        data.CB, data.SCB, data.has_fp16_weights = data, fake_of(p.SCB), p.has_fp16_weights  # type: ignore[attr-defined]
        return data
    return None
