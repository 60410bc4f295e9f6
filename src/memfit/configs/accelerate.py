"""accelerate's launch config YAML (accelerate 1.15.0: ``ClusterConfig`` in ``commands/config/config_args.py``,
which refuses unknown top-level keys; the ``fsdp_config`` / ``deepspeed_config`` keys are the launcher's
arguments, ``commands/launch.py``), and the JSON file a Trainer's ``fsdp_config`` may name (transformers
5.24.0 reads the keys listed in ``schemas/transformers.json``, with or without the ``fsdp_`` prefix).

accelerate's defaults: ``fsdp_version`` 1 (``utils/dataclasses.py:1831``), ``fsdp_reshard_after_forward``
FULL_SHARD for FSDP1 and True for FSDP2 (both ZeRO-3), ``num_processes`` the world size over all machines.
"""

from __future__ import annotations

from typing import Any

from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader
from memfit.configs.schema import FieldSpec, Schema, load_schema
from memfit.configs.trainer import fsdp_stage, fsdp_version
from memfit.errors import MemfitError

STAGES = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}



def read_accelerate(doc: Document) -> FileReading:
    r = Reader(doc, "accelerate", load_schema("accelerate"), label="accelerate")
    if not r.has("distributed_type"):
        raise MemfitError(f"{doc.path}: an accelerate config needs distributed_type (accelerate 1.15.0 "
                          "config_args.py:110 refuses a file without it)")
    dist = str(r.get("distributed_type")).upper()
    procs = r.get("num_processes")
    if dist == "NO":
        r.set("gpus", 1, "distributed_type")
    elif isinstance(procs, int) and procs > 0:
        r.set("gpus", procs, "num_processes", note=f"{dist}: data-parallel processes over all machines")
    mp = str(r.get("mixed_precision") or "no").lower()
    if mp == "fp8":
        r.not_modelled("mixed_precision", "fp8 training", active=lambda v: True)
    elif r.has("mixed_precision"):
        r.set("autocast", {"bf16": "bf16", "fp16": "fp16"}.get(mp, "none"), "mixed_precision")
    if r.get("use_cpu"):
        r.set("device", "cpu", "use_cpu")
    if dist == "DEEPSPEED":
        _deepspeed(r, r.get("deepspeed_config") or {})
    elif r.has("deepspeed_config"):
        r.ignore("deepspeed_config", f"distributed_type is {dist}")
    if dist == "FSDP":
        _fsdp(r, r.get("fsdp_config") or {})
    elif r.has("fsdp_config"):
        r.ignore("fsdp_config", f"distributed_type is {dist}")
    elif dist == "MULTI_GPU":
        r.set("sharding", "none", "distributed_type", note="DDP: every GPU holds a full replica")
    if dist not in ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP", "MULTI_CPU"):
        r.not_modelled("distributed_type", f"{dist}", active=lambda v: True)
    r.not_modelled("dynamo_config", "torch.compile (dynamo) changes which activations are saved",
                   active=lambda v: isinstance(v, dict) and str(v.get("dynamo_backend", "NO")).upper() != "NO")
    r.not_modelled("parallelism_config", "tensor / context / sequence parallelism")
    r.not_modelled("fp8_config", "fp8 training")
    r.not_modelled("megatron_lm_config", "Megatron-LM")
    return r.finish()


def _deepspeed(r: Reader, cfg: dict[str, Any]) -> None:
    r.claim("deepspeed_config")
    if cfg.get("deepspeed_config_file"):
        r.out.references.append(_reference(r, "deepspeed_config.deepspeed_config_file",
                                           str(cfg["deepspeed_config_file"])))
        r.row("deepspeed_config.deepspeed_config_file", "setting", setting="reference",
               memfit_value=cfg["deepspeed_config_file"], value=cfg["deepspeed_config_file"],
               note="read as a deepspeed config")
    if "zero_stage" in cfg:
        stage = STAGES.get(int(cfg["zero_stage"]), "zero3")
        r.row("deepspeed_config.zero_stage", "setting", setting="sharding", memfit_value=stage,
               value=cfg["zero_stage"])
        r.also("sharding", stage)
    for key, setting in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_params")):
        if cfg.get(key) not in (None, "none"):
            r.row(f"deepspeed_config.{key}", "setting", setting=setting, memfit_value=cfg[key], value=cfg[key])
            r.also(setting, cfg[key])
    if "gradient_accumulation_steps" in cfg:
        r.row("deepspeed_config.gradient_accumulation_steps", "setting", setting="grad_accum",
               memfit_value=cfg["gradient_accumulation_steps"], value=cfg["gradient_accumulation_steps"])
        r.also("grad_accum", int(cfg["gradient_accumulation_steps"]))


