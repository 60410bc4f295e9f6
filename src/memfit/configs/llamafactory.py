"""LLaMA-Factory's training YAML (``llamafactory-cli train run.yaml``; LLaMA-Factory 0.9.5,
``llamafactory/hparams/*_args.py``, parsed by ``HfArgumentParser.parse_dict`` over ModelArguments,
DataArguments, TrainingArguments (transformers' ``Seq2SeqTrainingArguments``), FinetuningArguments and
GeneratingArguments; memfit takes transformers 5.24.0's TrainingArguments fields, LLaMA-Factory 0.9.5 pins
transformers <= 5.6.0).

Its defaults, read in its source (the issue's claims checked):

- checkpointing is **on**: ``disable_gradient_checkpointing`` defaults to False (model_args.py:145) and
  ``model_utils/checkpointing.py:164`` enables it unless disabled -- confirmed.
- ``lora_alpha`` None becomes ``lora_rank * 2`` (finetuning_args.py:568) -- confirmed; ``lora_rank`` 8.
- ``lora_target: all`` (the default) means every linear layer but the output head:
  ``find_all_linear_modules`` drops ``lm_head`` (model_utils/misc.py:28-52) -- PEFT's ``all-linear``; confirmed.
- ``finetuning_type`` lora, ``cutoff_len`` 2048, ``packing`` None = on only for ``stage: pt``
  (parser.py:520), ``quantization_bit`` 4 with ``double_quantization`` True and ``quantization_type`` nf4.
- Precision: the model is loaded in the compute dtype -- bf16 with ``bf16: true`` or ``pure_bf16``, fp16
  with ``fp16: true``, else what the GPU supports best (bf16 on a bf16 GPU: memfit assumes one;
  parser.py:512, patcher.py:321). Trainable weights are upcast to fp32 unless ``pure_bf16``
  (adapter.py:313-325): a full fine-tune in bf16 is memfit's ``mixed-bf16``, a LoRA one its ``bf16``.
"""

from __future__ import annotations

import memfit.configs.trainer as trainer
from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader, dora, names
from memfit.configs.schema import load_schema
from memfit.configs.trl import attention_setting

FLASH_ATTN = {"auto": None, "disabled": "eager", "sdpa": "sdpa", "fa2": "flash_attention_2", "fa3": "flash_attention_3"}

NOT_MODELLED = {
    "use_galore": "GaLore projections of the optimizer states",
    "use_apollo": "APOLLO optimizer states",
    "use_badam": "BAdam trains one block at a time",
    "use_adam_mini": "Adam-mini's shared second moments",
    "use_muon": "the Muon optimizer",
    "use_llama_pro": "LLaMA Pro's expanded blocks",
    "shift_attn": "S^2-Attn (shifted short attention)",
    "mixture_of_depths": "mixture-of-depths",
    "use_unsloth": "Unsloth's patched kernels",
    "upcast_layernorm": "norm weights upcast to fp32",
    "upcast_lmhead_output": "lm_head output upcast to fp32",
    "fp8": "fp8 training",
    "use_kt": "KTransformers' CPU/GPU expert offload",
    "use_mca": "Megatron-core training",
    "use_hyper_parallel": "HyperParallel",
}


