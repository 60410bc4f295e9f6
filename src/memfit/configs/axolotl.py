"""axolotl's YAML (axolotl 0.21.0: ``AxolotlInputConfig`` in ``axolotl/utils/schemas/config.py`` and its
mixins, plus the fields of the integration plugins listed under ``plugins:``).

Its defaults and rules, read in its source (the issue's claims checked):

- ``sample_packing``: the multipack sampler fills bins of ``micro_batch_size x sequence_len`` tokens
  (``core/trainers/base.py:380-385``): with an attention that takes packed rows (flash, flex, xformers,
  sage: ``attn_supports_packing``) one row of ``micro_batch_size x sequence_len`` tokens, otherwise
  (``multipack_real_batches``, sdpa/eager) ``micro_batch_size`` rows of ``sequence_len``. Either way a step
  carries ``micro_batch_size x sequence_len`` real tokens -- confirmed; memfit estimates
  ``micro_batch_size`` rows of ``sequence_len`` (the same tokens; for flash/sdpa attention the same bytes).
- ``micro_batch_size`` 1, ``gradient_accumulation_steps`` 1, ``sequence_len`` 512, ``optimizer``
  ``adamw_torch_fused``, ``gradient_checkpointing`` False, ``lora_dropout`` 0.0; no ``adapter`` = a full
  fine-tune.
- ``bf16: auto`` (the default) is bf16 on a GPU that has it (memfit assumes one), and the model is then
  *loaded* in bf16 (``utils/config/__init__.py:194``): memfit's ``bf16``. ``fp16`` / ``load_in_8bit``
  load fp16; otherwise fp32.
- ``adapter: qlora`` with ``load_in_4bit``: NF4 with double quantisation (``loaders/model.py:1066``).
- ``lora_target_linear: true``: every linear layer but the output head (``find_all_linear_names``,
  ``loaders/adapter.py:60``) -- PEFT's ``all-linear``.
"""

from __future__ import annotations

import memfit.configs.trainer as trainer
from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader, dora, names
from memfit.configs.schema import load_schema
from memfit.configs.trl import attention_setting
from memfit.estimate.spec import parse_layers, parse_token_indices

