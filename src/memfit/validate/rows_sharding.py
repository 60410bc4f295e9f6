"""Sharded rows of the agreement matrix: the estimate's per-GPU peak against each rank's measured peak.

Every row runs for real on ``gpus`` gloo processes (:func:`memfit.measure.sharded.measure_sharded`, one torchrun
launch per world size and model); the measured figure is the largest rank's peak of live storage bytes, what
must fit one GPU. The architectures are the agreement matrix's scaled ones (:func:`scaled_config`): real
vocabularies, tied (Llama 3.2) and untied (Pythia) embeddings.

    error = (estimate_per_gpu - measured_max_rank) / measured_max_rank
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memfit.errors import MemfitError
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.validate.agreement import scaled_config

SHARDED_MODELS: tuple[tuple[str, int, int], ...] = (("llama-3.2-1b", 256, 2), ("pythia-1.4b", 512, 4))
SHARDED_SPECS: tuple[RunSpec, ...] = tuple(
    RunSpec(method="full", precision="fp32", batch=1, seq=64, device="cpu", sharding=sharding, gpus=gpus,
            nodes=2 if sharding == "hsdp" else 1, adamw_impl="forloop")
    for gpus in (2, 4) for sharding in ("ddp", "zero1", "zero2", "fsdp", *(("hsdp",) if gpus == 4 else ())))
"""fp32 AdamW (the for-loop kernel, torch's default on CPU tensors, as RESULTS ``## sharding`` was measured),
one 64-token sequence per rank: 2 ranks x {ddp, zero1, zero2, fsdp}; 4 ranks add hsdp (2 nodes of 2)."""
ACCELERATE_SPECS: tuple[RunSpec, ...] = tuple(
    s.with_(fsdp_wrap="accelerate") for s in SHARDED_SPECS if s.sharding in ("zero2", "fsdp"))
"""The FSDP2 rows again with accelerate 1.15.0's units (``--fsdp-wrap accelerate``: + the untied embedding, + the
tail [norm, lm_head] kept gathered)."""
MIXED_SPECS: tuple[RunSpec, ...] = tuple(
    s.with_(precision="mixed-bf16", fsdp_wrap=wrap) for s in SHARDED_SPECS if s.sharding == "fsdp"
    for wrap in ("layers", "accelerate"))
"""fsdp under mixed-bf16: fp32 sharded parameters gathered in bf16 (``MixedPrecisionPolicy``: torchtitan's fp32
reduce with the layers wrap, accelerate's bf16 reduce with its own), autocast's bf16 compute."""
LORA_SPECS: tuple[RunSpec, ...] = tuple(
    s.with_(method="lora", fsdp_wrap=wrap) for s in SHARDED_SPECS if s.sharding in ("zero2", "fsdp")
    for wrap in ("layers", "accelerate") if s.sharding == "fsdp" or wrap == "layers")
"""PEFT LoRA (r 16, PEFT's default targets) over fp32 weights under fully_shard: the frozen base sharded with the
adapters, both wraps under fsdp, the layers wrap under zero2."""
LAYERS_SPECS: tuple[RunSpec, ...] = tuple(
    RunSpec(method="lora", precision="fp32", batch=1, seq=64, device="cpu", sharding=sharding, gpus=2,
            adamw_impl="forloop", layers_to_transform=(0, 2)) for sharding in ("zero2", "zero3", "fsdp"))
"""PEFT LoRA on decoder layers 0 and 2 only (``layers_to_transform``) under fully_shard: units with and without
trainable parameters, the last layer frozen. Run on :data:`LAYERS_MODEL`, whose layers outweigh its root."""
LAYERS_MODEL: tuple[str, int, int, int] = ("llama-3.2-1b", 256, 4, 1024)
"""(catalogue name, hidden, layers, vocabulary) of the ``layers`` rows: scaled Llama 3.2 with a 1,024-token
vocabulary, so the layers' gathers, not the root's, set the peak."""
MOE_SPECS: tuple[RunSpec, ...] = tuple(
    RunSpec(method="full", precision="bf16", batch=1, seq=64, device="cpu", sharding=sharding, gpus=2,
            attention="sdpa") for sharding in ("zero2", "fsdp"))
"""A full bf16 fine-tune of a mixture-of-experts model under fully_shard, 2 ranks: fused 3-D expert weights many
times a layer's activations, so a middle layer's backward (the layer computing, the next one's prefetched all-gather
output and the last reduce-scatter's input) peaks. Run on :data:`MOE_MODEL`."""
MOE_MODEL: tuple[str, int, int] = ("mixtral-8x7b", 512, 4)
"""(catalogue name, hidden, layers) of the ``moe`` rows: scaled Mixtral, 8 experts of 2 active, 32,000 tokens."""
ROW_SETS: dict[str, tuple[RunSpec, ...]] = {"base": SHARDED_SPECS, "accelerate": ACCELERATE_SPECS,
                                            "mixed": MIXED_SPECS, "lora": LORA_SPECS, "layers": LAYERS_SPECS,
                                            "moe": MOE_SPECS}
"""The row sets ``bench/sharding.py --rows`` picks from (all of them by default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardedRow:
    model: str
    spec: RunSpec
    measured_bytes: int  # the largest rank's peak
    rank_bytes: tuple[int, ...]
    estimate_bytes: int
    trace_bytes: int | None = None  # memfit trace --sharding: one rank on a fake process group (None: not traced)

    @property
    def error(self) -> float:
        return (self.estimate_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def trace_error(self) -> float | None:
        return None if self.trace_bytes is None else (self.trace_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def label(self) -> str:
        s = self.spec
        nodes = f" ({s.nodes} nodes)" if s.nodes > 1 else ""
        wrap = " accelerate-wrap" if s.fsdp_wrap != "layers" else ""
        layers = f" layers {','.join(map(str, s.layers_to_transform))}" if s.layers_to_transform else ""
        return (f"{self.model} {s.method}{layers} {s.precision} b{s.batch} s{s.seq} {s.sharding} x{s.gpus}{nodes}"
                f"{wrap}")

    def to_dict(self) -> dict[str, Any]:
        return {"row": self.label, "model": self.model, "spec": self.spec.to_dict(),
                "measured_bytes": self.measured_bytes, "rank_bytes": list(self.rank_bytes),
                "estimate_bytes": self.estimate_bytes, "estimate_error": self.error,
                "trace_bytes": self.trace_bytes, "trace_error": self.trace_error}


def run_sharded_matrix(*, gpus: tuple[int, ...] = (2, 4), models: tuple[str, ...] | None = None,
                       on_row: Callable[[ShardedRow], None] | None = None,
                       rows: tuple[str, ...] | None = None, trace: bool = True) -> list[ShardedRow]:
    """Measure, estimate and (``trace``) trace every sharded row of the ``rows`` sets (:data:`ROW_SETS`; one launch
    per model and world size; the trace runs in this process, one rank on a fake process group:
    :mod:`memfit.trace.sharded`; a row the sharded trace refuses gets no trace figure)."""
    chosen = [s for name, specs in ROW_SETS.items() if rows is None or name in rows for s in specs]
    from memfit.estimate import estimate_memory
    from memfit.measure.sharded import measure_sharded
    from memfit.trace.engine import trace_step

    out = []
    name, hidden, layers, vocab = LAYERS_MODEL
    groups = [(m, None, [s for s in chosen if s not in LAYERS_SPECS and s not in MOE_SPECS])
              for m in SHARDED_MODELS] + [((name, hidden, layers), vocab, [s for s in chosen if s in LAYERS_SPECS])]
    groups.append((MOE_MODEL, None, [s for s in chosen if s in MOE_SPECS]))
    for (name, hidden, layers), vocab, group in groups:
        if (models is not None and name not in models) or not group:
            continue
        config = scaled_config(name, hidden, layers)
        if vocab is not None:
            config["vocab_size"] = vocab
        label = name if vocab is None else f"{name} v{vocab}"
        shape = ModelShape.from_hf_config(config, name=name)
        for n in gpus:
            specs = [s for s in group if s.gpus == n]
            if not specs:
                continue
            for r in measure_sharded(config, specs):
                traced = (trace_step(config, r.spec, name=name).peak_bytes
                          if trace and _traceable(r.spec) else None)
                row = ShardedRow(model=label, spec=r.spec, measured_bytes=r.peak_bytes,
                                 rank_bytes=tuple(x.peak_bytes for x in r.ranks),
                                 estimate_bytes=estimate_memory(shape, r.spec).peak_bytes, trace_bytes=traced)
                out.append(row)
                if on_row is not None:
                    on_row(row)
    return out


def _traceable(spec: RunSpec) -> bool:
    """Whether the sharded trace runs ``spec`` (its own check, :func:`memfit.trace.sharded.check_sharded_trace`);
    a refused row (QLoRA, offload ...) is measured and estimated only, and any other trace failure still raises."""
    from memfit.trace.sharded import check_sharded_trace

    try:
        check_sharded_trace(spec)
    except MemfitError:
        return False
    return True


def summarise_sharded(rows: list[ShardedRow]) -> dict[str, float]:
    errors = [abs(r.error) for r in rows]
    out = {"rows": len(rows), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors)}
    traced = [abs(e) for r in rows if (e := r.trace_error) is not None]
    if traced:
        out["trace_max_abs_error"] = max(traced)
    return out
