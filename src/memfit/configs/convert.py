"""From an :class:`~memfit.configs.result.ImportedRun` to a :class:`~memfit.estimate.spec.RunSpec`.

A setting whose name is a RunSpec field goes in as is; ``method`` and ``precision`` are derived; any
other setting (``packing``, ``eval_batch``, ``optimizer_impl``, ...) is reported NOT MODELLED until RunSpec
has a field of that name -- then it flows in with no change here (the field set is read from RunSpec
itself).

``sharding`` (DeepSpeed's ``zero_optimization.stage``, FSDP's sharding strategy: FULL_SHARD = zero3,
SHARD_GRAD_OP = zero2) and ``gpus`` (accelerate's ``num_processes``, the world size) are RunSpec fields. A
ZeRO stage divides the model states over the world size, which a DeepSpeed or Trainer file alone does not
name (the launcher does): without one (or with one process) the stage is reported NOT MODELLED with the
fix (``--gpus N``) and the run is estimated unsharded.

``precision`` from the dtype the model is loaded in and the autocast dtype:

=====================  ==========  ===================
loaded in              autocast    memfit precision
=====================  ==========  ===================
float32                none        fp32
float32                bf16 / fp16 mixed-bf16 / mixed-fp16
bfloat16 / float16     any         bf16 / fp16
=====================  ==========  ===================

``auto`` is the checkpoint's own dtype (its config.json ``torch_dtype``/``dtype``; float32 when it says
none, as transformers does). A full fine-tune whose trainable weights are kept in fp32 (DeepSpeed's master
copy, LLaMA-Factory's upcast) under bf16 is ``mixed-bf16``: 16 B per parameter of weights, gradients and
AdamW states, as memfit counts for mixed-bf16.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memfit.configs.result import DERIVED_INPUTS, ConfigRow, ImportedRun
from memfit.errors import MemfitError
from memfit.estimate.spec import RunSpec, parse_rank_pattern

NOT_SPEC = frozenset({"model", "reference", "seq_unbounded"})


def runspec_fields() -> frozenset[str]:
    """RunSpec's field names (read each time: the redesign adds ``sharding`` and ``gpus``)."""
    return frozenset(f.name for f in dataclasses.fields(RunSpec))


@dataclass(frozen=True, kw_only=True, slots=True)
class SpecImport:
    """The RunSpec built from the imported settings, and the rows with their final status."""

    spec: RunSpec
    file_spec: RunSpec  # before the command-line flags: what the files alone describe
    imported: ImportedRun
    rows: tuple[ConfigRow, ...]
    model: str | None
    applied: Mapping[str, Any]  # RunSpec field -> value taken from the configs
    unused: Mapping[str, Any]  # settings RunSpec has no field for (NOT MODELLED), or a caller consumes

    def to_json(self) -> list[dict[str, Any]]:
        """The ``config_import`` list of ``--json`` output."""
        return [r.to_dict() for r in self.rows]


def model_dtype(model: str | None) -> str | None:
    """The checkpoint's own dtype (its config.json ``dtype`` / ``torch_dtype``), for ``weights_dtype: auto``;
    None when ``model`` cannot be resolved here (the command that needs the model says why)."""
    if not model:
        return None
    from memfit.estimate import resolve_config

    try:
        config = resolve_config(model)
    except MemfitError:
        return None
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else {}
    value = config.get("dtype") or config.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    return str(value).replace("torch.", "") if value else None


def derive_method(settings: Mapping[str, Any]) -> str | None:
    adapter, quant = settings.get("adapter"), settings.get("quantization")
    if adapter is None and quant is None:
        return None
    if quant == "nf4":
        return "qlora"
    if quant == "int8" and adapter != "none":
        return "int8-lora"
    if adapter == "none":
        return "full"
    return "lora"


def derive_precision(settings: Mapping[str, Any], method: str, model_dtype: str | None) -> str | None:
    wd, ac = settings.get("weights_dtype"), settings.get("autocast")
    if wd is None and ac is None:
        return None
    if wd in (None, "auto"):
        wd = model_dtype if wd == "auto" and model_dtype else "float32"
    if method == "full" and settings.get("trainable_fp32") and wd in ("bfloat16", "float16"):
        ac = ac if ac not in (None, "none") else ("bf16" if wd == "bfloat16" else "fp16")
        wd = "float32"
    wd = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.float32": "float32", "bf16": "bfloat16",
          "fp16": "float16", "fp32": "float32", "half": "float16", "float": "float32"}.get(str(wd), str(wd))
    if wd == "float32":
        return {"bf16": "mixed-bf16", "fp16": "mixed-fp16"}.get(str(ac), "fp32")
    if wd == "bfloat16":
        return "bf16"
    if wd == "float16":
        return "fp16"
    return None