def read_llamafactory(doc: Document) -> FileReading:
    r = Reader(doc, "llamafactory", load_schema("llamafactory"), label="LLaMA-Factory")
    trainer.trainer_common(r)
    trainer.optimizer_setting(r, "optim")
    r.model("model_name_or_path")
    stage = r.get("stage")
    if stage not in ("sft", "pt"):
        r.not_modelled("stage", f"stage {stage}: a reference or reward model and paired batches", active=lambda v: True)
    else:
        r.ignore("stage", "sft / pt: one model, one batch")
    _method(r)
    _precision(r)
    r.set("seq", r.get("cutoff_len"), "cutoff_len")
    packing = r.get("packing")
    if packing is None:
        packing = stage == "pt"
    if r.get("neat_packing"):
        r.set("packing", True, "neat_packing", note="packing without cross-attention (block-diagonal mask)")
    else:
        r.set("packing", bool(packing), "packing", note="" if r.has("packing") else "None: on for stage pt only")
    off = bool(r.get("disable_gradient_checkpointing"))
    r.set("checkpointing", "none" if off else "full", "disable_gradient_checkpointing")
    if not off and r.get("use_unsloth_gc"):
        r.set("offload", True, "use_unsloth_gc", note="Unsloth's checkpointing keeps the block inputs on the CPU")
    r.ignore("use_reentrant_gc", "reentrant or not: the same saved tensors")
    kernel = FLASH_ATTN.get(str(r.get("flash_attn")))
    attention_setting(r, "flash_attn", kernel, default_note="auto: transformers picks sdpa")
    if r.get("enable_liger_kernel"):
        if stage in ("sft", "pt"):
            r.set("loss", "chunked", "enable_liger_kernel",
                  note="Liger's fused linear cross-entropy (liger_kernel.py:94); its RMSNorm / SwiGLU / RoPE "
                       "kernels are NOT MODELLED")
        else:
            r.not_modelled("enable_liger_kernel", "Liger's kernels without the fused loss (this stage needs logits)")
    else:
        r.ignore("enable_liger_kernel", "off")
    for name, why in NOT_MODELLED.items():
        r.not_modelled(name, why)
    return r.finish()


def _method(r: Reader) -> None:
    ft = r.get("finetuning_type")
    if ft == "lora":
        r.set("adapter", "lora", "finetuning_type")
        rank = r.get("lora_rank")
        r.set("rank", rank, "lora_rank")
        alpha = r.get("lora_alpha")
        r.set("alpha", alpha or 2 * rank, "lora_alpha", note="" if alpha else "None: 2 x lora_rank")
        r.set("lora_dropout", float(r.get("lora_dropout")), "lora_dropout")
        target = names([r.get("lora_target")])
        r.set("targets", ("all-linear",) if target == ("all",) else target, "lora_target",
              note="all: every linear layer but lm_head (find_all_linear_modules)" if target == ("all",) else "")
        if r.get("additional_target"):
            r.set("modules_to_save", names([r.get("additional_target")]), "additional_target")
        r.ignore("use_rslora", "scaling only")
        r.ignore("pissa_init", "initialisation only")
        dora(r, "use_dora")
    elif ft == "full":
        r.set("adapter", "none", "finetuning_type")
    else:
        r.not_modelled("finetuning_type", f"{ft}: memfit models full and LoRA fine-tuning", active=lambda v: True)
    bits = r.get("quantization_bit")
    method = r.get("quantization_method")
    if bits is None:
        if r.has("quantization_bit"):
            r.set("quantization", "none", "quantization_bit")
        return
    if str(method) not in ("bnb", "bitsandbytes", "QuantizationMethod.BNB", "None"):
        r.not_modelled("quantization_method", f"{method}: memfit models bitsandbytes NF4 / LLM.int8",
                       active=lambda v: True)
        return
    if bits == 4:
        r.set("quantization", "nf4", "quantization_bit")
        r.set("double_quant", bool(r.get("double_quantization")), "double_quantization")
    elif bits == 8:
        r.set("quantization", "int8", "quantization_bit")
    else:
        r.not_modelled("quantization_bit", f"{bits}-bit: memfit models 4-bit NF4", active=lambda v: True)


def _precision(r: Reader) -> None:
    pure = bool(r.get("pure_bf16"))
    if r.get("bf16") or pure:
        dtype = "bfloat16"
        r.set("autocast", "bf16" if r.get("bf16") else "none", "bf16", "pure_bf16")
    elif r.get("fp16"):
        dtype = "float16"
        r.set("autocast", "fp16", "fp16")
    else:
        dtype = "bfloat16"
        r.set("autocast", "none", "bf16", "fp16",
              note="no mixed precision: the model is loaded in the GPU's best dtype (bf16 assumed)")
    r.claim("fp16", "bf16")
    infer = r.get("infer_dtype")
    r.assume("weights_dtype", dtype, "(model dtype)",
             "LLaMA-Factory loads the model in its compute dtype (parser.py:512)")
    if infer not in (None, "auto") and r.has("infer_dtype"):
        r.ignore("infer_dtype", "inference only")
    upcast = not pure and not r.get("use_badam")
    r.set("trainable_fp32", upcast, "pure_bf16",
          note="trainable weights upcast to fp32 (adapter.py:313)" if upcast else "pure_bf16: kept in bf16")
