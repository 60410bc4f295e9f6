"""``memfit fit --config FILE --write FIXED``: the fitting plan written back in the framework's own fields.

FIXED is a copy of the user's file with only the changed fields edited. YAML is edited as text, so every
comment, blank line and key order stays; each edited or added field gets a ``# memfit: ...`` comment line
naming the plan step that changed it. JSON (DeepSpeed, PEFT, a TrainingArguments file) is rewritten with
the same key order (JSON has no comments: the reasons are printed instead). The file is written to a
temporary file beside FIXED and renamed over it, and an existing FIXED is only replaced with ``force``.

A change the file's framework has no field for, or that lives in another file (a DeepSpeed stage named by
``deepspeed: ds.json``), is not written; :class:`WriteResult` lists it with what to change by hand.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit.configs.document import Document, KeyPath, load_document
from memfit.configs.result import ImportedRun
from memfit.errors import MemfitError
from memfit.files import check_output, write_atomic

Change = tuple[Any, Any]  # (before, after)
Writes = list[tuple[KeyPath, Any]]
STAGE_NUMBER = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}
LIGER = "axolotl.integrations.liger.LigerPlugin"


@dataclass(frozen=True, kw_only=True, slots=True)
class Edit:
    setting: str
    field: str
    value: Any
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteResult:
    path: Path
    source: Path
    kind: str
    edits: tuple[Edit, ...]
    not_written: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "source": str(self.source), "kind": self.kind,
                "edits": [{"setting": e.setting, "field": e.field, "value": e.value, "reason": e.reason}
                          for e in self.edits], "not_written": list(self.not_written)}


class NotWritable(Exception):
    """This change has no field in this framework (the message says what to do by hand)."""


# ---- what each framework writes for a memfit change ----------------------------------------------------

def _has(doc: Document, *path: str) -> bool:
    node: Any = doc.data
    for p in path:
        if not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    return True


def _get(doc: Document, *path: str) -> Any:
    node: Any = doc.data
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
    return node


def _axolotl(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun) -> Writes:
    simple = {"batch": "micro_batch_size", "grad_accum": "gradient_accumulation_steps", "seq": "sequence_len",
              "rank": "lora_r", "packing": "sample_packing"}
    if name in simple:
        return [((simple[name],), new)]
    if name == "checkpointing":
        if new in ("full", "none"):
            value: Any = new == "full"
            if value and after.get("offload"):
                value = "offload"
            return [(("gradient_checkpointing",), value)]
        raise NotWritable(f"axolotl has no {new} checkpointing: gradient_checkpointing checkpoints every layer")
    if name == "offload" and new and after.get("checkpointing") == "full":
        return [(("gradient_checkpointing",), "offload")]
    if name == "method" and new in ("lora", "qlora"):
        out: Writes = [(("adapter",), new)]
        if new == "qlora" or _has(doc, "load_in_4bit"):
            out.append((("load_in_4bit",), new == "qlora"))
        return out
    if name == "loss" and new == "chunked":
        plugins = _get(doc, "plugins")
        if plugins is None:
            return [(("plugins",), [LIGER]), (("liger_fused_linear_cross_entropy",), True)]
        if LIGER in (plugins or []):
            return [(("liger_fused_linear_cross_entropy",), True)]
        raise NotWritable(f"add {LIGER} to plugins and set liger_fused_linear_cross_entropy: true")
    if name == "attention":
        impl = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}[new]
        legacy = [((flag,), False) for flag in ("xformers_attention", "sage_attention", "flex_attention",
                                                 "flash_attention", "sdp_attention", "eager_attention")
                  if _get(doc, flag)]
        return [*legacy, (("attn_implementation",), impl)]
    if name == "sharding" and isinstance(_get(doc, "fsdp_config"), dict) and new in ("zero2", "zero3"):
        return [(("fsdp_config", "reshard_after_forward"), new == "zero3")]
    raise NotWritable("")


def _trainer(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun, *,
             trl: bool) -> Writes:
    simple = {"batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps"}
    if trl:
        simple.update({"seq": "max_length", "rank": "lora_r", "packing": "packing"})
    if name in simple:
        return [((simple[name],), new)]
    if name == "checkpointing":
        field = "activation_checkpointing" if _has(doc, "activation_checkpointing") or not _has(
            doc, "gradient_checkpointing") and not trl else "gradient_checkpointing"
        if new in ("full", "none"):
            return [((field,), new == "full")]
        if new == "every-k":
            kw = f"{field}_kwargs"
            return [((field,), True), ((kw,), {"every_n_layers": after.get("checkpoint_every", 2)})]
        raise NotWritable(f"the Trainer has no {new} checkpointing")
    if name == "checkpoint_every":
        field = "activation_checkpointing" if _has(doc, "activation_checkpointing") else "gradient_checkpointing"
        return [((f"{field}_kwargs",), {"every_n_layers": new})]
    if name == "loss" and new == "chunked":
        if trl:  # sft_trainer.py: use_liger_kernel keeps TRL's own fused head, Liger's cross-entropy off
            raise NotWritable("TRL 1.16's SFTTrainer computes its loss with its own fused LM head already (memfit's "
                              "loss trl); use_liger_kernel does not switch to Liger's")
        return [(("use_liger_kernel",), True)]
    if trl and name == "method" and new in ("lora", "qlora"):
        out: Writes = [(("use_peft",), True)]
        if new == "qlora" or _has(doc, "load_in_4bit"):
            out.append((("load_in_4bit",), new == "qlora"))
        if new == "qlora":  # TRL's use_bnb_nested_quant defaults to False, memfit's plan says
            out.append((("use_bnb_nested_quant",), bool(after.get("double_quant", True))))
        return out
    if trl and name == "double_quant":
        return [(("use_bnb_nested_quant",), bool(new))]
    if trl and name == "attention":
        return [(("attn_implementation",), {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}[new])]
    if trl and name == "offload" and new:
        return [(("activation_offloading",), True)]
    if trl and name == "offload_activations":
        return [(("activation_offloading",), bool(new))]
    raise NotWritable("")


def trainer_fields(doc: Document, name: str, new: Any, after: Mapping[str, Any], *, trl: bool) -> Writes:
    """A memfit change as ``TrainingArguments`` (``trl=False``) or ``SFTConfig`` fields, ``[]`` when they have no
    field for it (the Trainer callback's plan, :mod:`memfit.integrations.transformers`)."""
    try:
        return _trainer(doc, name, new, after, ImportedRun(files=(), model=None, settings={}, rows=()), trl=trl)
    except NotWritable:
        return []


def _llamafactory(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun) -> Writes:
    simple = {"batch": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq": "cutoff_len", "packing": "packing"}
    if name in simple:
        return [((simple[name],), new)]
    if name == "checkpointing" and new in ("full", "none"):
        return [(("disable_gradient_checkpointing",), new == "none")]
    if name == "rank":
        out: Writes = [(("lora_rank",), new)]
        if not _get(doc, "lora_alpha"):  # LLaMA-Factory would derive 2 x rank: keep the plan's alpha
            out.append((("lora_alpha",), after.get("alpha")))
        return out
    if name == "method" and new == "qlora":
        out = [(("quantization_bit",), 4)]
        if not after.get("double_quant", True):  # LLaMA-Factory's double_quantization defaults to True
            out.append((("double_quantization",), False))
        return out
    if name == "double_quant":
        return [(("double_quantization",), bool(new))]
    if name == "method" and new == "lora":
        return [(("finetuning_type",), "lora")]
    if name == "loss" and new == "chunked":
        return [(("enable_liger_kernel",), True)]
    if name == "attention":
        return [(("flash_attn",), {"sdpa": "sdpa", "eager": "disabled", "flash": "fa2"}[new])]
    raise NotWritable("")


def _torchtune(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun) -> Writes:
    simple: dict[str, KeyPath] = {"batch": ("batch_size",), "grad_accum": ("gradient_accumulation_steps",),
                                  "seq": ("tokenizer", "max_seq_len"), "rank": ("model", "lora_rank"),
                                  "packing": ("dataset", "packed")}
    if name in simple:
        return [(simple[name], new)]
    if name == "checkpointing" and new in ("full", "none"):
        return [(("enable_activation_checkpointing",), new == "full")]
    if name == "offload":
        return [(("enable_activation_offloading",), bool(new))]
    if name == "method" and new == "qlora":
        comp = str(_get(doc, "model", "_component_") or "")
        if ".lora_" in comp:
            return [(("model", "_component_"), comp.replace(".lora_", ".qlora_"))]
    raise NotWritable("")


def _deepspeed(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun) -> Writes:
    if name == "sharding":
        return [(("zero_optimization", "stage"), STAGE_NUMBER[new])]
    simple = {"batch": "train_micro_batch_size_per_gpu", "grad_accum": "gradient_accumulation_steps"}
    if name in simple and _get(doc, simple[name]) != "auto":
        return [((simple[name],), new)]
    raise NotWritable("")


def _peft(doc: Document, name: str, new: Any, after: Mapping[str, Any], imported: ImportedRun) -> Writes:
    if name == "rank":
        return [(("r",), new)]
    raise NotWritable("")


WRITERS: dict[str, Callable[[Document, str, Any, Mapping[str, Any], ImportedRun], Writes]] = {
    "axolotl": _axolotl,
    "trl": lambda d, n, v, a, i: _trainer(d, n, v, a, i, trl=True),
    "hf-trainer": lambda d, n, v, a, i: _trainer(d, n, v, a, i, trl=False),
    "llamafactory": _llamafactory,
    "torchtune": _torchtune,
    "deepspeed": _deepspeed,
    "peft": _peft,
}


# ---- writing -------------------------------------------------------------------------------------------

def write_fixed(source: str | Path, kind: str, changes: Mapping[str, Change], reasons: Mapping[str, str],
                after: Mapping[str, Any], imported: ImportedRun, out: str | Path, *,
                force: bool = False) -> WriteResult:
    """Write ``source`` with ``changes`` (memfit setting -> (before, after)) to ``out`` (module docstring)."""
    target = check_output(out, flag="--write", force=force, example="fixed")
    doc = load_document(source)
    writer = WRITERS.get(kind)
    edits: list[Edit] = []
    skipped: list[str] = []
    for name, (old, new) in changes.items():
        if name == "checkpoint_every" and after.get("checkpointing") != "every-k":
            continue  # k means nothing unless every k-th block is checkpointed
        reason = reasons.get(name, f"{name} {old} -> {new}")
        origin = imported.row_of(name)
        if origin is not None and not origin.default and Path(origin.file) != Path(source):
            skipped.append(f"{name} {old} -> {new}: change {origin.field} in {origin.file}")
            continue
        try:
            if writer is None:
                raise NotWritable("")
            writes = writer(doc, name, new, after, imported)
        except NotWritable as exc:
            skipped.append(f"{name} {old} -> {new}: " + (str(exc) or f"{kind} has no field for it; set it by hand"))
            continue
        edits += [Edit(setting=name, field=".".join(path), value=value, reason=reason) for path, value in writes
                  if not (_has(doc, *path) and _get(doc, *path) == value and type(_get(doc, *path)) is type(value))]
    edits = list({e.field: e for e in edits}.values())
    text = _edit_json(doc, edits) if doc.format == "json" else _edit_yaml(doc, edits)
    write_atomic(target, text, flag="--write", force=force)
    return WriteResult(path=target, source=doc.path, kind=kind, edits=tuple(edits), not_written=tuple(skipped))


def _edit_json(doc: Document, edits: list[Edit]) -> str:
    data = json.loads(doc.text)
    for e in edits:
        node = data
        keys = e.field.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = e.value
    return json.dumps(data, indent=2) + "\n"


_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}


def yaml_scalar(value: Any) -> str:
    """``value`` as YAML flow text that reads back as the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_scalar(str(k))}: {yaml_scalar(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def _edit_yaml(doc: Document, edits: list[Edit]) -> str:
    """Replace values in place and insert missing keys, each with a ``# memfit:`` comment line above it."""
    text = doc.text
    ops: list[tuple[int, int, str]] = []  # (offset, length to delete, text to insert)
    appended: list[str] = []
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for e in edits:
        path = tuple(e.field.split("."))
        comment = f"# memfit: {e.reason}"
        span = doc.spans.get(path)
        if span is not None:
            start = line_starts[span.key_line - 1]
            indent = " " * span.key_column
            ops.append((start, 0, f"{indent}{comment}\n"))
            ops.append((span.start, span.end - span.start, yaml_scalar(e.value)))
            continue
        parent = doc.spans.get(path[:-1]) if len(path) > 1 else None
        if len(path) > 1 and parent is not None:
            if parent.scalar or not parent.block:
                raise MemfitError(f"{doc.where(path[:-1])}: {'.'.join(path[:-1])} is written inline; memfit cannot "
                                  f"add {path[-1]} to it: set {e.field}: {yaml_scalar(e.value)} by hand")
            child_cols = [s.key_column for p, s in doc.spans.items() if len(p) == len(path) and p[:-1] == path[:-1]]
            indent = " " * (child_cols[0] if child_cols else parent.key_column + 2)
            at = parent.end
            prefix = "" if at == 0 or text[at - 1] == "\n" else "\n"
            ops.append((at, 0, f"{prefix}{indent}{comment}\n{indent}{path[-1]}: {yaml_scalar(e.value)}\n"))
            continue
        if len(path) == 1:
            appended.append(f"{comment}\n{path[0]}: {yaml_scalar(e.value)}\n")
        else:
            body = f"{path[0]}:\n"
            for depth, key in enumerate(path[1:], 1):
                body += "  " * depth + (f"{key}: {yaml_scalar(e.value)}\n" if depth == len(path) - 1 else f"{key}:\n")
            appended.append(f"{comment}\n{body}")
    for offset, delete, insert in sorted(ops, key=lambda o: (o[0], o[1]), reverse=True):
        text = text[:offset] + insert + text[offset + delete:]
    if appended:
        if text and not text.endswith("\n"):
            text += "\n"
        text += "".join(appended)
    return text