# enums.py LEGACY_ATTN_FLAG_TO_IMPL, in its priority order
LEGACY_ATTENTION = {"xformers_attention": "xformers", "sage_attention": "sage", "flex_attention": "flex_attention",
                    "flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "eager_attention": "eager"}
LIGER = "axolotl.integrations.liger.LigerPlugin"
CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"

NOT_MODELLED = {
    "lora_target_parameters": "LoRA on parameters (MoE expert weights)",
    "lora_rank_pattern": "per-module ranks",
    "lora_alpha_pattern": "per-module alphas (no memory effect) with rank patterns",
    "chunked_cross_entropy": "axolotl's chunked loss keeps the bf16 logits and upcasts one chunk at a time; "
                             "memfit models the standard loss or a fused linear cross-entropy",
    "torch_compile": "torch.compile changes which activations are saved; memfit models eager",
    "fp8": "fp8 training",
    "tiled_mlp": "tiled MLP (ALST): the MLP in sequence chunks",
    "context_parallel_size": "context parallelism",
    "sequence_parallel_degree": "sequence parallelism",
    "tensor_parallel_size": "tensor parallelism",
    "dp_shard_size": "a data-parallel shard group size",
    "relora": "ReLoRA",
    "lisa_n_layers": "LISA layer sampling",
    "unfrozen_parameters": "training a subset of the weights",
    "lora_mlp_kernel": "axolotl's fused LoRA MLP kernel",
    "lora_qkv_kernel": "axolotl's fused LoRA QKV kernel",
    "lora_o_kernel": "axolotl's fused LoRA output kernel",
    "layer_offloading": "layer offloading",
    "selective_checkpointing": "saving some ops inside checkpointed blocks",
    "rl": "RL / preference training: a reference model and paired batches",
    "reward_model": "a reward model head",
    "process_reward_model": "a process reward model head",
    "qat": "quantisation-aware training",
    "use_kernels": "hub kernels",
    "model_quantization_config": "MXFP4 / fp8 checkpoints",
    "gptq": "a GPTQ base",
    "auto_find_batch_size": "the Trainer halves the batch after an out-of-memory error",
    "liger_rms_norm": "Liger's RMSNorm kernel",
    "liger_glu_activation": "Liger's SwiGLU kernel",
    "liger_swiglu": "Liger's SwiGLU kernel",
    "liger_layer_norm": "Liger's LayerNorm kernel",
    "liger_rope": "Liger's RoPE kernel",
    "tiled_mlp_num_shards": "tiled MLP",
    "fp32_norms": "norm weights kept in fp32",
    "neftune_noise_alpha": "",
}


def read_axolotl(doc: Document) -> FileReading:
    r = Reader(doc, "axolotl", load_schema("axolotl"), label="axolotl", nested_keys={"fsdp_config": _fsdp_key})
    r.model("base_model_config") if r.has("base_model_config") else r.model("base_model")
    if r.has("base_model_config"):
        r.ignore("base_model", "base_model_config names the architecture")
    _adapter(r)
    r.set("batch", r.get("micro_batch_size"), "micro_batch_size")
    r.set("grad_accum", r.get("gradient_accumulation_steps"), "gradient_accumulation_steps")
    r.ignore("batch_size", "the global batch: no effect on one GPU's peak")
    if r.has("eval_batch_size"):
        if (r.get("val_set_size") or r.get("test_datasets")) and str(r.get("eval_strategy") or "") != "no":
            r.set("eval_batch", r.get("eval_batch_size"), "eval_batch_size",
                  note="evaluated on val_set_size / test_datasets between training steps")
        else:
            r.ignore("eval_batch_size", "no evaluation: val_set_size 0 and no test_datasets (or eval_strategy no)")
    if r.has("eval_accumulation_steps") and r.get("eval_accumulation_steps"):
        r.set("eval_accumulation_steps", r.get("eval_accumulation_steps"), "eval_accumulation_steps")
    r.set("seq", r.get("sequence_len"), "sequence_len")
    if r.get("sample_packing"):
        r.set("packing", True, "sample_packing",
              note="micro_batch_size x sequence_len real tokens per step (core/trainers/base.py:380)")
    elif r.has("sample_packing"):
        r.set("packing", False, "sample_packing")
    trainer.optimizer_setting(r, "optimizer")
    _precision(r)
    _checkpointing(r)
    _attention(r)
    _loss(r)
    _sharding(r)
    r.reference("deepspeed", "deepspeed")
    r.ignore("neftune_noise_alpha", "noise on the embeddings: one embedding-sized temporary")
    for name, why in NOT_MODELLED.items():
        if why:
            r.not_modelled(name, why)
    return r.finish()


def _adapter(r: Reader) -> None:
    adapter = r.get("adapter")
    if adapter in (None, ""):
        r.set("adapter", "none", "adapter", note="no adapter: the whole model is trained")
    elif adapter in ("lora", "qlora"):
        r.set("adapter", "lora", "adapter")
        rank = r.get("lora_r")
        if rank is not None:
            r.set("rank", rank, "lora_r")
        if r.get("lora_alpha") is not None:
            r.set("alpha", r.get("lora_alpha"), "lora_alpha")
        r.set("lora_dropout", float(r.get("lora_dropout") or 0.0), "lora_dropout")
        dora(r, "peft_use_dora")
        if r.get("lora_target_linear"):
            r.set("targets", ("all-linear",), "lora_target_linear",
                  *(["lora_target_modules"] if r.get("lora_target_modules") else []),
                  note="every linear layer but the output head (find_all_linear_names)")
        elif r.get("lora_target_modules"):
            value = r.get("lora_target_modules")
            t = names(value if isinstance(value, list) else [value])
            r.set("targets", ("all-linear",) if t == ("all-linear",) else t, "lora_target_modules")
        if r.get("lora_modules_to_save"):
            r.set("modules_to_save", names(r.get("lora_modules_to_save")), "lora_modules_to_save")
        if r.get("peft_layers_to_transform"):  # passed to LoraConfig as is (schemas/peft.py:97, :103)
            r.set("layers_to_transform", parse_layers(r.get("peft_layers_to_transform")), "peft_layers_to_transform")
            if r.get("peft_layers_pattern"):
                pattern = r.get("peft_layers_pattern")
                r.set("layers_pattern", names(pattern if isinstance(pattern, list) else [pattern]),
                      "peft_layers_pattern")
        tokens = r.get("peft_trainable_token_indices")
        if isinstance(tokens, list) and tokens:  # passed to LoraConfig as is (schemas/peft.py)
            r.set("trainable_token_indices", parse_token_indices(tokens), "peft_trainable_token_indices")
        elif tokens:
            r.not_modelled("peft_trainable_token_indices", "rows of a named module: pass --trainable-tokens with the "
                                                           "input embedding's ids", active=lambda v: True)
        r.ignore("peft_use_rslora", "scaling only")
    else:
        r.not_modelled("adapter", f"adapter {adapter!r}: memfit models LoRA and QLoRA", active=lambda v: True)
    if r.get("load_in_4bit") or adapter == "qlora":
        field = "load_in_4bit" if r.get("load_in_4bit") else "adapter"
        r.set("quantization", "nf4", field, note="bitsandbytes NF4, double quantisation on (loaders/model.py:1066)")
        r.also("double_quant", True)
    elif r.get("load_in_8bit"):
        r.set("quantization", "int8", "load_in_8bit")
    elif r.has("load_in_4bit") or r.has("load_in_8bit"):
        r.set("quantization", "none", "load_in_4bit", "load_in_8bit")


def _precision(r: Reader) -> None:
    """normalize_config (utils/config/__init__.py:165-199): bf16 'auto' -> True on a bf16 GPU."""
    bf16 = r.get("bf16")
    fp16 = bool(r.get("fp16"))
    if bf16 == "auto":
        bf16 = not fp16
    if bf16:
        r.set("autocast", "bf16", "bf16", note="auto: bf16 on a GPU that has it" if r.get("bf16") == "auto" else "")
    elif fp16:
        r.set("autocast", "fp16", "fp16")
    else:
        r.set("autocast", "none", "bf16", "fp16")
    if bf16 or r.get("bfloat16"):
        dtype, field = "bfloat16", ("bf16" if bf16 else "bfloat16")
    elif r.get("load_in_8bit") or fp16 or r.get("float16"):
        dtype, field = "float16", ("fp16" if fp16 else "float16" if r.get("float16") else "load_in_8bit")
    else:
        dtype, field = "float32", "float32"
    r.claim("bfloat16", "float16", "float32", "fp16", "bf16")
    r.assume("weights_dtype", dtype, "(model dtype)", f"cfg.torch_dtype from {field} (utils/config/__init__.py:194)")


def _checkpointing(r: Reader) -> None:
    gc = r.get("gradient_checkpointing")
    if gc == "offload_disk":
        r.not_modelled("gradient_checkpointing", "checkpoints offloaded to disk", active=lambda v: True)
        r.also("checkpointing", "full")
    elif gc:
        r.set("checkpointing", "full", "gradient_checkpointing")
        if gc == "offload":
            r.also("offload", True)
    else:
        r.set("checkpointing", "none", "gradient_checkpointing")
    r.ignore("gradient_checkpointing_kwargs", "use_reentrant and the like: the same saved tensors")
    ao = r.get("activation_offloading")
    if ao == "disk":
        r.not_modelled("activation_offloading", "activations offloaded to disk", active=lambda v: True)
    elif ao:
        r.set("offload", True, "activation_offloading", note="saved activations on the CPU (memfit: the checkpoints)")
    else:
        r.ignore("activation_offloading", "off")



def _attention(r: Reader) -> None:
    impl = r.get("attn_implementation")
    if impl:
        attention_setting(r, "attn_implementation", impl)
        return
    for flag, canonical in LEGACY_ATTENTION.items():
        if r.get(flag):
            attention_setting(r, flag, canonical)
            r.claim(*LEGACY_ATTENTION)
            return
    attention_setting(r, "attn_implementation", None)


def _plugins(r: Reader) -> list[str]:
    value = r.get("plugins") or []
    return [str(p) for p in value] if isinstance(value, list) else [str(value)]


def _loss(r: Reader) -> None:
    plugins = _plugins(r)
    if LIGER in plugins and r.get("liger_fused_linear_cross_entropy"):
        r.set("loss", "chunked", "liger_fused_linear_cross_entropy", note="Liger's fused linear cross-entropy")
    elif CCE in plugins and r.get("cut_cross_entropy") is not False:
        r.set("loss", "chunked", "cut_cross_entropy", note="Cut Cross-Entropy (on by default with its plugin): "
                                                           "no logits in memory; memfit models Liger's chunks")
    for name in ("liger_fused_linear_cross_entropy", "cut_cross_entropy", "liger_cross_entropy"):
        if r.has(name) and name not in r.claimed:
            r.ignore(name, "its plugin is not listed under plugins:")
    for f, spec in r.schema.fields.items():
        if spec.plugin and r.has(f) and spec.plugin not in plugins and f not in r.claimed:
            r.ignore(f, f"{spec.plugin} is not listed under plugins: axolotl ignores this field")


def _fsdp_key(key: str) -> str:
    """validation.py:1461: the ``fsdp_`` prefix of fsdp_config keys is stripped; ``version`` is an alias."""
    if key == "version":
        return "fsdp_version"
    return key[5:] if key.startswith("fsdp_") and key != "fsdp_version" else key


def _sharding(r: Reader) -> None:
    """FSDP2 only in axolotl 0.21.0 (validation.py:1442); reshard_after_forward None -> accelerate's True."""
    cfg = r.get("fsdp_config")
    if not isinstance(cfg, dict) or not cfg:
        r.ignore("fsdp_version", "no fsdp_config")
        return
    raf = cfg.get("reshard_after_forward")
    stage = trainer.fsdp_stage(True if raf is None else raf)
    r.set("sharding", stage, "fsdp_config", note=f"FSDP2, reshard_after_forward={raf!r}")
    r.claim("fsdp_version")
    if cfg.get("offload_params"):
        r.also("offload_params", True)
    if cfg.get("activation_checkpointing"):
        r.also("checkpointing", "full")
