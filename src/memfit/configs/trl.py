"""TRL's ``SFTConfig`` YAML/JSON (TRL 1.16.0, as ``TrlParser`` reads it for ``trl sft --config``: the fields of
``SFTConfig``, ``ModelConfig``, ``ScriptArguments`` and ``DatasetMixtureConfig`` in one mapping, plus ``env``),
and a plain Trainer's ``TrainingArguments`` (transformers 5.24.0, ``HfArgumentParser``).

TRL's own defaults, read in its source (the issue's claims checked):

- ``gradient_checkpointing`` defaults to **True** (``trl/trainer/base_config.py:62``, overriding the
  Trainer's None) -- confirmed.
- ``bf16`` defaults to ``not fp16`` (``base_config.py:68`` and ``__post_init__``) -- confirmed; but it is
  *mixed* precision: the model is loaded in ``ModelConfig.dtype``, which defaults to **float32**
  (``trl/trainer/model_config.py:89``; ``SFTTrainer`` loads a model named by a string in float32 unless
  ``model_init_kwargs`` says otherwise, ``trl/trainer/utils.py:1332``). So TRL's default is memfit's
  ``mixed-bf16`` (fp32 weights under bf16 autocast), not ``bf16``.
- ``max_length`` 1024, ``packing`` False, ``use_peft`` False (a full fine-tune unless ``use_peft: true``),
  ``lora_r`` 16, ``lora_alpha`` 32, ``lora_dropout`` 0.05, ``use_bnb_nested_quant`` False (memfit's
  ``--double-quant`` default is True: TRL's is not).

A plain ``TrainingArguments`` file keeps transformers' defaults: checkpointing off, no autocast, and the
model in the dtype ``from_pretrained`` picks (transformers 5: the checkpoint's own, ``dtype="auto"``).
"""

from __future__ import annotations

from typing import Any

import memfit.configs.trainer as trainer
from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader, dora, names
from memfit.configs.schema import load_schema

TRL_VERSION = "trl 1.16.0"

ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash", "flash_attention_3": "flash",
             "kernels-community/flash-attn2": "flash", "kernels-community/flash-attn3": "flash",
             "kernels-community/vllm-flash-attn3": "flash"}


def attention_setting(r: Reader, field: str, value: Any, default_note: str = "") -> None:
    """``attn_implementation`` -> memfit's attention kernel (None: transformers' default, sdpa)."""
    if value is None:
        r.set("attention", "sdpa", field, note=default_note or "None: transformers picks sdpa")
        return
    kernel = ATTENTION.get(str(value))
    if kernel is None:
        r.not_modelled(field, f"attention {value!r}: memfit models eager, sdpa and flash", active=lambda v: True)
        return
    r.set("attention", kernel, field)


def read_trl(doc: Document, *, kind: str = "trl", live: bool = False) -> FileReading:
    """TRL SFT YAML/JSON (``kind="trl"``) or a plain TrainingArguments file (``kind="hf-trainer"``); ``live``:
    the attributes of a live object (no ModelConfig fields; the model config says the dtype)."""
    if kind == "trl":
        data = {k: v for k, v in doc.data.items() if k != "env"}
        r = Reader(doc, kind, load_schema("trl"), data=data, label="TRL")
        if "env" in doc.data:
            r.row("env", "ignored", note="environment variables TrlParser sets", value=doc.data["env"])
    else:
        r = Reader(doc, kind, load_schema("transformers"), label="TrainingArguments")
    trainer.trainer_common(r)
    trainer.optimizer_setting(r, "optim")
    trainer.checkpointing_settings(r)
    trainer.autocast_setting(r, bf16_default=None if kind == "trl" else False)
    if kind == "trl":
        if not live:
            _model_fields(r)
        _sft_fields(r)
    elif not live:
        r.assume("weights_dtype", "auto", "(model dtype)",
                 "TrainingArguments does not load the model: from_pretrained's transformers-5 default, the "
                 "checkpoint's dtype; pass --precision if your script loads it otherwise")
    return r.finish()


