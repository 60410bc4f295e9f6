"""The Hugging Face Trainer's ``TrainingArguments`` (transformers 5.24.0, ``transformers/training_args.py``):
the fields TRL's ``SFTConfig``, LLaMA-Factory and a plain Trainer script all share.

=================================================  ============================================================
field (default)                                    memfit setting
=================================================  ============================================================
``per_device_train_batch_size`` (8)                ``batch``
``gradient_accumulation_steps`` (1)                ``grad_accum``
``per_device_eval_batch_size`` (8)                 ``eval_batch`` (when ``eval_strategy`` is not "no")
``optim`` (``adamw_torch_fused`` on torch >= 2.8)  ``optimizer`` (adamw, adamw-8bit, sgd, adafactor) and
                                                   ``optimizer_impl`` (the name itself)
``bf16`` / ``fp16`` (False)                        ``autocast`` (mixed precision over the loaded weights)
``activation_checkpointing`` (None = False; the    ``checkpointing`` full; ``activation_checkpointing_kwargs``
deprecated alias ``gradient_checkpointing`` is     ``every_n_layers: k`` -> every-k (one block in k, as
used when it is unset)                             ``_set_gradient_checkpointing`` does), ``offload: true`` ->
                                                   ``offload`` (``save_on_cpu`` around each checkpoint)
``use_liger_kernel`` (False)                       ``loss`` chunked (Liger's fused linear cross-entropy, unless
                                                   ``liger_kernel_config`` turns it off)
``use_cpu`` (False)                                ``device`` cpu
``fsdp`` + ``fsdp_config``                         ``sharding`` (FSDP2 ``reshard_after_forward`` True -> zero3,
                                                   False -> zero2; FSDP1 FULL_SHARD / SHARD_GRAD_OP), ``offload_params``
``deepspeed``                                      a DeepSpeed config, read as such
=================================================  ============================================================
"""

from __future__ import annotations

from typing import Any

from memfit.configs.document import Document
from memfit.configs.reading import Reader
from memfit.errors import MemfitError

TRAINER_VERSION = "transformers 5.24.0"
# training_args.py:806-813: default_optim = "adamw_torch_fused" when torch >= 2.8 (memfit pins torch 2.13)
DEFAULT_OPTIM = "adamw_torch_fused"

# HF optimizer names (OptimizerNames, training_args.py:113) -> memfit's optimizer, torch AdamW's kernel (None: not
# torch AdamW), a note. adamw_torch passes neither fused nor foreach: torch 2.13 then takes the for-each path when
# every parameter is on CUDA (optimizer._default_to_fused_or_foreach), the for-loop on the CPU.
OPTIMIZERS: dict[str, tuple[str, str | None, str]] = {
    "adamw_torch": ("adamw", "foreach", "torch AdamW: for-each on CUDA (torch's default there), for-loop on CPU"),
    "adamw_torch_fused": ("adamw", "fused", "torch AdamW, fused=True"),
    "adamw_torch_xla": ("adamw", None, ""),
    "adamw_torch_npu_fused": ("adamw", None, ""),
    "adamw_apex_fused": ("adamw", "fused", "apex FusedAdam: in place, as torch's fused kernel"),
    "adamw_hf": ("adamw", None, ""),
    "adamw_bnb_8bit": ("adamw-8bit", None, "bitsandbytes AdamW8bit"),
    "adamw_8bit": ("adamw-8bit", None, "bitsandbytes AdamW8bit"),
    "paged_adamw_8bit": ("paged-adamw-8bit", None, "paged: bitsandbytes keeps the states in CUDA unified memory, "
                         "outside the allocator's counters; memfit reports them apart from the device peak"),
    "paged_adamw_32bit": ("paged-adamw-32bit", None, "paged: bitsandbytes keeps the fp32 states in CUDA unified "
                          "memory, outside the allocator's counters; memfit reports them apart from the device peak"),
    "adamw_torch_8bit": ("adamw-8bit", None, "torchao AdamW8bit"),
    "sgd": ("sgd", None, "torch SGD (momentum 0 unless optim_args sets it)"),
    "adafactor": ("adafactor", None, ""),
}


