"""DeepSpeed's JSON config (DeepSpeed 0.19.8: the top-level keys ``DeepSpeedConfig._initialize_params`` reads,
``runtime/config.py``; ``zero_optimization`` is the pydantic ``DeepSpeedZeroConfig``, which rejects unknown
keys, ``runtime/zero/config.py``). Keys DeepSpeed 0.19.8 removed (``amp``, ``elasticity``, ...) are refused
with its own message; ``"auto"`` values are filled by the Hugging Face integration from TrainingArguments.

===========================================  ======================================================================
key                                          memfit setting
===========================================  ======================================================================
``zero_optimization.stage`` 0-3              ``sharding`` none / zero1 / zero2 / zero3
``zero_optimization.offload_optimizer``      ``offload_optimizer`` (ZeRO-Offload: optimizer states on CPU / NVMe)
``zero_optimization.offload_param``          ``offload_params`` (ZeRO-Infinity, stage 3)
``train_micro_batch_size_per_gpu``           ``batch`` (a file of its own; from a Trainer config, the Trainer's
                                             ``per_device_train_batch_size`` wins and must match)
``gradient_accumulation_steps``              ``grad_accum`` (likewise)
``bf16.enabled`` / ``fp16.enabled``          the engine casts the model to bf16 / fp16 and keeps fp32 master
                                             weights in the optimizer: ``weights_dtype`` + ``trainable_fp32``
``optimizer.type``                           ``optimizer`` (Adam, AdamW, FusedAdam, CPUAdam: adamw)
===========================================  ======================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memfit.configs.document import Document, KeyPath
from memfit.configs.reading import FileReading, Reader
from memfit.configs.schema import load_schema

STAGES = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}
ADAM = {"adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam", "fused_adam", "cpu_adam"}
BUFFERS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "prefetch_bucket_size",
           "stage3_max_live_parameters", "max_live_parameters", "sub_group_size")
TRAINER_KINDS = ("trl", "hf-trainer", "llamafactory", "axolotl")
REDUCE_BUCKET_DEFAULT = 500_000_000  # DeepSpeedZeroConfig.reduce_bucket_size (elements), DeepSpeed 0.19.8


def _reduce_bucket(r: Reader, zero: Mapping[str, Any], stage: int) -> None:
    """ZeRO-1/2's gradient bucket: at the start of every backward ``DeepSpeedZeroOptimizer.setup_buckets`` allocates
    ``reduce_bucket_size`` elements of the gradient dtype, twice with ``overlap_comm`` (on by default only at stage
    3), whatever the model's size (``runtime/zero/stage_1_and_2.py``). Measured on CPU (RESULTS ``## deepspeed on
    CPU``): 2,000,000,000 B of each rank's ~2.9 GB at the default; the HF Trainer's ``"auto"`` fills hidden_size^2.
    memfit models torch's ZeRO (no such bucket), so the import names the bytes."""
    n = zero.get("reduce_bucket_size", REDUCE_BUCKET_DEFAULT)
    if n == "auto" or not isinstance(n, (int, float)) or isinstance(n, bool):
        return
    overlap = zero.get("overlap_comm")
    copies = 2 if overlap is True or (overlap is None and stage == 3) else 1
    gib = int(n) * copies * 4 / 2**30
    r.row("zero_optimization.reduce_bucket_size", "NOT MODELLED", value=int(n),
          default="reduce_bucket_size" not in zero,
          note=f"DeepSpeed's gradient bucket: {copies} x {int(n):,} elements at every backward, {gib:.2f} GiB "
               f"(1024^3 B) at 4 B per element (2 B where DeepSpeed reduces in bf16/fp16) on top of memfit's "
               f"figure, which models torch's ZeRO; "
               f"\"auto\" under the Trainer (hidden_size^2) or a smaller value removes it")


