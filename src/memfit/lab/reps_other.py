"""Reps 3, 6, 7 and 8: the data's lengths (:func:`memfit.data.lengths.analyse_lengths`), the adapter's rank and
the worked example (the estimate and the trace of the real model), and ``use_cache`` left on with checkpointing
(transformers' real behaviour, in this process)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from memfit.estimate import estimate_memory, lookup
from memfit.estimate.category import Category
from memfit.estimate.constants import RULE_OF_THUMB_BYTES
from memfit.estimate.lora import lora_params_per_layer
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.lab.setup import LESSON_MODEL, WORKED, LabSetup
from memfit.lab.verdicts import Rep, Verdict, judge_p95, judge_rank, judge_use_cache, judge_worked_example

GB = 10**9
MB = 10**6
ADAPTER_PARAMS = 4_000_000  # the lesson's "4M-parameter adapter"
BYTES_PER_TRAINABLE = 16  # fp32 weight 4 + gradient 4 + AdamW's two moments 8: the lesson's 32 MB for 2M


def rep_lengths(data: Path | None, tokenizer: Path | None, fields: dict[str, str | None]) -> Rep:
    """Rep 3: p95 against the longest example, and how many examples the p95 truncates."""
    claim = "measure the token-length distribution with the real tokenizer: the 95th percentile, not the maximum, " \
            "is your sequence length"
    if data is None or tokenizer is None:
        return Rep(number=3, title="p95, not max, is the sequence length", claim=claim, verdict=Verdict.NOT_RUN,
                   measured="no data set: pass --data FILE --tokenizer DIR", command="memfit lengths DATA "
                   "--tokenizer TOKENIZER", how="tokenised")
    from memfit.data.lengths import analyse_lengths

    t0 = time.perf_counter()
    rep = analyse_lengths(data, tokenizer, **fields)
    over = int((rep.lengths > rep.p95).sum())
    share = over / rep.count
    measured = (f"{rep.count:,} examples of {Path(data).name} ({rep.tokenizer}): p95 {rep.p95:,} tokens against "
                f"the longest {rep.max:,}; the p95 truncates {over:,} examples ({share:.1%}); training at the max "
                f"would pad every row to {rep.max / rep.p95:.2f}x the p95")
    named = " ".join(f"--{k} {v}" for k, v in fields.items() if v)
    return Rep(number=3, title="p95, not max, is the sequence length", claim=claim, measured=measured,
               verdict=judge_p95(rep.p95, rep.max, share), seconds=time.perf_counter() - t0, how="tokenised",
               command=f"memfit lengths {data} --tokenizer {tokenizer} {named}".strip(),
               figures={"count": rep.count, "p95": rep.p95, "max": rep.max, "over_p95": over, "share": share,
                        "mean": rep.mean, "percentiles": rep.percentiles})


def adapter_rank(shape: ModelShape, spec: RunSpec, params: int = ADAPTER_PARAMS) -> int:
    """The rank whose LoRA adapter (``spec.targets``) has about ``params`` parameters on ``shape``.

    Worked for the lesson model (24 layers, h 2048, kv 256, q_proj and v_proj): r x (2048 + 2048 + 2048 + 256)
    x 24 = 153,600 r; 4,000,000 / 153,600 = 26.04 -> 26.
    """
    per_rank = lora_params_per_layer(shape, spec.with_(rank=1)) * shape.n_layers
    return max(2, round(params / per_rank))


def _trace(config: dict[str, Any], spec: RunSpec, name: str) -> Any:
    from memfit.trace.engine import trace_step

    return trace_step(config, spec, name=name)


def rep_rank(setup: LabSetup, worked_activations: int | None) -> Rep:
    """Rep 6: rank r (a ~4M-parameter adapter) against r/2 on the real lesson model (traced: the real code on
    fake tensors) or the given model (measured on CUDA); the bytes saved beside the activations it leaves."""
    t0 = time.perf_counter()
    model = LESSON_MODEL if setup.scaled else setup.model
    config = dict(lookup(LESSON_MODEL).config) if setup.scaled else setup.config
    shape = ModelShape.from_hf_config(config)
    base = WORKED if setup.scaled else setup.spec.with_(batch=1, seq=512)
    r = adapter_rank(shape, base)
    params = {k: lora_params_per_layer(shape, base.with_(rank=k)) * shape.n_layers for k in (r, r // 2)}
    if setup.scaled:
        peaks = {k: _trace(config, base.with_(rank=k), model) for k in (r, r // 2)}
        peak = {k: int(v.peak_bytes) for k, v in peaks.items()}
        acts = int(peaks[r].components.get(Category.ACTIVATIONS, 0))
        how = "traced"
    else:
        from memfit.measure.point import measure_point

        points = {k: measure_point(config, base.with_(rank=k), device=setup.device, steps=0, warmup=0)
                  for k in (r, r // 2)}
        peak = {k: int(p.peak_bytes or 0) for k, p in points.items()}
        acts = int(points[r].by_category.get(Category.ACTIVATIONS, 0))
        how = "measured"
    saved = peak[r] - peak[r // 2]
    claimed = (params[r] - params[r // 2]) * BYTES_PER_TRAINABLE
    against = worked_activations or acts
    measured = (f"{model} rank {r} ({params[r]:,} adapter parameters) -> {r // 2} ({params[r // 2]:,}): the peak "
                f"drops {saved / MB:,.1f} MB (10^6 B), against {acts / GB:,.2f} GB of activations it leaves untouched "
                f"at b{base.batch} s{base.seq}: {saved / max(acts, 1):.2%} of them")
    return Rep(number=6, title="rank is nearly the least effective knob", how=how, seconds=time.perf_counter() - t0,
               claim="halving rank on a 4M-parameter adapter saves 32 MB (16 B per trainable parameter under AdamW); "
                     "rank is nearly the least effective knob",
               measured=measured, verdict=judge_rank(saved, 32 * MB, against),
               command=" && ".join(f"memfit {'trace' if setup.scaled else 'measure'} {model} --method lora --rank {k} "
                                   f"--precision bf16 --batch {base.batch} --seq {base.seq}" for k in (r, r // 2)),
               figures={"rank": r, "params": params, "peaks": peak, "saved_bytes": saved,
                        "claimed_bytes": 32 * MB, "sixteen_bytes_per_param": claimed, "activations": acts})


def rep_worked(setup: LabSetup) -> Rep:
    """Rep 7: the lesson's 24 x 2048 model at batch 4 x seq 2048, LoRA bf16: the rule's 8.0 GB against the
    estimate's and the trace's activations, the frozen weights (~2.2 GB) and the adapter state (tens of MB)."""
    t0 = time.perf_counter()
    config = dict(lookup(LESSON_MODEL).config)
    shape = ModelShape.from_hf_config(config)
    rule = shape.n_layers * WORKED.batch * WORKED.seq * shape.hidden * RULE_OF_THUMB_BYTES
    est = estimate_memory(shape, WORKED)
    tr = _trace(config, WORKED, LESSON_MODEL)
    acts = int(tr.components.get(Category.ACTIVATIONS, 0))
    frozen = int(tr.model_states.get(Category.WEIGHTS_FROZEN, 0))
    adapter = sum(int(tr.model_states.get(c, 0)) for c in (Category.WEIGHTS_TRAINABLE, Category.GRADIENTS,
                                                            Category.OPTIMIZER))
    verdict = judge_worked_example(rule, acts, frozen, int(2.2 * GB), adapter)
    # the same quantity on both sides: the activations category at the step's peak moment (at the end of the forward
    # the estimate's ``activation_bytes``, everything saved for backward, is larger: part of it is freed by then)
    est_acts = int(est.components.get(Category.ACTIVATIONS, 0))
    measured = (f"rule {rule / GB:.2f} GB; activations at the peak: estimate {est_acts / GB:.2f} GB, "
                f"trace {acts / GB:.2f} GB ({acts / (shape.n_layers * WORKED.batch * WORKED.seq * shape.hidden):.1f} "
                f"B per layer x token x hidden); frozen bf16 weights {frozen / GB:.2f} GB; adapter state (weights, "
                f"gradients, AdamW) {adapter / MB:.1f} MB; peak: estimate {est.peak_bytes / GB:.2f} GB, trace "
                f"{tr.peak_bytes / GB:.2f} GB (GB = 10^9 B)")
    return Rep(number=7, title="the worked example: activations dominate", how="traced", verdict=verdict,
               seconds=time.perf_counter() - t0,
               claim="24 layers x batch 4 x seq 2048 x hidden 2048 x 20 B ~ 8.0 GB of activations, against ~2.2 GB "
                     "of frozen bf16 weights and a few tens of MB of adapter state",
               measured=measured,
               command=f"memfit trace {LESSON_MODEL} --method lora --precision bf16 --batch 4 --seq 2048 "
                       f"&& memfit estimate {LESSON_MODEL} --method lora --precision bf16 --batch 4 --seq 2048",
               figures={"rule_bytes": rule, "estimate_activations": est_acts, "trace_activations": acts,
                        "estimate_saved_by_forward": est.activation_bytes,
                        "estimate_peak": est.peak_bytes, "trace_peak": tr.peak_bytes, "frozen_weights": frozen,
                        "adapter_state": adapter})


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _cache_bytes(output: Any) -> int:
    """Bytes of the distinct storages the model's returned KV cache holds (transformers 5.24.0: ``output.cache``
    or ``past_key_values``, a ``DynamicCache`` whose ``layers`` hold ``keys`` / ``values``)."""
    cache = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
    seen: dict[int, int] = {}
    for layer in getattr(cache, "layers", None) or []:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if t is not None and hasattr(t, "untyped_storage"):
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def use_cache_step(config: dict[str, Any], spec: RunSpec, device: str) -> tuple[list[str], int]:
    """One training forward and backward with ``use_cache=True`` left on: transformers' warnings (its own
    logger, captured) and the bytes the returned cache holds after the backward."""
    import torch
    from transformers.utils import logging as hf_logging

    from memfit.runtime.build import build_model

    model = build_model(config, spec, device=device)
    model.config.use_cache = True
    logger = logging.getLogger("transformers")
    handler = _Captured()
    logger.addHandler(handler)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()
    hf_logging.disable_default_handler()  # captured, not printed: the lab shows it beside the claim
    hf_logging.get_logger("transformers").warning_once.cache_clear()  # type: ignore[attr-defined]
    try:
        torch.manual_seed(0)
        vocab = int(config["vocab_size"])
        ids = torch.randint(0, vocab, (spec.batch, spec.seq), device=device)
        out = model(input_ids=ids, labels=ids, use_cache=True)
        out.loss.backward()
        held = _cache_bytes(out)
    finally:
        logger.removeHandler(handler)
        hf_logging.enable_default_handler()
        hf_logging.set_verbosity(level)
    return handler.messages, held


def rep_use_cache(setup: LabSetup) -> Rep:
    """Rep 8: ``use_cache`` left on in training, with per-layer checkpointing and without."""
    t0 = time.perf_counter()
    spec = setup.spec.with_(batch=1, seq=min(setup.spec.seq, 256))
    warned, held_ckpt = use_cache_step(setup.config, spec.with_(checkpointing="full"), setup.device)
    _, held_plain = use_cache_step(setup.config, spec, setup.device)
    warning = next((m for m in warned if "cach" in m.lower()), None)
    measured = (f"with checkpointing transformers warns: \"{warning}\" and the cache comes back empty "
                f"({held_ckpt:,} B held); without checkpointing the training step returns a cache holding "
                f"{held_plain:,} B of keys and values, alive as long as the step's output is"
                if warning else f"no warning; the cache holds {held_ckpt:,} B with checkpointing, {held_plain:,} B "
                                "without")
    return Rep(number=8, title="use_cache must be off with checkpointing", seconds=time.perf_counter() - t0,
               claim="use_cache = False with checkpointing during training: leaving it on produces warnings at best "
                     "and wasted memory at worst",
               measured=measured, verdict=judge_use_cache(warning is not None, held_ckpt),
               command="python -c \"m.config.use_cache = True; m.activation_checkpointing_enable(); m.train(); "
                       "m(input_ids=x, labels=x).loss.backward()\"  (transformers "
                       f"{_transformers_version()})",
               figures={"warnings": warned, "held_with_checkpointing": held_ckpt, "held_without": held_plain})


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