def to_spec(imported: ImportedRun, *, base: RunSpec | None = None, explicit: Mapping[str, Any] | None = None,
            model_dtype: str | None = None) -> SpecImport:
    """The RunSpec for ``imported`` over ``base`` (memfit's defaults), with ``explicit`` (command-line flags)
    winning over every file."""
    explicit = dict(explicit or {})
    settings = dict(imported.settings)
    if settings.get("seq_unbounded") and "seq" not in settings and "seq" not in explicit:
        row = imported.row_of("seq_unbounded")
        where = f"{row.file}:{row.line}: {row.field}" if row is not None and row.line else (row.file if row else "")
        raise MemfitError(f"{where}: no sequence length: without truncation the longest example sets the peak; "
                          "pass --seq with its length in tokens (memfit lengths DATA --tokenizer T finds it)")
    fields = runspec_fields()
    values: dict[str, Any] = {k: v for k, v in settings.items() if k in fields}
    method = derive_method(settings)
    if method is not None:
        values["method"] = method
    m = explicit.get("method", values.get("method", (base or RunSpec()).method))
    precision = derive_precision(settings, m, model_dtype)
    if precision is not None:
        values["precision"] = precision
    if "targets" in values:
        values["targets"] = tuple(values["targets"])
    if "modules_to_save" in values:
        values["modules_to_save"] = tuple(values["modules_to_save"])
    if "exclude_modules" in values:
        values["exclude_modules"] = tuple(values["exclude_modules"])
    if "rank_pattern" in values:
        values["rank_pattern"] = parse_rank_pattern(values["rank_pattern"])
    base = base or RunSpec()
    held = _held_sharding(values, explicit, base)
    stage, file_world = values.get("sharding", "none"), values.get("gpus", base.gpus)
    # the files' stage needs the files' world size; without one it waits for --gpus (or is held back)
    waits = stage != "none" and file_world == 1
    file_spec = _build(base, {k: v for k, v in values.items() if not (k == "sharding" and waits)}, imported)
    late: dict[str, Any] = {}
    if stage != "none" and "sharding" not in explicit:
        if held and not waits:
            late["sharding"] = "none"  # --gpus 1 over the files' world size
        elif waits and not held:
            late["sharding"] = stage  # --gpus N gives the world size the files' stage shards over
    spec = file_spec.with_(**late, **explicit) if explicit or late else file_spec
    rows = _final_rows(imported, settings, fields, explicit, spec, precision, method, held)
    unused = {k: v for k, v in settings.items()
              if (k not in fields or k in held) and k not in DERIVED_INPUTS and k not in NOT_SPEC}
    model = imported.model.value if imported.model else None
    return SpecImport(spec=spec, file_spec=file_spec, imported=imported, rows=rows, model=model,
                      applied={k: v for k, v in values.items() if k not in explicit and k not in held}, unused=unused)


def _held_sharding(values: Mapping[str, Any], explicit: Mapping[str, Any], base: RunSpec) -> dict[str, str]:
    """A ZeRO stage from the files that has no world size to shard over (none given, or one process): held
    back with the reason, so the run is estimated unsharded (an explicit --sharding is the user's and stays)."""
    stage = values.get("sharding", "none")
    world = explicit.get("gpus", values.get("gpus", base.gpus))
    if stage == "none" or "sharding" in explicit or world != 1:
        return {}
    if "gpus" in values or "gpus" in explicit:
        return {"sharding": f"{stage} over one process shards nothing: estimated unsharded"}
    return {"sharding": f"{stage} divides the model states over the world size, which these files do not name: "
                        f"pass --gpus N to estimate per GPU (estimated unsharded)"}

def _build(base: RunSpec, values: dict[str, Any], imported: ImportedRun) -> RunSpec:
    """RunSpec(values), naming the file and line of a value RunSpec refuses."""
    try:
        return base.with_(**values)
    except MemfitError as exc:
        text = str(exc)
        for name in values:
            if f"--{name.replace('_', '-')}" in text:
                row = imported.row_of(name) or _derived_row(imported, name)
                if row is not None:
                    where = f"{row.file}:{row.line}" if row.line else row.file
                    raise MemfitError(f"{where}: {row.field}: {text}") from exc
        raise