def optimizer_setting(r: Reader, field: str, default: str | None = DEFAULT_OPTIM) -> None:
    """``optim`` -> memfit ``optimizer`` (when memfit models it), ``adamw_impl`` and ``optimizer_impl``."""
    value = r.get(field, default)
    if value is None:
        return
    value = str(value)
    known = OPTIMIZERS.get(value.lower())
    if known is None:
        r.not_modelled(field, f"optimizer {value!r}: memfit models adamw, adamw-8bit, paged-adamw-8bit/32bit, sgd, "
                              "sgd-momentum and adafactor; the estimate keeps --optimizer", active=lambda v: True)
        if not r.has(field):
            return
        r.also("optimizer_impl", value)
        return
    opt, impl, note = known
    r.set("optimizer", opt, field, note=note)
    if impl == "foreach" and r.get("use_cpu"):  # torch's default on the CPU is the for-loop
        impl = "forloop"
    if impl is not None:
        r.set("adamw_impl", impl, field)
    r.also("optimizer_impl", value)


def checkpointing_settings(r: Reader, default: bool | None = None) -> None:
    """``activation_checkpointing`` (or its deprecated alias) and its kwargs -> checkpointing / offload."""
    new, old = "activation_checkpointing", "gradient_checkpointing"
    if r.has(new) and r.get(new) is not None:
        field, on = new, bool(r.get(new))
    elif r.has(old) and r.get(old) is not None:
        field, on = old, bool(r.get(old))
    else:
        field = old if old in r.schema and r.schema[old].default is True else new
        on = bool(default if default is not None else r.get(field))
    kwargs_field = next((k for k in (f"{field}_kwargs", f"{new}_kwargs") if r.has(k)), f"{old}_kwargs")
    kwargs = r.get(kwargs_field) if r.has(kwargs_field) else None
    if isinstance(kwargs, str):
        import json

        try:
            kwargs = json.loads(kwargs)
        except ValueError:
            kwargs = None
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    other = old if field == new else new
    r.claim(other)
    if r.has(other):
        r.ignore(other, f"{field} is set and wins (training_args.py: the deprecated alias is used only when "
                        "activation_checkpointing is unset)")
    if not on:
        r.set("checkpointing", "none", field)
        if r.has(kwargs_field):
            r.ignore(kwargs_field, "checkpointing is off")
        return
    every = kwargs.get("every_n_layers", 1)
    if isinstance(every, int) and not isinstance(every, bool) and every > 1:
        r.set("checkpointing", "every-k", field, kwargs_field, note=f"every_n_layers {every}: one block in {every}")
        r.also("checkpoint_every", every)
    else:
        r.set("checkpointing", "full", field)
    if kwargs.get("offload"):
        r.also("offload", True)
    elif r.has(kwargs_field):
        r.claim(kwargs_field)
        if not any(row.field == kwargs_field for row in r.out.rows):
            r.ignore(kwargs_field, "use_reentrant and the like: no memory effect memfit models")



def autocast_setting(r: Reader, bf16_default: bool | None = None) -> None:
    """``bf16`` / ``fp16`` -> autocast (TRL: bf16 defaults to ``not fp16``)."""
    fp16 = bool(r.get("fp16"))
    bf16 = r.get("bf16")
    if bf16 is None:
        bf16 = (not fp16) if bf16_default is None else bf16_default
    if bf16:
        r.set("autocast", "bf16", "bf16")
        r.claim("fp16")
        r.ignore("fp16", "bf16 wins") if fp16 else r.ignore("fp16", "off")
    elif fp16:
        r.set("autocast", "fp16", "fp16")
        r.ignore("bf16", "off")
    else:
        r.set("autocast", "none", "bf16", "fp16")


def fsdp_settings(r: Reader) -> None:
    """``fsdp`` (True, or the legacy ``"full_shard auto_wrap"`` string / list) and ``fsdp_config``."""
    fsdp = r.get("fsdp")
    if fsdp in (None, "", False, [], "false", "False"):
        r.ignore("fsdp", "off")
        if r.has("fsdp_config"):
            r.ignore("fsdp_config", "fsdp is off")
        return
    if isinstance(r.get("fsdp_config"), str):
        r.reference("fsdp_config", "fsdp")
    items = fsdp.split() if isinstance(fsdp, str) and fsdp not in ("true", "True") else (
        list(fsdp) if isinstance(fsdp, list) else [])
    stage = "zero3"
    if "shard_grad_op" in items:
        stage = "zero2"
    elif "no_shard" in items:
        stage = "none"
    r.set("sharding", stage, "fsdp", note="FSDP; fsdp_config may change it")
    if "offload" in items:
        r.also("offload_params", True)
    config = r.get("fsdp_config")
    if isinstance(config, dict):
        read_fsdp_mapping(r, config, "fsdp_config")