def _model_fields(r: Reader) -> None:
    """ModelConfig (``trl/trainer/model_config.py``) and ``model_init_kwargs``."""
    r.model("model_name_or_path")
    init = r.get("model_init_kwargs") if isinstance(r.get("model_init_kwargs"), dict) else {}
    dtype = init.get("dtype", init.get("torch_dtype")) if init else None
    if dtype is not None:
        r.set("weights_dtype", str(dtype), "model_init_kwargs", note="model_init_kwargs.dtype wins over dtype")
        r.claim("dtype")
        r.ignore("dtype", "model_init_kwargs.dtype wins")
    else:
        r.set("weights_dtype", r.get("dtype") or "float32", "dtype")
        if r.has("model_init_kwargs"):
            r.ignore("model_init_kwargs", "no dtype, attention or quantization in it")
    attn = init.get("attn_implementation") if init and "attn_implementation" in init else r.get("attn_implementation")
    attention_setting(r, "attn_implementation", attn)
    use_peft = bool(r.get("use_peft"))
    r.set("adapter", "lora" if use_peft else "none", "use_peft",
          note="" if use_peft else "use_peft false: the whole model is trained")
    if use_peft:
        r.set("rank", r.get("lora_r"), "lora_r")
        r.set("alpha", r.get("lora_alpha"), "lora_alpha")
        r.set("lora_dropout", float(r.get("lora_dropout")), "lora_dropout")
        targets = r.get("lora_target_modules")
        if targets:
            t = names(targets if isinstance(targets, list) else [targets])
            r.set("targets", ("all-linear",) if t == ("all-linear",) else t, "lora_target_modules")
        else:
            r.set("targets", (), "lora_target_modules", memfit_value="PEFT's default for the architecture")
        if r.get("lora_modules_to_save"):
            r.set("modules_to_save", names(r.get("lora_modules_to_save")), "lora_modules_to_save")
        dora(r, "use_dora")
        r.not_modelled("lora_target_parameters", "LoRA on parameters (MoE expert weights)")
        r.ignore("use_rslora", "scaling only")
    else:
        for f in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save", "use_dora",
                  "use_rslora", "lora_target_parameters", "lora_task_type"):
            r.ignore(f, "use_peft is false")
    quant = init.get("quantization_config") if init else None
    if r.get("load_in_4bit") or isinstance(quant, dict) and quant.get("load_in_4bit"):
        r.set("quantization", "nf4", "load_in_4bit",
              note="" if r.get("bnb_4bit_quant_type") in (None, "nf4") else "fp4: the same bytes as NF4")
        r.set("double_quant", bool(r.get("use_bnb_nested_quant")), "use_bnb_nested_quant")
        r.ignore("bnb_4bit_quant_type", "NF4 and FP4 store the same bytes")
        r.ignore("bnb_4bit_quant_storage", "the packing dtype: the same bytes")
    elif r.get("load_in_8bit"):
        r.set("quantization", "int8", "load_in_8bit")
    elif r.has("load_in_4bit") or r.has("load_in_8bit"):
        r.set("quantization", "none", "load_in_4bit", "load_in_8bit")


def _sft_fields(r: Reader) -> None:
    """SFTConfig (``trl/trainer/sft_config.py``)."""
    max_length = r.get("max_length")
    if max_length is None and r.has("max_length"):
        r.not_modelled("max_length", "null: no truncation, the longest example sets the peak; pass --seq "
                                     "(its tokens)", active=lambda v: True)
        r.also("seq_unbounded", True)
    else:
        r.set("seq", max_length, "max_length")
    if r.get("packing"):
        r.set("packing", True, "packing", note=f"rows of max_length tokens ({r.get('packing_strategy') or 'bfd'})")
    elif r.has("packing"):
        r.set("packing", False, "packing")
    if r.get("padding_free"):
        r.ignore("padding_free", "one row of the batch's examples: at most batch x max_length tokens, the "
                                 "same worst case memfit takes")
    if r.get("activation_offloading"):
        r.set("offload_activations", True, "activation_offloading",
              note="TRL's OffloadActivations: every saved tensor of >= 1024 B but lm_head's to the CPU")
    else:
        r.ignore("activation_offloading", "off")