def _derived_row(imported: ImportedRun, name: str) -> ConfigRow | None:
    for source, target in DERIVED_INPUTS.items():
        if target == name and imported.row_of(source) is not None:
            return imported.row_of(source)
    return None


def _final_rows(imported: ImportedRun, settings: Mapping[str, Any], fields: frozenset[str],
                explicit: Mapping[str, Any], spec: RunSpec, precision: str | None,
                method: str | None, held: Mapping[str, str]) -> tuple[ConfigRow, ...]:
    out = []
    for row in imported.rows:
        name = row.setting
        if row.status != "setting" or name is None or name in NOT_SPEC:
            out.append(row)
            continue
        if name in held:
            out.append(replace(row, status="NOT MODELLED", note=_join(row.note, held[name])))
            continue
        target = DERIVED_INPUTS.get(name, name)
        if target not in fields:
            out.append(replace(row, status="NOT MODELLED",
                               note=_join(row.note, f"memfit's RunSpec has no {name} yet")))
            continue
        if target in explicit:
            out.append(replace(row, note=_join(row.note, f"--{target.replace('_', '-')} on the command line wins")))
            continue
        if name == "optimizer" and "optimizer_impl" in settings and "optimizer_impl" not in fields:
            row = replace(row, note=_join(row.note, f"the implementation ({settings['optimizer_impl']}) is NOT "
                                                    "MODELLED: RunSpec has no optimizer_impl yet"))
        if name in DERIVED_INPUTS:
            shown = precision if target == "precision" else method
            out.append(replace(row, note=_join(row.note, f"{target} {shown}")) if shown else row)
            continue
        out.append(row)
    out = _checks(out, spec, settings)
    return tuple(out)


def _checks(rows: list[ConfigRow], spec: RunSpec, settings: Mapping[str, Any]) -> list[ConfigRow]:
    """Settings that are valid alone but not modelled in this combination."""
    out = []
    for row in rows:
        if row.setting == "offload" and row.status == "setting" and spec.checkpointing == "none":
            why = "offloading all saved activations without checkpointing: memfit offloads checkpoints"
            row = replace(row, status="NOT MODELLED", note=_join(row.note, why))
        if row.setting == "quantization" and settings.get("quantization") == "nf4" \
                and settings.get("adapter") == "none":
            row = replace(row, status="NOT MODELLED", note=_join(row.note, "a 4-bit base needs an adapter"))
        out.append(row)
    return out


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def spec_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Python-API keyword overrides as RunSpec values (``targets="q_proj,v_proj"`` -> a tuple)."""
    from memfit.estimate.spec import parse_targets

    out = dict(overrides)
    for key in ("targets", "modules_to_save", "exclude_modules"):
        if isinstance(out.get(key), str):
            out[key] = parse_targets(out[key])
        elif out.get(key) is not None:
            out[key] = tuple(out[key])
    if "rank_pattern" in out:
        out["rank_pattern"] = parse_rank_pattern(out["rank_pattern"])
    unknown = set(out) - runspec_fields()
    if unknown:
        raise MemfitError(f"unknown run setting {', '.join(sorted(unknown))}: RunSpec takes "
                          f"{', '.join(sorted(runspec_fields()))}")
    return out


def spec_from_files(paths: Sequence[str | os.PathLike[str]], overrides: Mapping[str, Any] | None = None, *,
                    model: str | None = None) -> SpecImport:
    """``RunSpec.from_config``: read ``paths`` and build the spec, ``overrides`` winning."""
    from memfit.configs.importer import import_configs

    imported = import_configs([os.fspath(p) for p in paths])
    name = model or (imported.model.value if imported.model else None)
    dtype = model_dtype(name) if imported.settings.get("weights_dtype") == "auto" else None
    return to_spec(imported, explicit=spec_overrides(overrides or {}), model_dtype=dtype)


def spec_from_objects(args: Any = None, model_config: Any = None, peft_config: Any = None,
                      overrides: Mapping[str, Any] | None = None) -> SpecImport:
    """``RunSpec.from_training_args``: the live objects' attributes, ``overrides`` winning."""
    from memfit.configs.live import dtype_name, imported_from_objects

    imported = imported_from_objects(args, model_config, peft_config)
    dtype = dtype_name(getattr(model_config, "dtype", None) or getattr(model_config, "torch_dtype", None))
    return to_spec(imported, explicit=spec_overrides(overrides or {}), model_dtype=dtype)
