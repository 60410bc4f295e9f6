"""What :class:`~memfit.integrations.transformers.MemfitCallback` reads and says: the run of a Trainer's live
objects (:func:`live_spec`), the longest batch its data loader can yield (:func:`longest_batch`), the prediction
(:func:`predict`), ``memfit fit``'s plan in the framework's fields (:func:`plan_lines`) and the likely causes of a
measured peak off the prediction (:func:`diagnose`). Attributes are read; nothing is imported from transformers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate import Category, ModelShape, RunSpec, Target, estimate_memory
from memfit.estimate.budget import MemoryEstimate
from memfit.estimate.trainer import trainer_peak

# ---- the run, from the live objects ---------------------------------------------------------------------------

def unwrap(model: Any) -> Any:
    """The model under accelerate / DDP wrappers (``.module``)."""
    while hasattr(model, "module") and not hasattr(model, "config"):
        model = model.module
    return model


def applied_peft_config(model: Any) -> Any:
    """The PEFT config of the adapter the model actually runs (``PeftModel`` or transformers' ``add_adapter``), or
    None for a model without one."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    if callable(active):
        with contextlib.suppress(Exception):
            active = active()
    if isinstance(active, list | tuple):
        active = active[0] if active else None
    return configs.get(active) if active in configs else next(iter(configs.values()))


def device_of(args: Any) -> str:
    """``"cuda"`` when the Trainer trains on a CUDA device, else ``"cpu"``."""
    dev = getattr(args, "device", None)
    return "cuda" if getattr(dev, "type", str(dev)) == "cuda" else "cpu"


def is_trl_args(args: Any) -> bool:
    return hasattr(args, "max_length") and hasattr(args, "packing")


def uses_trl_head(args: Any) -> bool:
    """TRL's SFTTrainer computes its loss through its fused LM head unless Liger's kernel replaces it (TRL 1.16.0
    ``SFTTrainer.compute_loss``: ``model(**inputs, fused_lm_head=True)`` for ``loss_type`` nll and dft)."""
    return is_trl_args(args) and not getattr(args, "use_liger_kernel", False)


def live_spec(args: Any, model: Any, **overrides: Any) -> RunSpec:
    """The RunSpec of a Trainer's live objects: ``args`` (``TrainingArguments`` or ``SFTConfig``), the model's
    config (dtype loaded, attention kernel in use, quantization) and the PEFT config applied to the model.

    What the Trainer was asked for wins over what the model shows for checkpointing (so a model on which it
    silently stayed off shows as measured > predicted, and :func:`diagnose` names it); ``overrides`` win last.
    TRL's SFTTrainer loss is predicted as ``loss="chunked"`` (module docstring)."""
    model = unwrap(model)
    peft = applied_peft_config(model)
    extra: dict[str, Any] = {"device": device_of(args)}
    if peft is None:
        extra["method"] = "full"  # no adapter applied: every weight trains (RunSpec's default is lora)
    if uses_trl_head(args):
        extra["loss"] = "chunked"
    extra["eval_batch"] = None  # the callback predicts and measures training steps; the evaluation is apart
    if not _asked_checkpointing(args) and _model_checkpointing(model):
        extra["checkpointing"] = "full"  # the user enabled it on the model, outside the Trainer
    extra.update(overrides)
    spec = RunSpec.from_training_args(args, model.config, peft, **extra)
    return spec


def _asked_checkpointing(args: Any) -> bool:
    return bool(getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", None))


def _model_checkpointing(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return any(getattr(m, "gradient_checkpointing", False) is True for m in base.modules())


def config_dict(model: Any) -> dict[str, Any]:
    """The model's config as the dict memfit's estimate reads."""
    cfg = unwrap(model).config
    d: dict[str, Any] = cfg.to_dict()
    d.pop("quantization_config", None)
    return d


# ---- the longest batch --------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class BatchShape:
    """A micro-batch's shape as the model sees it: ``batch`` rows of ``seq`` tokens; ``padding_mask`` when an
    attention mask with masked positions reaches the attention (padding, or packed sequences kept apart);
    ``how`` says where it came from."""

    batch: int
    seq: int
    padding_mask: bool
    how: str


def _collator_of(dataloader: Any) -> Any:
    return getattr(dataloader, "collate_fn", None)


MAX_ITEMS_READ = 10_000  # a map-style dataset that is not a datasets.Dataset is read item by item up to this


def example_lengths(dataset: Any) -> list[int] | None:
    """Token counts of the dataset's examples (its ``input_ids``), or None when they cannot be read without
    running the data pipeline (an iterable dataset, no ``input_ids``, a map-style dataset of more than
    ``MAX_ITEMS_READ`` items that is not a ``datasets.Dataset``). A ``datasets.Dataset`` is read from its Arrow
    column (list lengths, the selection's indices applied), not row by row."""
    if dataset is None or not hasattr(dataset, "__len__"):
        return None
    names = getattr(dataset, "column_names", None)
    if names is not None:
        if "input_ids" not in names:
            return None
        arrow = _arrow_lengths(dataset)
        return arrow if arrow is not None else [len(x) for x in dataset["input_ids"]]
    if len(dataset) > MAX_ITEMS_READ:
        return None
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        ids = item.get("input_ids") if isinstance(item, dict) else None
        if ids is None:
            return None
        out.append(len(ids))
    return out


def _arrow_lengths(dataset: Any) -> list[int] | None:
    try:
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        lengths = pc.list_value_length(dataset.data.column("input_ids"))
        indices = getattr(dataset, "_indices", None)
        if indices is not None:
            lengths = lengths.take(indices.column(0))
        return [int(n) for n in lengths.to_pylist()]
    except Exception:  # not an Arrow-backed dataset after all: read it row by row
        return None


def longest_batch(args: Any, dataloader: Any, *, max_positions: int | None = None) -> BatchShape:
    """The largest micro-batch ``dataloader`` can yield, from its dataset's lengths and its collator.

    - padding-free (TRL ``padding_free`` / BFD packing, transformers ``DataCollatorWithFlattening``): one row of
      the ``b`` longest examples (packed rows) end to end, sequences kept apart by their position ids;
    - a collator padding to ``max_length`` (``padding="max_length"``): ``b x max_length``;
    - otherwise padding to the longest example of the batch: ``b x`` the longest example (rounded up to
      ``pad_to_multiple_of``); with packing every row is a full one, the longest packed row.

    Without readable lengths (an iterable dataset): ``b x max_length`` (TRL) or the model's positions, said in
    ``how``."""
    b = int(getattr(args, "per_device_train_batch_size", 1) or 1)
    dataset = getattr(dataloader, "dataset", None)
    collator = _collator_of(dataloader)
    lengths = example_lengths(dataset)
    cap = getattr(args, "max_length", None) if is_trl_args(args) else None
    padding_free = bool(getattr(collator, "padding_free", False)) or type(collator).__name__ == \
        "DataCollatorWithFlattening"
    multiple = getattr(collator, "pad_to_multiple_of", None)
    if lengths is None or not lengths:
        seq = cap or max_positions
        if not seq:
            raise MemfitError("memfit cannot tell the longest batch: the dataset has no input_ids column to read "
                              "and neither max_length nor the model's max_position_embeddings is set")
        how = f"{b} x {seq} ({'max_length' if cap else 'max_position_embeddings'}: the dataset's lengths are not " \
              "readable before training)"
        return BatchShape(batch=b, seq=_round_up(seq, multiple), padding_mask=b > 1, how=how)
    longest = sorted(lengths, reverse=True)
    if padding_free:
        rows = longest[:b]
        return BatchShape(batch=1, seq=_round_up(sum(rows), multiple), padding_mask=len(rows) > 1 or _packed(dataset),
                          how=f"padding-free: the {len(rows)} longest rows end to end, 1 x {sum(rows)} tokens")
    if getattr(collator, "padding", None) == "max_length" and getattr(collator, "max_length", None):
        seq = int(collator.max_length)
        return BatchShape(batch=b, seq=seq, padding_mask=min(lengths) < seq,
                          how=f"padded to max_length: {b} x {seq}")
    seq = _round_up(longest[0], multiple)
    varied = (b > 1 and longest[0] != longest[-1]) or seq != longest[0]
    label = "packed rows" if getattr(args, "packing", False) else "the longest example"
    return BatchShape(batch=b, seq=seq, padding_mask=varied,
                      how=f"{label} ({longest[0]} tokens) x micro-batch {b}" + (
                          f", padded to a multiple of {multiple}" if seq != longest[0] else ""))


def _packed(dataset: Any) -> bool:
    names = getattr(dataset, "column_names", None) or ()
    return "seq_lengths" in names


def _round_up(n: int, multiple: Any) -> int:
    return -(-n // int(multiple)) * int(multiple) if isinstance(multiple, int) and multiple > 1 else n


# ---- the prediction ------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    """The estimate of one step for a batch shape, as the Trainer runs it."""

    spec: RunSpec
    shape: BatchShape
    peak_bytes: int
    reserved_bytes: int
    peak_moment: str
    components: dict[Category, int]
    estimate: MemoryEstimate

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.shape.batch, "seq": self.shape.seq, "padding_mask": self.shape.padding_mask,
                "how": self.shape.how, "peak_bytes": self.peak_bytes, "reserved_bytes": self.reserved_bytes,
                "peak_moment": self.peak_moment, "spec": self.spec.to_dict(),
                "components": {str(k): v for k, v in self.components.items()}}


def predict(config: dict[str, Any], spec: RunSpec, shape: BatchShape, *, fused_optimizer: bool = False,
            trl_head: bool = False) -> Prediction:
    """The estimate for ``shape`` (its batch, seq and mask), as the Trainer runs the step
    (:func:`memfit.estimate.trainer.trainer_peak`: the fused AdamW kernel's missing temporaries, TRL's fused head)."""
    from memfit.estimate.budget import replayed_reserved_bytes
    from memfit.estimate.fits import reserved_bytes

    run = spec.with_(batch=shape.batch, seq=shape.seq, padding_mask=shape.padding_mask)
    est = estimate_memory(ModelShape.from_hf_config(config), run)
    top = trainer_peak(est, fused_optimizer=fused_optimizer, trl_head=trl_head)
    # CUDA: the caching-allocator replay of the estimate's sequence, with the Trainer's extra bytes as allocated
    reserved = (reserved_bytes(top.peak_bytes, run.device) if est.allocator is None
                else replayed_reserved_bytes(top.peak_bytes, est.allocator))
    return Prediction(spec=run, shape=shape, peak_bytes=top.peak_bytes, reserved_bytes=reserved,
                      peak_moment=top.moment,
                      components=top.components, estimate=est)


def optimizer_is_fused(optimizer: Any) -> bool:
    """Whether the (possibly accelerate-wrapped) torch optimizer runs its fused kernel."""
    inner = getattr(optimizer, "optimizer", optimizer)
    defaults = getattr(inner, "defaults", None)
    return bool(isinstance(defaults, dict) and defaults.get("fused"))


# ---- the plan in the framework's terms -------------------------------------------------------------------------

ARGS_SETTINGS = ("batch", "grad_accum", "seq", "packing", "checkpointing", "checkpoint_every", "loss", "offload")


def framework_fields(args: Any, name: str, old: Any, new: Any, after: dict[str, Any]) -> str:
    """One memfit change (``checkpointing none -> full``) as what to set in the Trainer's / TRL's terms: a
    ``TrainingArguments`` / ``SFTConfig`` field where one exists (:func:`memfit.configs.write.trainer_fields`, the
    fields ``memfit fit --write`` edits), else the Python call that makes the change (the adapter, its rank, the
    quantization and the attention kernel are set on the model, not in the arguments)."""
    from pathlib import Path

    from memfit.configs.document import Document
    from memfit.configs.write import trainer_fields

    trl = is_trl_args(args)
    if name in ARGS_SETTINGS:
        data = {k: getattr(args, k) for k in ("activation_checkpointing", "gradient_checkpointing") if
                getattr(args, k, None) is not None}
        doc = Document(path=Path(f"<{type(args).__name__}>"), text="", format="json", data=data)
        writes = trainer_fields(doc, name, new, after, trl=trl)
        if writes:
            return ", ".join(f"{'.'.join(path)}={value!r}" for path, value in writes)
    rank = after.get("rank", 16)
    if name == "method" and new == "lora":
        if trl:
            return f"pass peft_config=LoraConfig(r={rank}) to SFTTrainer (trl sft: use_peft: true, lora_r: {rank})"
        return f"train a LoRA adapter: model = peft.get_peft_model(model, LoraConfig(r={rank}))"
    if name == "method" and new == "qlora":
        return ("load the base in 4 bit, from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit="
                f"True)), and train a LoRA adapter, LoraConfig(r={rank})")
    if name == "rank":
        return f"LoraConfig(r={new})"
    if name == "double_quant":
        return f"BitsAndBytesConfig(bnb_4bit_use_double_quant={bool(new)})"
    if name == "attention":
        kernel = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}.get(str(new), str(new))
        return f"from_pretrained(..., attn_implementation={kernel!r})"
    if name == "seq":
        return f"truncate the examples to {new} tokens (the tokenizer's max_length)"
    if name == "packing":
        return "pack the examples into full rows (TRL: SFTConfig(packing=True))"
    return f"{name} {old} -> {new} (memfit's setting)"


def plan_lines(args: Any, config: dict[str, Any], prediction: Prediction, target: Target) -> list[str]:
    """``memfit fit``'s ordered plan, each step in the framework's fields."""
    from memfit.advise import fit
    from memfit.advise.search import setup_changes

    report = fit(ModelShape.from_hf_config(config), prediction.spec, target, search=False)
    lines = []
    previous = report.initial
    for step in report.steps:
        changes = setup_changes(previous, step.setup)
        after = step.setup.spec.to_dict()
        fields = "; ".join(framework_fields(args, k, v[0], v[1], after) for k, v in changes.items())
        lines.append(f"  {step.action}: {fields} -> peak {gib(step.peak_bytes)}, "
                     f"{'fits' if step.fits else 'does not fit yet'}")
        previous = step.setup
    if not lines:
        lines.append("  no remedy of memfit fit makes this step fit: a larger GPU, or shard the model states over "
                     "several (fsdp / deepspeed)")
    elif not report.steps[-1].fits:
        lines.append("  still does not fit after every remedy: a larger GPU, or shard the model states")
    return lines


# ---- diagnosis ---------------------------------------------------------------------------------------------

def diagnose(model: Any, args: Any, prediction: Prediction, measured_peak: int,
             measured_by_category: dict[Category, int] | None = None) -> list[str]:
    """Likely causes of a measured peak that differs from the prediction, most likely first: checks of the live
    model against the run predicted (trainable parameters, checkpointing, quantization, reentrant checkpointing
    without input gradients), then the categories that differ most (CPU tracker).

    ``use_cache`` is not one: transformers 5.24.0 drops the cache in checkpointed layers
    (``modeling_layers.py``), and without checkpointing the cache holds the very keys and values autograd saves
    (a LoRA step measures 2,177,404 B with ``use_cache`` on and off)."""
    model = unwrap(model)
    spec = prediction.spec
    est = prediction.estimate
    causes: list[str] = []
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    expected = est.model_states.trainable_params
    if trainable > expected * 1.01 + 16:
        causes.append(f"gradients present on frozen parameters: is requires_grad set on the base? {trainable:,} "
                      f"parameters train where the {spec.method} run trains {expected:,}")
    elif trainable < expected * 0.99 - 16:
        causes.append(f"fewer parameters train than predicted ({trainable:,} vs {expected:,}): check the adapter's "
                      "target modules")
    if spec.checkpointing != "none" and not _model_checkpointing(model):
        causes.append("checkpointing requested (gradient_checkpointing=True) but off on the model: every block keeps "
                      "its activations (does the model support it? was it disabled after the Trainer enabled it?)")
    if spec.checkpointing != "none" and _reentrant(model) and not _input_grads(model):
        causes.append("reentrant checkpointing (use_reentrant=True) without input gradients: the checkpointed blocks "
                      "run without autograd and the adapters get no gradient (call model.enable_input_require_grads() "
                      "or use use_reentrant=False)")
    quant = getattr(getattr(model, "config", None), "quantization_config", None)
    if quant is not None and not any("4bit" in type(m).__name__ or "8bit" in type(m).__name__
                                     for m in model.modules()):
        causes.append("the config names a quantization but no layer is quantised: the base weights are full size")
    if measured_by_category:
        deltas = sorted(((measured_by_category.get(c, 0) - prediction.components.get(c, 0), c)
                         for c in set(measured_by_category) | set(prediction.components)),
                        key=lambda t: -abs(t[0]))
        for delta, cat in deltas[:2]:
            if abs(delta) > 0.02 * max(1, prediction.peak_bytes):
                causes.append(f"{cat}: measured {delta:+,} B against the prediction at the peak")
    if not causes:
        causes.append("no configuration check failed; the difference is the step itself: compare with "
                      f"`memfit measure --trainer {'trl' if is_trl_args(args) else 'hf'}`")
    return causes


def _reentrant(model: Any) -> bool:
    for m in model.modules():
        func = getattr(m, "_gradient_checkpointing_func", None)
        if getattr(m, "gradient_checkpointing", False) and func is not None:
            return bool(getattr(func, "keywords", {}).get("use_reentrant", False))
    return False


def _input_grads(model: Any) -> bool:
    return any(getattr(m, "_require_grads_hook", None) is not None for m in model.modules())


def describe(spec: RunSpec) -> str:
    """``lora, r8, fp32, adamw, checkpointing none, sdpa, loss standard, cpu``."""
    parts: list[str] = [spec.method]
    if spec.is_adapter:
        parts.append(f"r{spec.rank}" + (" dora" if spec.use_dora else ""))
    parts += [spec.precision, spec.optimizer, f"checkpointing {spec.checkpointing}", spec.attention,
              f"loss {spec.loss}", spec.device]
    return ", ".join(parts)


def gib(n: int) -> str:
    return f"{n / 1024**3:.3f} GiB"