def _reference(r: Reader, field: str, value: str) -> Any:
    from memfit.configs.reading import Reference

    return Reference(kind="deepspeed", value=value, file=str(r.doc.path), line=r.line(field), field=field)


def _fsdp(r: Reader, cfg: dict[str, Any]) -> None:
    r.claim("fsdp_config")
    version = fsdp_version(r.doc, cfg.get("fsdp_version", 1), ("fsdp_config", "fsdp_version"))
    if version == 2:
        raf: Any = cfg.get("fsdp_reshard_after_forward", True)
    else:
        raf = cfg.get("fsdp_reshard_after_forward", cfg.get("fsdp_sharding_strategy", "FULL_SHARD"))
    stage = fsdp_stage(raf)
    field = next((f"fsdp_config.{k}" for k in ("fsdp_reshard_after_forward", "fsdp_sharding_strategy") if k in cfg),
                 "fsdp_config")
    r.row(field, "setting", setting="sharding", memfit_value=stage, value=cfg.get(field.split(".")[-1], raf),
           note=f"FSDP{version}" + ("" if field != "fsdp_config" else f" default {raf!r}"))
    r.also("sharding", stage)
    if version == 2 and stage in ("zero2", "zero3"):  # fsdp2_prepare_model's units (estimate/fsdp_wrap.py)
        r.also("fsdp_wrap", "accelerate")
    if str(raf).upper().startswith("HYBRID"):
        r.out.rows[-1] = _with_note(r.out.rows[-1], "hybrid sharding: sharded within a node, replicated across nodes")
    if _true(cfg.get("fsdp_offload_params")):
        r.row("fsdp_config.fsdp_offload_params", "setting", setting="offload_params", memfit_value=True, value=True)
        r.also("offload_params", True)
    if _true(cfg.get("fsdp_activation_checkpointing")):
        r.row("fsdp_config.fsdp_activation_checkpointing", "setting", setting="checkpointing", memfit_value="full",
               value=True)
        r.also("checkpointing", "full")


def _with_note(row: Any, note: str) -> Any:
    from dataclasses import replace

    return replace(row, note=f"{row.note}; {note}" if row.note else note)


def _true(v: Any) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def fsdp_schema() -> Schema:
    """The keys a Trainer's ``fsdp_config`` file may hold (transformers.json ``fsdp_config_keys``)."""
    keys = load_schema("transformers").extra["fsdp_config_keys"]
    fields = {k: FieldSpec(name=k, type="fsdp_config key", kinds=frozenset({"any"}), source=v) for k, v in keys.items()}
    fields.update({f"fsdp_{k}": FieldSpec(name=f"fsdp_{k}", type="fsdp_config key", kinds=frozenset({"any"}),
                                          source=v) for k, v in keys.items()})
    return Schema(name="fsdp", version="transformers 5.24.0 fsdp_config", sources=("transformers/training_args.py",),
                  fields=fields)


def read_fsdp(doc: Document) -> FileReading:
    """A Trainer's ``fsdp_config`` JSON (training_args.py:2776: keys with or without ``fsdp_``)."""
    r = Reader(doc, "fsdp", fsdp_schema(), label="fsdp_config")
    cfg = {k[5:] if k.startswith("fsdp_") else k: v for k, v in doc.data.items()}
    version = fsdp_version(doc, cfg.get("version", 2))
    raf = cfg.get("reshard_after_forward", True if version == 2 else "full_shard")
    stage = fsdp_stage(raf)
    key = next((k for k in ("reshard_after_forward", "fsdp_reshard_after_forward") if k in doc.data), None)
    if key:
        r.set("sharding", stage, key, note=f"FSDP{version}")
    else:
        r.assume("sharding", stage, "(reshard_after_forward)", f"FSDP{version} default {raf!r}")
    for k in ("cpu_offload", "fsdp_cpu_offload"):
        if _true(doc.data.get(k)):
            r.set("offload_params", True, k)
    for k in ("activation_checkpointing", "fsdp_activation_checkpointing"):
        if _true(doc.data.get(k)):
            r.set("checkpointing", "full", k, note="FSDP's own activation checkpointing")
    return r.finish()
