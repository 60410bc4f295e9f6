"""torchtune recipe YAML (torchtune 0.6.1: the top-level keys of the shipped ``recipes/configs`` and the keys
the recipes read; the model builders of ``torchtune/models/*/_model_builders.py``).

Its rules, read in its source (the issue's claims checked):

- ``tokenizer.max_seq_len: null`` means no truncation (``modules/transforms/tokenizers/_utils.py:170``)
  and the collator pads each batch to its longest example: the longest example sets the peak --
  confirmed; memfit then needs ``--seq`` (that example's tokens) or ``--data``.
- A model component is a builder: ``lora_llama3_1_8b`` (``qlora_*`` = the same with ``quantize_base=True``,
  torchao NF4 with its scalers quantised too). Module names map to Hugging Face's
  (``models/convert_weights.py:32-43``): ``q_proj/k_proj/v_proj`` as is, ``output_proj`` -> ``o_proj``,
  ``w1`` -> ``gate_proj``, ``w3`` -> ``up_proj``, ``w2`` -> ``down_proj``, ``output`` -> ``lm_head`` -- confirmed
  (the issue's ``w1/w2/w3 -> gate/down/up`` holds). ``apply_lora_to_mlp`` adds w1, w2, w3;
  ``apply_lora_to_output`` the output head.
- ``dtype`` (bf16 / fp32; None = fp32, ``training/precision.py:101``): the whole model, LoRA adapter
  included, is built in it (``training.set_default_dtype``): no autocast. memfit models PEFT's fp32
  adapter, so a bf16 torchtune adapter and its AdamW states take half what memfit counts for them.
- ``enable_activation_checkpointing`` and ``enable_activation_offloading`` default to False
  (``recipes/lora_finetune_single_device.py:161-165``); the distributed full recipe's ``ac_mode: selective``
  with an integer ``ac_option`` k checkpoints every k-th layer; ``fsdp_reshard_after_forward`` True (FSDP2
  full shard), ``fsdp_cpu_offload`` False.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from memfit.configs.document import Document
from memfit.configs.reading import FileReading, Reader
from memfit.configs.schema import FieldSpec, Schema, load_schema
from memfit.errors import MemfitError

HF_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj",
            "w1": "gate_proj", "w3": "up_proj", "w2": "down_proj", "output": "lm_head"}
# builder (without lora_/qlora_) -> memfit catalogue name, when the checkpoint dir has no config.json
CATALOGUE = {"llama2_7b": "llama-2-7b", "llama3_1_8b": "llama-3.1-8b", "llama3_1_70b": "llama-3.1-70b",
             "llama3_3_70b": "llama-3.1-70b", "llama3_2_1b": "llama-3.2-1b", "llama3_2_3b": "llama-3.2-3b",
             "mistral_7b": "mistral-7b", "qwen2_5_0_5b": "qwen2.5-0.5b", "qwen2_5_1_5b_base": "qwen2.5-1.5b",
             "qwen2_5_1_5b_instruct": "qwen2.5-1.5b", "qwen2_5_7b_base": "qwen2.5-7b",
             "qwen2_5_7b_instruct": "qwen2.5-7b", "gemma2_2b": "gemma-2-2b", "gemma2_9b": "gemma-2-9b",
             "phi3_mini": "phi-3-mini"}
DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}
OPTIMIZERS = {"torch.optim.AdamW": "adamw", "torch.optim.Adam": "adamw", "bitsandbytes.optim.AdamW8bit": "adamw-8bit",
              "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit",
              "bitsandbytes.optim.PagedAdamW": "paged-adamw-32bit",
              "torchao.optim.AdamW8bit": "adamw-8bit", "torchao.prototype.low_bit_optim.AdamW8bit": "adamw-8bit",
              "torch.optim.SGD": "sgd"}
CHUNKED_LOSS = "torchtune.modules.loss.CEWithChunkedOutputLoss"

# the keys memfit reads, typed from the recipes' reads (cfg.get defaults in recipes/*.py)
_TYPED: dict[str, tuple[str, frozenset[str], Any]] = {
    "batch_size": ("int", frozenset({"int"}), None),
    "gradient_accumulation_steps": ("int", frozenset({"int"}), None),
    "epochs": ("int", frozenset({"int"}), None),
    "enable_activation_checkpointing": ("bool", frozenset({"bool"}), False),
    "enable_activation_offloading": ("bool", frozenset({"bool"}), False),
    "compile": ("bool", frozenset({"bool", "dict"}), False),
    "device": ("str", frozenset({"str"}), "cuda"),
    "fsdp_cpu_offload": ("bool", frozenset({"bool"}), False),
    "fsdp_reshard_after_forward": ("bool", frozenset({"bool"}), True),
    "optimizer_in_bwd": ("bool", frozenset({"bool"}), False),
    "model": ("component", frozenset({"dict"}), None),
    "tokenizer": ("component", frozenset({"dict"}), None),
    "dataset": ("component", frozenset({"dict", "list"}), None),
    "optimizer": ("component", frozenset({"dict"}), None),
    "loss": ("component", frozenset({"dict"}), None),
    "checkpointer": ("component", frozenset({"dict"}), None),
}


@cache
def schema() -> Schema:
    """The generated key table, with the types of the keys memfit reads."""
    base = load_schema("torchtune")
    fields = dict(base.fields)
    for name, (typ, kinds, default) in _TYPED.items():
        spec = fields[name]
        fields[name] = replace(spec, type=typ, kinds=kinds, default=default, has_default=default is not None)
    fields["dtype"] = replace(fields["dtype"], type="str", kinds=frozenset({"null"}), choices=("bf16", "fp32", "fp16"))
    return replace(base, fields=fields)


def builder(component: str) -> tuple[str, dict[str, Any]]:
    """(the builder function's name, its arguments with the partial's settings) for a model component."""
    builders = schema().extra["builders"]
    seen = set()
    name, preset = component, dict[str, Any]()
    while name in builders and name not in seen:
        seen.add(name)
        entry = builders[name]
        if "alias_of" in entry:
            name = entry["alias_of"]
        elif "partial_of" in entry:
            preset = {**entry["set"], **preset}
            name = entry["partial_of"]
        else:
            args = {k: v for k, v in entry["args"].items() if not isinstance(v, dict)}
            return name.rsplit(".", 1)[1], {**args, **preset}
    raise KeyError(component)


def read_torchtune(doc: Document) -> FileReading:
    r = Reader(doc, "torchtune", schema(), label="torchtune")
    _model(r)
    tok = r.get("tokenizer") or {}
    r.claim("tokenizer")
    if "max_seq_len" in tok and tok["max_seq_len"] is not None:
        r.set("seq", _int(r, "tokenizer.max_seq_len", tok["max_seq_len"]), "tokenizer.max_seq_len")
    else:
        r.row("tokenizer.max_seq_len" if "max_seq_len" in tok else "tokenizer", "NOT MODELLED",
               value=tok.get("max_seq_len"), note="null: no truncation, the collator pads to the batch's longest "
               "example, which sets the peak; pass --seq (its tokens)")
        r.also("seq_unbounded", True)
    ds = r.get("dataset")
    packed = any(isinstance(d, dict) and d.get("packed") for d in (ds if isinstance(ds, list) else [ds]))
    r.claim("dataset")
    if packed:
        r.set("packing", True, "dataset.packed" if isinstance(ds, dict) else "dataset",
              note="rows of max_seq_len tokens")
    r.set("batch", r.get("batch_size"), "batch_size")
    if r.has("gradient_accumulation_steps"):
        r.set("grad_accum", r.get("gradient_accumulation_steps"), "gradient_accumulation_steps")
    dtype = r.get("dtype")
    r.set("weights_dtype", DTYPES.get(str(dtype), "float32"), "dtype",
          note="the whole model and its LoRA adapter in this dtype (set_default_dtype), no autocast")
    r.also("autocast", "none")
    r.also("trainable_fp32", False)
    if r.has("device"):
        r.set("device", "cpu" if str(r.get("device")).startswith("cpu") else "cuda", "device")
    _checkpointing(r)
    _optimizer(r)
    _loss(r)
    r.not_modelled("compile", "torch.compile changes which activations are saved; memfit models eager")
    r.not_modelled("optimizer_in_bwd", "the optimizer steps inside the backward, freeing each gradient")
    r.not_modelled("tensor_parallel_dim", "tensor parallelism", active=lambda v: isinstance(v, int) and v > 1)
    if r.has("fsdp_reshard_after_forward") or r.has("fsdp_cpu_offload"):
        r.set("sharding", "zero3" if r.get("fsdp_reshard_after_forward") else "zero2", "fsdp_reshard_after_forward",
              note="a distributed recipe: FSDP2 over the processes of tune run --nproc_per_node")
        if r.get("fsdp_cpu_offload"):
            r.set("offload_params", True, "fsdp_cpu_offload")
    return r.finish()



def _int(r: Reader, field: str, value: Any) -> int:
    out = FieldSpec(name=field, type="int", kinds=frozenset({"int"})).coerce(value)
    if not isinstance(out, int):
        raise MemfitError(f"{r.doc.where(tuple(field.split('.')))}: {field} must be an int (torchtune 0.6.1); "
                          f"got {value!r}")
    return out


def _model(r: Reader) -> None:
    model = r.get("model")
    if not isinstance(model, dict) or "_component_" not in model:
        raise MemfitError(f"{r.doc.where('model')}: a torchtune config needs model: {{_component_: ...}}")
    r.claim("model")
    component = str(model["_component_"])
    try:
        fn, args = builder(component)
    except KeyError:
        r.row("model._component_", "NOT MODELLED", value=component,
               note="not a torchtune 0.6.1 model builder: pass MODEL (a config.json) to memfit")
        _checkpoint_dir(r, None)
        return
    known = set(schema().extra["builders"][_base_builder(component)]["args"]) | {"_component_"}
    for key in model:
        if key not in known:
            raise MemfitError(f"{r.doc.where(('model', str(key)))}: unknown argument {key!r} of {component} "
                              f"(torchtune 0.6.1 builder {fn}): it takes {', '.join(sorted(known - {'_component_'}))}")
    args = {**args, **{k: v for k, v in model.items() if k != "_component_"}}
    lora = fn.startswith("lora_")
    arch = fn[5:] if lora else fn
    r.row("model._component_", "setting", setting="adapter", memfit_value="lora" if lora else "none",
           value=component, note=f"builder {fn}" + (" (quantize_base)" if args.get("quantize_base") else ""))
    r.also("adapter", "lora" if lora else "none")
    if lora:
        _lora(r, arch, args)
    _checkpoint_dir(r, arch)


def _base_builder(component: str) -> str:
    builders = schema().extra["builders"]
    name = component
    while "partial_of" in builders[name] or "alias_of" in builders[name]:
        name = builders[name].get("partial_of") or builders[name]["alias_of"]
    return str(name)


def _lora(r: Reader, arch: str, args: dict[str, Any]) -> None:
    def put(setting: str, value: Any, key: str) -> None:
        field = f"model.{key}"
        r.out.rows.append(_row(r, field, args.get(key), setting, value, default=key not in (r.get("model") or {})))
        r.also(setting, value)

    put("rank", int(args.get("lora_rank", 8)), "lora_rank")
    put("alpha", int(args.get("lora_alpha", 16)), "lora_alpha")
    put("lora_dropout", float(args.get("lora_dropout", 0.0)), "lora_dropout")
    modules = [HF_NAMES.get(m, m) for m in args.get("lora_attn_modules") or []]
    if args.get("apply_lora_to_mlp"):
        modules += ["gate_proj", "up_proj", "down_proj"]
    if args.get("apply_lora_to_output"):
        modules += ["lm_head"]
    if arch.startswith("phi3"):  # HF phi3 fuses q/k/v and gate/up (qkv_proj, gate_up_proj)
        fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
                 "up_proj": "gate_up_proj"}
        modules = [fused.get(m, m) for m in modules]
    targets = tuple(dict.fromkeys(modules))
    put("targets", targets, "lora_attn_modules")
    if args.get("quantize_base"):
        put("quantization", "nf4", "quantize_base")
        if "quantize_base" not in (r.get("model") or {}):
            from dataclasses import replace as _replace

            r.out.rows[-1] = _replace(r.out.rows[-1], note="qlora_ builder: quantize_base=True (torchao NF4, "
                                                           "scalers quantised too)")
        r.also("double_quant", True)
    if args.get("use_dora"):
        r.out.rows.append(_row(r, "model.use_dora", True, None, None, status="NOT MODELLED",
                               note="DoRA's magnitude vectors and norm activations"))


def _row(r: Reader, field: str, value: Any, setting: str | None, memfit_value: Any, *, default: bool = False,
         status: str = "setting", note: str = "") -> Any:
    from memfit.configs.result import ConfigRow

    return ConfigRow(file=str(r.doc.path), line=None if default else r.doc.line(tuple(field.split("."))),
                     field=field, value=value, setting=setting, status=status,  # type: ignore[arg-type]
                     memfit_value=memfit_value, note=note or ("torchtune 0.6.1 builder default" if default else ""),
                     default=default)


def _checkpoint_dir(r: Reader, arch: str | None) -> None:
    """checkpointer.checkpoint_dir with a config.json names the model; else the builder's catalogue entry."""
    ck = r.get("checkpointer") or {}
    r.claim("checkpointer")
    folder = ck.get("checkpoint_dir") if isinstance(ck, dict) else None
    if isinstance(folder, str) and folder:
        p = Path(folder) if Path(folder).is_absolute() else r.doc.path.parent / folder
        if (p / "config.json").is_file():
            from memfit.configs.result import ModelRef

            r.out.model = ModelRef(value=str(p), file=str(r.doc.path), line=r.line("checkpointer.checkpoint_dir"),
                                   field="checkpointer.checkpoint_dir")
            r.out.rows.append(_row(r, "checkpointer.checkpoint_dir", folder, "model", str(p)))
            return
    name = CATALOGUE.get(arch or "")
    if name is not None:
        from memfit.configs.result import ModelRef

        r.out.model = ModelRef(value=name, file=str(r.doc.path), line=r.line("model._component_"),
                               field="model._component_")
        r.out.rows.append(_row(r, "model._component_", (r.get("model") or {}).get("_component_"), "model", name,
                               note=f"catalogue entry for {arch} (no config.json in checkpointer.checkpoint_dir)"))