def fsdp_version(doc: Document, value: Any, path: tuple[str, ...] | None = None) -> int:
    """The FSDP version as transformers 5.24.0 (``int(fsdp_config.get("version", 2))``, training_args.py:2826)
    and accelerate read it, which raise TypeError on null or a list: here 1 or 2, else one MemfitError naming
    the file and line."""
    try:
        version = int(value)
    except (TypeError, ValueError):
        version = 0
    if isinstance(value, bool) or version not in (1, 2):
        if path is None:
            path = (next((k for k in ("fsdp_version", "version") if k in doc.data), "fsdp_version"),)
        raise MemfitError(f"{doc.where(path)}: {path[-1]} must be 1 or 2 (the FSDP version), got {value!r}",
                          hint=f"set {path[-1]}: 2 (or 1), or leave it out for the default")
    return version


def read_fsdp_mapping(r: Reader, config: dict[str, Any], field: str) -> None:
    """An HF ``fsdp_config`` mapping (keys with or without the ``fsdp_`` prefix, training_args.py:2776-2870)."""
    r.claim(field)
    cfg = {k[5:] if k.startswith("fsdp_") else k: v for k, v in config.items()}
    key = next((k for k in ("fsdp_version", "version") if k in config), "fsdp_version")
    version = fsdp_version(r.doc, cfg.get("version", 2), (*r.prefix, *field.split("."), key))
    raf = cfg.get("reshard_after_forward", True if version == 2 else "full_shard")
    stage = fsdp_stage(raf)
    r.also("sharding", stage)
    r.row(field, "setting", setting="sharding", memfit_value=stage,
           note=f"FSDP{version} reshard_after_forward={raf!r}", value=dict(config))
    if version == 2 and stage in ("zero2", "zero3"):  # the Trainer prepares FSDP2 with accelerate's units
        r.also("fsdp_wrap", "accelerate")
    if _truthy(cfg.get("cpu_offload")) or _truthy(cfg.get("offload_params")):
        r.also("offload_params", True)
    if _truthy(cfg.get("activation_checkpointing")):
        r.also("checkpointing", "full")


def fsdp_stage(reshard_after_forward: Any) -> str:
    """FSDP2 ``reshard_after_forward`` (bool) or FSDP1's strategy name -> memfit's sharding stage.

    FULL_SHARD / True frees the gathered weights after each block's forward: ZeRO-3. SHARD_GRAD_OP / False
    keeps them until the backward: ZeRO-2. NO_SHARD is DDP. HYBRID_SHARD shards within a node only; memfit
    takes it as ZeRO-3 over the GPUs of one node (``--gpus`` = GPUs per node).
    """
    text = str(reshard_after_forward).strip().lower()
    if text in ("true", "1", "full_shard", "hybrid_shard"):
        return "zero3"
    if text in ("false", "0", "shard_grad_op", "hybrid_shard_zero2", "_hybrid_shard_zero2"):
        return "zero2"
    if text == "no_shard":
        return "none"
    return "zero3"


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def loss_setting(r: Reader, field: str = "use_liger_kernel", config_field: str | None = "liger_kernel_config") -> None:
    """Liger kernels: the fused linear cross-entropy is memfit's ``loss chunked``."""
    if not r.get(field):
        if r.has(field):
            r.ignore(field, "off")
        if config_field and r.has(config_field):
            r.ignore(config_field, f"{field} is off")
        return
    cfg = r.get(config_field) if config_field and r.has(config_field) else {}
    if isinstance(cfg, dict) and cfg.get("fused_linear_cross_entropy") is False:
        r.set("loss", "standard", field, config_field or field,
              note="liger_kernel_config turns the fused linear cross-entropy off; its other kernels "
                   "(RMSNorm, SwiGLU, RoPE) are NOT MODELLED")
        return
    fields = (field, config_field) if config_field and r.has(config_field) else (field,)
    r.set("loss", "chunked", *fields, note="Liger's fused linear cross-entropy; its RMSNorm / SwiGLU / RoPE kernels "
                                           "are NOT MODELLED (memfit keeps the eager ops' activations)")


