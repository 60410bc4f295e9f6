"""memfit inside the training run: :class:`MemfitCallback`, a ``transformers.TrainerCallback``.

It works wherever the Hugging Face Trainer runs (TRL's ``SFTTrainer``, axolotl and LLaMA-Factory build on
it)::

    from memfit.integrations.transformers import MemfitCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MemfitCallback(gpu="24GiB")])

What it does (transformers 5.24.0 ``Trainer._inner_training_loop``; TRL 1.16.0):

``on_train_begin`` (after the Trainer applied checkpointing and built the optimizer, before the data loader
yields its first batch): the :class:`~memfit.estimate.spec.RunSpec` of the live objects
(:meth:`RunSpec.from_training_args <memfit.estimate.spec.RunSpec.from_training_args>` on the
``TrainingArguments`` / ``SFTConfig``, the model's config with the dtype it was loaded in, the attention kernel
in use and its quantization config, and the PEFT config actually applied to the model), and the peak of the
*longest* batch the data loader can yield (:func:`longest_batch`: with packing or padding-free, full rows;
with padding, the longest example times the micro-batch). With a GPU (``gpu="24GiB"``, or the CUDA device's
own size) it judges the fit by the rule ``memfit estimate --gpu`` prints; if the run does not fit it logs the
``memfit fit`` plan in the framework's own fields (``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``gradient_checkpointing``, ...) and, with ``stop_if_oom=True``, raises
:class:`WouldNotFit` (a :class:`~memfit.errors.MemfitError`) before the first step.

The first ``measure_steps`` optimizer steps (default 2: the first allocates the optimizer state, the second
is a steady step): on CUDA ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` (peak statistics
reset at ``on_train_begin``); on the CPU, with ``measure_cpu=True`` (it slows those steps), memfit's
live-storage tracker (:class:`~memfit.runtime.tracker.LiveTensorTracker`), entered at ``on_step_begin`` and left
at ``on_step_end`` with the same phases as memfit's own loop (forward / backward / optimizer), the batch
counted from the model's forward. Then it logs, through the Trainer's ``log`` (so they reach the console,
TensorBoard / W&B and ``trainer.state.log_history``), ``memfit/predicted_peak_bytes`` (the prediction for the
largest batch actually seen), ``memfit/measured_peak_bytes`` and ``memfit/ratio`` (measured / predicted), and
warns when they differ by more than ``tolerance`` (10%), naming the likely cause (:func:`diagnose`).

Modelled differences between the Trainer's step and memfit's estimate:

- ``optim="adamw_torch_fused"`` (the Trainer's default on torch >= 2.8): the fused kernel allocates no
  temporaries at the optimizer step; the estimate's optimizer moment models torch's for-each / for-loop
  AdamW, so the callback removes that moment's temporaries when the live optimizer is fused.
- ``gradient_accumulation_steps`` > 1: from the second micro-batch on, the accumulated gradients stay allocated
  through the forward and the backward; memfit's estimate (``memfit estimate``) does not count them yet, so the
  callback adds them to those moments.
- TRL 1.16's ``SFTTrainer`` computes its loss through a fused LM head (``trl.trainer.utils.add_fused_lm_head``:
  a chunked log-probability kernel that never holds the (b, s, V) logits); memfit predicts it with
  ``loss="chunked"`` (no logits held). The kernel's chunk (up to 4096 tokens x its vocabulary tile) is not
  Liger's: on a large vocabulary the transient at the loss differs (see the README's agreement figures).

Nothing of this module is imported by ``import memfit``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from memfit.errors import MemfitError
from memfit.estimate import Category, ModelShape, RunSpec, Target, estimate_memory
from memfit.estimate.budget import MemoryEstimate

logger = logging.getLogger("memfit")

__all__ = ["BatchShape", "MemfitCallback", "Prediction", "WouldNotFit", "diagnose", "live_spec", "longest_batch",
           "predict"]

TOLERANCE = 0.10


class WouldNotFit(MemfitError):
    """Raised from ``on_train_begin`` with ``stop_if_oom=True`` when the longest batch's step does not fit the
    GPU; ``message`` holds the verdict and the plan, ``prediction`` the numbers."""

    def __init__(self, message: str, prediction: Prediction) -> None:
        super().__init__(message)
        self.prediction = prediction


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


TRL_TOKEN_CHUNK = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE (TRL 1.16.0)
TRL_VOCAB_CHUNK = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE (TRL 1.16.0)
TRL_TILE_BYTES = 29  # bytes per (token, vocabulary) element alive at the widest line of _backward_tile


def trl_head_bytes(*, tokens: int, vocab: int, hidden: int, weight_itemsize: int, compute_itemsize: int,
                   head_trained: bool = False) -> int:
    """What TRL 1.16's fused LM head (``_ChunkedLogProbFunction``, torch path) holds at its widest moment, the
    backward of one tile, for ``tokens`` scored positions (b*(s-1): the torch path scores every position); the
    last hidden state and the head's weight are in the weights' dtype (fp32 under mixed precision), the tiles
    in the compute dtype:

    - saved by the forward: the hidden states ``N*h`` (a copy: ``hidden_states[:, :-1]`` is reshaped), the
      clamped targets ``N*8``, ``log_z`` and ``entropy`` ``2*N*4``; the incoming gradient ``N*4``;
    - the fp32 accumulators ``grad_hidden`` ``N*h*4`` and, when the head trains, ``grad_weight`` ``V*h*4``;
    - under mixed precision the casts ``hidden[chunk].to(compute)`` (``n*h``) and ``weight[tile].to(compute)``
      (``cols*h``), in the compute dtype;
    - ``mm_buf``: ``min(N, 4096) x 32768`` in the compute dtype (the full vocabulary tile, whatever V);
    - in ``_backward_tile`` on a ``n x cols`` tile (``n = min(N, 4096)``, ``cols = min(V, 32768)``): the locals
      ``y``, ``z``, ``log_p``, ``p``, ``grad`` (5 x fp32), ``is_target`` (bool) and, inside
      ``grad += grad_logprobs.unsqueeze(-1) * (is_target.float() - p)``, two fp32 temporaries at a time
      (``.float()`` dies once the difference exists): 5 x 4 + 1 + 2 x 4 = 29 bytes per element. The entropy
      output is only logged, detached: no entropy gradient.
    """
    n = min(tokens, TRL_TOKEN_CHUNK)
    cols = min(vocab, TRL_VOCAB_CHUNK)
    saved = tokens * hidden * weight_itemsize + tokens * 8 + 2 * tokens * 4 + tokens * 4
    accumulators = tokens * hidden * 4 + (vocab * hidden * 4 if head_trained else 0)
    casts = (n + cols) * hidden * compute_itemsize if weight_itemsize != compute_itemsize else 0
    tile = n * TRL_VOCAB_CHUNK * compute_itemsize + TRL_TILE_BYTES * n * cols
    return saved + accumulators + casts + tile


def predict(config: dict[str, Any], spec: RunSpec, shape: BatchShape, *, fused_optimizer: bool = False,
            trl_head: bool = False) -> Prediction:
    """The estimate for ``shape`` (its batch, seq and mask); with ``fused_optimizer`` the optimizer step's
    temporaries are dropped (the fused AdamW kernel allocates none); with ``trl_head`` (TRL's SFTTrainer, whose
    spec has ``loss="chunked"``) the loss of the ``backward: loss`` moment is TRL's fused head
    (:func:`trl_head_bytes`) instead of Liger's."""
    from memfit.estimate.fits import reserved_bytes

    run = spec.with_(batch=shape.batch, seq=shape.seq, padding_mask=shape.padding_mask)
    model_shape = ModelShape.from_hf_config(config)
    est = estimate_memory(model_shape, run)
    best = None
    for m in est.moments:
        parts = dict(m.parts)
        if fused_optimizer and m.phase == "optimizer" and run.optimizer == "adamw":
            parts.pop(Category.TEMPORARIES, None)
        if run.grad_accum > 1 and run.sharding == "none" and m.phase in ("forward", "backward"):
            # the earlier micro-batches' gradients stay allocated through this one's forward and backward
            parts[Category.GRADIENTS] = max(parts.get(Category.GRADIENTS, 0), est.model_states.gradients)
        if trl_head and run.loss == "chunked" and m.label == "backward: loss":
            parts[Category.LOGITS] = trl_head_bytes(
                tokens=run.batch * (run.seq - 1), vocab=model_shape.vocab, hidden=model_shape.embed_dim,
                weight_itemsize=run.weight_bytes, compute_itemsize=run.compute_bytes,
                head_trained=est.model_states.grads_head > 0)
        total = sum(parts.values())
        if best is None or total > best[0]:
            best = (total, m.label, parts)
    assert best is not None
    peak, label, parts = best
    components = {c: parts.get(c, 0) for c in est.components}
    return Prediction(spec=run, shape=shape, peak_bytes=peak, reserved_bytes=reserved_bytes(peak, run.device),
                      peak_moment=label, components=components, estimate=est)


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
        lines.append(f"  {step.action}: {fields} -> peak {_gib(step.peak_bytes)}, "
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


# ---- the callback ------------------------------------------------------------------------------------------

@dataclass
class _Seen:
    batch: int = 0
    seq: int = 0
    padding_mask: bool = False

    def add(self, b: int, s: int, masked: bool) -> None:
        if b * s > self.batch * self.seq or (b * s == self.batch * self.seq and masked):
            self.batch, self.seq, self.padding_mask = b, s, masked


@dataclass
class _State:
    trainer: Any = None
    config: dict[str, Any] = field(default_factory=dict)
    spec: RunSpec | None = None
    fused: bool = False
    trl_head: bool = False
    steps: int = 0
    tracker: Any = None
    hooks: list[Any] = field(default_factory=list)
    seen: _Seen = field(default_factory=_Seen)
    entered: bool = False
    done: bool = False


class MemfitCallback(TrainerCallback):
    """Predict the peak of the longest batch at ``on_train_begin``, check it against the first steps, warn.

    Args:
        gpu: the GPU to judge the fit against (``"24GiB"``, ``"A100-80GB"``, a name of ``memfit gpus``); default:
            the CUDA device's own size when training on CUDA, no judgement on the CPU.
        headroom: kept free on the GPU (``memfit estimate --headroom``), default 5%.
        stop_if_oom: raise :class:`WouldNotFit` from ``on_train_begin`` when the longest batch does not fit.
        measure_steps: the optimizer steps measured (default 2; 0 turns the measurement off).
        measure_cpu: on the CPU, track live storages through those steps (slower steps; off by default).
        tolerance: warn when measured and predicted differ by more than this fraction (default 0.10).
    """

    def __init__(self, gpu: str | None = None, *, headroom: str | float | None = None, stop_if_oom: bool = False,
                 measure_steps: int = 2, measure_cpu: bool = False, tolerance: float = TOLERANCE) -> None:
        if measure_steps < 0:
            raise MemfitError(f"measure_steps must be 0 or more; got {measure_steps}")
        self.gpu = gpu
        self.headroom = headroom
        self.stop_if_oom = stop_if_oom
        self.measure_steps = measure_steps
        self.measure_cpu = measure_cpu
        self.tolerance = tolerance
        self.prediction: Prediction | None = None  # the longest batch (on_train_begin)
        self.measured: dict[str, Any] | None = None  # after the measured steps
        self.warnings: list[str] = []
        self._s = _State()
        if gpu is not None:
            Target.resolve(gpu, headroom)  # a bad size fails here, not at train time

    # -- on_train_begin --------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> Any:
        try:
            return self._train_begins(args, state, control, model, optimizer, train_dataloader)
        except WouldNotFit:
            raise
        except Exception as exc:  # a memory check must not end the user's run: say why, train on
            why = (str(exc) if isinstance(exc, MemfitError)
                   else f"{type(exc).__name__}: {exc} (a memfit bug: please report)")
            message = f"memfit: no prediction for this run: {why}"
            self.warnings.append(message)
            logger.warning(message)
            self._s = _State(done=True)
            return control

    def _train_begins(self, args: Any, state: Any, control: Any, model: Any, optimizer: Any,
                      train_dataloader: Any) -> Any:
        s = self._s = _State()
        s.trainer = _find_trainer(self)
        model = unwrap(model)
        s.config = config_dict(model)
        s.spec = live_spec(args, model)
        s.fused = optimizer_is_fused(optimizer)
        positions = s.config.get("max_position_embeddings") or s.config.get("n_positions")
        shape = longest_batch(args, train_dataloader, max_positions=positions)
        s.trl_head = uses_trl_head(args)
        self.prediction = p = predict(s.config, s.spec, shape, fused_optimizer=s.fused, trl_head=s.trl_head)
        target = self._target(s.spec.device)
        lines = [f"memfit: predicted peak {_gib(p.peak_bytes)} ({p.peak_bytes:,} B) at {p.peak_moment} for the "
                 f"longest batch, {shape.how}; run: {_describe(p.spec)}"]
        if target is not None:
            verdict = target.judge(p.peak_bytes, p.spec.device)
            lines.append(f"memfit: {'fits' if verdict.fits else 'does not fit'}: {verdict.rule()}")
            if not verdict.fits:
                lines.append(f"memfit fit, in {type(args).__name__}'s terms:")
                lines.extend(plan_lines(args, s.config, p, target))
        for line in lines:
            (logger.warning if target is not None and "does not fit" in lines[1] else logger.info)(line)
        if target is not None and not target.judge(p.peak_bytes, p.spec.device).fits:
            self.warnings.append("\n".join(lines))
            if self.stop_if_oom:
                control.should_training_stop = True
                raise WouldNotFit("\n".join(lines) + "\nstopped before the first step (MemfitCallback(stop_if_oom="
                                  "True))", p)
        self._log({"memfit/predicted_longest_batch_peak_bytes": p.peak_bytes}, state, args)
        if self.measure_steps and (s.spec.device == "cuda" or self.measure_cpu):
            self._start_measuring(model, optimizer)
        elif self.measure_steps:
            logger.info("memfit: not measuring the first steps on the CPU: MemfitCallback(measure_cpu=True) tracks "
                        "them (slower steps)")
        return control

    def _target(self, device: str) -> Target | None:
        if self.gpu is not None:
            return Target.resolve(self.gpu, self.headroom)
        if device == "cuda":
            import torch

            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            return Target.resolve(f"{total}B", self.headroom)
        return None

    # -- measuring -----------------------------------------------------------------------------------------
    def _start_measuring(self, model: Any, optimizer: Any) -> None:
        import torch

        s = self._s
        if s.spec is not None and s.spec.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            from memfit.runtime.tracker import LiveTensorTracker

            s.tracker = LiveTensorTracker(vocab=int(s.config.get("vocab_size") or 0) or None)
            s.tracker.track_model(model)
            if optimizer is not None:
                s.tracker.track_optimizer(getattr(optimizer, "optimizer", optimizer))
        s.hooks.append(model.register_forward_pre_hook(self._forward_begins, with_kwargs=True))
        s.hooks.append(model.register_forward_hook(self._forward_ends))

    def _forward_begins(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        s = self._s
        if s.done or not module.training or not torch.is_grad_enabled():
            return  # an evaluation or generation between the steps is not a training batch
        from torch.utils._python_dispatch import _disable_current_modes

        ids = kwargs.get("input_ids", args[0] if args else None)
        tensors = [v for v in list(args) + list(kwargs.values()) if isinstance(v, torch.Tensor)]
        if isinstance(ids, torch.Tensor) and ids.dim() == 2:
            with _disable_current_modes():
                mask = kwargs.get("attention_mask")
                pos = kwargs.get("position_ids")
                masked = bool(isinstance(mask, torch.Tensor) and not bool(mask.all()))
                if isinstance(pos, torch.Tensor) and pos.dim() == 2 and mask is None:
                    masked = masked or bool((pos[:, 1:] == 0).any())
            s.seen.add(int(ids.shape[0]), int(ids.shape[1]), masked)
        if s.tracker is not None and s.entered:
            s.tracker.set_phase("forward")
            s.tracker.track_tensors(tensors)

    def _forward_ends(self, module: Any, args: Any, output: Any) -> None:
        import torch

        s = self._s
        if s.tracker is not None and s.entered and not s.done and module.training and torch.is_grad_enabled():
            s.tracker.set_phase("backward")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        s = self._s
        if s.tracker is not None and not s.done and not s.entered:
            s.tracker.__enter__()
            s.tracker.set_phase("forward")
            s.entered = True
        return control

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        s = self._s
        if s.tracker is not None and s.entered:
            s.tracker.set_phase("optimizer")
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        s = self._s
        if s.done or not s.hooks:
            return control
        if s.tracker is not None and s.entered:  # between the steps (logging, evaluation, saving): not tracked
            s.tracker.__exit__(None, None, None)
            s.entered = False
        s.steps += 1
        if s.steps < self.measure_steps:
            return control
        self._stop_measuring()
        self._report(args, state, model)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not self._s.done:
            self._stop_measuring()
        return control

    def _stop_measuring(self) -> None:
        s = self._s
        s.done = True
        if s.tracker is not None and s.entered:
            s.tracker.__exit__(None, None, None)
            s.entered = False
        for h in s.hooks:
            h.remove()
        s.hooks.clear()

    def _report(self, args: Any, state: Any, model: Any) -> None:
        import torch

        s = self._s
        assert s.spec is not None
        if s.seen.batch == 0:
            return
        seen = BatchShape(batch=s.seen.batch, seq=s.seen.seq, padding_mask=s.seen.padding_mask,
                          how=f"the largest batch of the first {s.steps} steps, {s.seen.batch} x {s.seen.seq}")
        p = predict(s.config, s.spec, seen, fused_optimizer=s.fused, trl_head=s.trl_head)
        by_category = None
        summary = s.tracker.summary() if s.tracker is not None else None
        if summary is not None:
            measured = int(summary["peak_bytes"])
            by_category = {Category(k): int(v) for k, v in summary["by_category"].items()}
            reserved = None
        else:
            measured = int(torch.cuda.max_memory_allocated())
            reserved = int(torch.cuda.max_memory_reserved())
        ratio = measured / p.peak_bytes if p.peak_bytes else float("nan")
        self.measured = {"predicted_peak_bytes": p.peak_bytes, "measured_peak_bytes": measured,
                         "ratio": ratio, "measured_reserved_bytes": reserved, "by_category": by_category,
                         "tracker_summary": summary,
                         "prediction": p, "steps": s.steps}
        logs: dict[str, float] = {"memfit/predicted_peak_bytes": p.peak_bytes, "memfit/measured_peak_bytes": measured,
                                  "memfit/ratio": round(ratio, 4)}
        if reserved is not None:
            logs["memfit/predicted_reserved_bytes"] = p.reserved_bytes
            logs["memfit/measured_reserved_bytes"] = reserved
        self._log(logs, state, args)
        line = (f"memfit: measured peak {_gib(measured)} ({measured:,} B) over the first {s.steps} steps, predicted "
                f"{_gib(p.peak_bytes)} ({p.peak_bytes:,} B) for {seen.batch} x {seen.seq}: ratio {ratio:.3f}")
        if not math.isfinite(ratio) or abs(ratio - 1) > self.tolerance:
            causes = diagnose(model, args, p, measured, by_category)
            message = (line + f", more than {self.tolerance:.0%} off; likely: " + causes[0] +
                       "".join(f"; also: {c}" for c in causes[1:]))
            self.warnings.append(message)
            logger.warning(message)
        else:
            logger.info(line)

    def _log(self, logs: dict[str, float], state: Any, args: Any) -> None:
        """Through ``transformers.Trainer.log`` (the log history and every reporting callback's ``on_log``); the
        base class's, not a subclass's: TRL's ``SFTTrainer.log`` would flush its running metrics into this entry."""
        from transformers import Trainer

        trainer = self._s.trainer
        if isinstance(trainer, Trainer):
            Trainer.log(trainer, dict(logs))
        elif state is not None:
            state.log_history.append({**logs, "step": getattr(state, "global_step", 0)})


def _find_trainer(callback: MemfitCallback) -> Any:
    """The Trainer running ``callback``: the ``self`` of the frame that called the callback handler (callbacks
    are handed no Trainer; its ``log`` is how metrics reach every reporting integration and the log history)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            owner = frame.f_locals.get("self")
            handler = getattr(owner, "callback_handler", None)
            if handler is not None and callback in getattr(handler, "callbacks", ()):
                return owner
            frame = frame.f_back
    finally:
        del frame
    return None


def _describe(spec: RunSpec) -> str:
    parts: list[str] = [spec.method]
    if spec.is_adapter:
        parts.append(f"r{spec.rank}")
    parts += [spec.precision, spec.optimizer, f"checkpointing {spec.checkpointing}", spec.attention,
              f"loss {spec.loss}", spec.device]
    return ", ".join(parts)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3f} GiB"