def _checkpointing(r: Reader) -> None:
    mode = r.get("ac_mode")
    option = r.get("ac_option")
    if not r.get("enable_activation_checkpointing") and mode == "selective":
        if isinstance(option, int) and not isinstance(option, bool):
            r.set("checkpointing", "every-k" if option > 1 else "full", "ac_mode", "ac_option")
            if option > 1:
                r.also("checkpoint_every", option)
        else:
            r.not_modelled("ac_option", f"selective op checkpointing ({option!r})", active=lambda v: True)
    else:
        r.set("checkpointing", "full" if r.get("enable_activation_checkpointing") else "none",
              "enable_activation_checkpointing")
        r.claim("ac_mode", "ac_option")
    if r.get("enable_activation_offloading"):
        r.set("offload", True, "enable_activation_offloading", note="checkpointed blocks' inputs on the CPU")
    else:
        r.ignore("enable_activation_offloading", "off")


def _optimizer(r: Reader) -> None:
    opt = r.get("optimizer")
    r.claim("optimizer")
    if not isinstance(opt, dict) or "_component_" not in opt:
        return
    comp = str(opt["_component_"])
    name = OPTIMIZERS.get(comp)
    if name == "sgd" and float(opt.get("momentum", 0) or 0) > 0:
        name = "sgd-momentum"
    if name is None:
        r.row("optimizer._component_", "NOT MODELLED", value=comp,
               note="memfit models AdamW (torch, bitsandbytes 8-bit, torchao 8-bit) and SGD")
        return
    r.row("optimizer._component_", "setting", setting="optimizer", memfit_value=name, value=comp,
           note="fused=True" if opt.get("fused") else "")
    r.also("optimizer", name)
    if name == "adamw" and comp.startswith("torch.optim."):  # torch's default without fused=True: for-each on CUDA
        r.also("adamw_impl", "fused" if opt.get("fused") else "foreach")
    r.also("optimizer_impl", comp + (" (fused)" if opt.get("fused") else ""))


def _loss(r: Reader) -> None:
    loss = r.get("loss")
    r.claim("loss")
    if not isinstance(loss, dict):
        return
    comp = str(loss.get("_component_"))
    if comp == CHUNKED_LOSS:
        r.row("loss._component_", "NOT MODELLED", value=comp,
               note="the output projection in 8 chunks: bf16 logits kept, fp32 upcast one chunk at a time; memfit "
                    "keeps loss=standard (full fp32 logits): an over-estimate of the logits")
    elif comp in ("torch.nn.CrossEntropyLoss", "torchtune.modules.loss.CrossEntropyLoss"):
        r.row("loss._component_", "setting", setting="loss", memfit_value="standard", value=comp)
        r.also("loss", "standard")
    else:
        r.row("loss._component_", "NOT MODELLED", value=comp, note="a loss memfit does not know")