def trl_loss_setting(r: Reader) -> None:
    """TRL 1.16's SFTTrainer computes its loss through its fused LM head whatever ``loss_type`` says ("nll", its
    default, "dft", or the deprecated alias "chunked_nll"), and with ``use_liger_kernel`` it turns Liger's fused
    linear cross-entropy off (``liger_kernel_config["fused_linear_cross_entropy"] = False``, sft_trainer.py): memfit's
    ``loss trl`` (memfit.estimate.trl_loss)."""
    fields = [f for f in ("loss_type", "use_liger_kernel", "liger_kernel_config") if r.has(f)] or ["loss_type"]
    note = "SFTTrainer's fused LM head (no (b, s, V) logits)"
    if r.get("use_liger_kernel"):
        note += "; use_liger_kernel: TRL turns Liger's fused cross-entropy off, its other kernels are NOT MODELLED"
    r.set("loss", "trl", *fields, note=note)


NOT_MODELLED_TRAINER: dict[str, str] = {
    "torch_compile": "torch.compile changes which activations are saved (fused kernels); memfit models eager",
    "torch_compile_backend": "implies torch_compile",
    "torch_compile_mode": "implies torch_compile",
    "auto_find_batch_size": "the Trainer halves the batch after an out-of-memory error; memfit estimates the "
                            "batch as written",
    "label_smoothing_factor": "the label smoother takes a second fp32 log-softmax of the logits (b*s*V*4 more)",
    "use_cache": "a KV cache kept during training (transformers turns it off under checkpointing)",
    "parallelism_config": "tensor / context / sequence parallelism",
    "optim_target_modules": "GaLore / APOLLO projections of the optimizer states",
}

IGNORED_TRAINER: dict[str, str] = {
    "tf32": "TF32 matmuls: speed, no memory effect",
    "torch_empty_cache_steps": "empties the allocator cache between steps: lowers reserved memory, not the peak",
    "bf16_full_eval": "evaluation only",
    "fp16_full_eval": "evaluation only",
    "group_by_length": "batches of similar lengths: less padding, the same longest batch",
}


def _evaluates(r: Reader) -> bool:
    """The Trainer evaluates during training: ``eval_strategy`` (transformers 5.24 default ``"no"``) is not "no"."""
    value = r.get("eval_strategy")
    return str(getattr(value, "value", value) or "no") != "no"


def eval_settings(r: Reader) -> None:
    """The evaluation the Trainer runs between training steps (:mod:`memfit.estimate.evaluation`), when
    ``eval_strategy`` is not "no": ``per_device_eval_batch_size`` (default 8), ``prediction_loss_only`` and
    ``eval_accumulation_steps``. A ``compute_metrics`` (the logits kept) is code, not a field: ``--eval-metrics``."""
    fields = ("per_device_eval_batch_size", "prediction_loss_only", "eval_accumulation_steps")
    if not _evaluates(r):
        for name in fields:
            r.ignore(name, "eval_strategy is no: the Trainer does not evaluate during training")
        return
    r.set("eval_batch", r.get("per_device_eval_batch_size"), "per_device_eval_batch_size", "eval_strategy")
    if r.has("prediction_loss_only"):
        r.set("prediction_loss_only", bool(r.get("prediction_loss_only")), "prediction_loss_only")
    if r.get("eval_accumulation_steps"):
        r.set("eval_accumulation_steps", r.get("eval_accumulation_steps"), "eval_accumulation_steps")


def trainer_common(r: Reader) -> None:
    """The TrainingArguments fields every Trainer-based framework shares (module docstring)."""
    r.set("batch", r.get("per_device_train_batch_size"), "per_device_train_batch_size")
    r.set("grad_accum", r.get("gradient_accumulation_steps"), "gradient_accumulation_steps")
    eval_settings(r)
    if r.get("use_cpu"):
        r.set("device", "cpu", "use_cpu")
    for name, why in NOT_MODELLED_TRAINER.items():
        r.not_modelled(name, why)
    for name, why in IGNORED_TRAINER.items():
        r.ignore(name, why)
    if r.kind == "trl":
        trl_loss_setting(r)
    else:
        loss_setting(r)
    fsdp_settings(r)
    r.reference("deepspeed", "deepspeed")