def read_deepspeed(doc: Document, *, prefix: KeyPath = (), data: Mapping[str, Any] | None = None,
                   parent_kind: str | None = None, parent: Mapping[str, Any] | None = None) -> FileReading:
    """A DeepSpeed config, standalone or named by a Trainer / accelerate config (``parent_kind``; ``parent``:
    the settings read from it, which fill ``"auto"``)."""
    r = Reader(doc, "deepspeed", load_schema("deepspeed"), prefix=prefix, data=data, allow_auto=True,
               label="DeepSpeed")
    parent = parent or {}
    from_trainer = parent_kind in TRAINER_KINDS
    zero = r.get("zero_optimization")
    if isinstance(zero, bool):
        zero = {"stage": 1 if zero else 0}
    zero = zero if isinstance(zero, dict) else {}
    stage = zero.get("stage", 0)
    if stage == "auto":
        r.ignore("zero_optimization", "stage auto: set by the launcher")
    else:
        r.set("sharding", STAGES.get(int(stage), "zero3"), "zero_optimization",
              note=f"ZeRO stage {stage}", memfit_value=STAGES.get(int(stage)))
    for key, setting in (("offload_optimizer", "offload_optimizer"), ("offload_param", "offload_params")):
        device = (zero.get(key) or {}).get("device", "none") if isinstance(zero.get(key), dict) else "none"
        if device not in ("none", None, "auto"):
            r.also(setting, device)
            r.row(f"zero_optimization.{key}", "setting", setting=setting, memfit_value=device,
                   value=zero.get(key))
    if stage in (1, 2):
        _reduce_bucket(r, zero, stage)
    for key in BUFFERS:
        if key in zero and zero[key] != "auto" and not (key == "reduce_bucket_size" and stage in (1, 2)):
            r.row(f"zero_optimization.{key}", "NOT MODELLED", value=zero[key],
                   note="communication / prefetch buffers: memfit does not model them")
    for key in ("zero_quantized_weights", "zero_quantized_gradients", "zero_hpz_partition_size"):
        if zero.get(key) not in (None, False, 0, 1, "auto"):
            r.row(f"zero_optimization.{key}", "NOT MODELLED", value=zero[key], note="ZeRO++")
    for key, setting in (("train_micro_batch_size_per_gpu", "batch"), ("gradient_accumulation_steps", "grad_accum")):
        value = r.get(key)
        if not r.has(key):
            continue
        if value == "auto":
            r.ignore(key, "auto: the Trainer fills it in")
        elif from_trainer:
            ours = parent.get(setting)
            note = f"the Trainer's value wins ({ours})" + ("" if ours in (None, value) else
                                                          f"; it differs from {value}: the Trainer refuses this")
            r.ignore(key, note)
        else:
            r.set(setting, value, key)
    r.ignore("train_batch_size", "the global batch: no effect on one GPU's peak")
    _precision(r, parent)
    _optimizer(r)
    r.ignore("activation_checkpointing", "DeepSpeed's own checkpointing API; Hugging Face models use "
                                         "torch.utils.checkpoint (activation_checkpointing in TrainingArguments)")
    r.not_modelled("torch_autocast", "DeepSpeed's torch autocast mode",
                   active=lambda v: isinstance(v, dict) and bool(v.get("enabled")))
    r.not_modelled("compile", "torch.compile", active=lambda v: isinstance(v, dict) and bool(v.get("enabled")))
    r.not_modelled("tensor_parallel", "tensor parallelism",
                   active=lambda v: isinstance(v, dict) and int(v.get("autotp_size", 0) or 0) > 1)
    return r.finish()



def _enabled(block: Any, parent_autocast: Any) -> bool | None:
    if not isinstance(block, dict):
        return None
    value = block.get("enabled", False)
    if value == "auto":
        return None if parent_autocast is None else parent_autocast
    return bool(value)


def _precision(r: Reader, parent: Mapping[str, Any]) -> None:
    """The engine casts the module (``module.bfloat16()``/``half()``) and keeps fp32 masters in the optimizer."""
    autocast = parent.get("autocast")
    bf16 = _enabled(r.get("bf16") or r.get("bfloat16"), autocast == "bf16" if autocast is not None else None)
    fp16 = _enabled(r.get("fp16"), autocast == "fp16" if autocast is not None else None)
    field = "bf16" if r.has("bf16") else "bfloat16"
    if bf16:
        r.set("weights_dtype", "bfloat16", field, note="the engine casts the model to bf16")
        r.also("trainable_fp32", True)
        r.also("autocast", "none")
    elif fp16:
        r.set("weights_dtype", "float16", "fp16", note="the engine casts the model to fp16")
        r.also("trainable_fp32", True)
        r.also("autocast", "none")
    else:
        for f in ("bf16", "bfloat16", "fp16"):
            r.ignore(f, "off" if r.has(f) and r.get(f) is not None else "auto without a Trainer value")


def _optimizer(r: Reader) -> None:
    opt = r.get("optimizer")
    if not isinstance(opt, dict):
        return
    typ = str(opt.get("type", ""))
    if typ.lower() in ADAM:
        r.set("optimizer", "adamw", "optimizer", note=f"DeepSpeed {typ}")
        r.also("optimizer_impl", f"deepspeed {typ}")
    else:
        r.not_modelled("optimizer", f"DeepSpeed optimizer {typ!r}: memfit models Adam(W)", active=lambda v: True)
