"""The agreement matrix: estimate, trace and measure on the same specs, with the error of each (a validation
harness: it runs :mod:`memfit.measure` and :mod:`memfit.trace`; ``bench/agreement.py`` writes its table).

Configs are the catalogue's real architectures scaled down to run a CPU step in seconds: few layers
and a narrower hidden size, but the real ratios (heads : kv heads, intermediate : hidden, head_dim
where it fits) and the **real vocabulary**, so the logits weigh what they weigh in the real model.

    error = (engine_peak - measured_peak) / measured_peak

Baselines beside them: the lesson's rule of thumb (weights + gradients + optimizer states + L*b*s*h*20)
and a weights-plus-optimizer-only figure (what a calculator that ignores activations reports).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from memfit.estimate import lookup
from memfit.estimate.constants import RULE_OF_THUMB_BYTES
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.validate.rows_cuda import CUDA_ROWS, cuda_spec
from memfit.validate.rows_dora import DORA_ROWS, PEFT_OPTION_ROWS
from memfit.validate.rows_offload import OFFLOAD_ROWS

# (catalogue model, scaled hidden, scaled layers): the architectures of the matrix.
SCALED_MODELS: tuple[tuple[str, int, int], ...] = (
    ("llama-3.2-1b", 256, 2),
    ("qwen2.5-0.5b", 256, 2),
    ("gemma-2-2b", 512, 2),
    ("phi-3-mini", 384, 2),
    ("gpt2", 256, 2),
    ("mixtral-8x7b", 256, 2),
    ("opt-1.3b", 256, 2),
    ("pythia-1.4b", 256, 2),
    ("qwen3-8b", 256, 2),
    # issue 13
    ("olmo-2-7b", 256, 2),
    ("phi-2", 320, 2),
    ("granite-3.3-8b", 256, 2),
    ("gemma-3-1b", 256, 6),  # 6 layers: five sliding and one full (sliding_window_pattern 6)
    # issue 13 (second half)
    ("falcon-7b", 256, 2),
    ("qwen3-30b-a3b", 256, 2),
    ("gpt-oss-20b", 256, 2),
    # issue 13: deepseek_v3 (layer 0 a dense MLP, layer 1 the MoE: no q bottleneck; V3's q_lora_rank with 3 dense
    # layers and one MoE of 256 experts in 8 groups)
    ("moonlight-16b-a3b", 256, 2),
    ("deepseek-v3", 256, 4),
)


def scaled_config(name: str, hidden: int, layers: int) -> dict[str, Any]:
    """The catalogue config of ``name`` scaled to ``hidden`` and ``layers``, keeping its ratios and vocabulary.

    Dropout is kept as the model has it: the catalogue configs name no dropout field, so every engine reads
    the transformers config class's default (GPT-2 ``attn_pdrop = resid_pdrop = embd_pdrop = 0.1``, OPT
    ``dropout = 0.1``, 0 elsewhere): the GPT-2 and OPT rows train with dropout, as the real models do.

    Worked for llama-3.2-1b (h=2048, a=32, k=8, d=64, i=8192) at hidden 256: d stays 64, a = 256/64 = 4,
    k = a*8/32 = 1, i = 256*8192/2048 = 1024, V = 128,256 unchanged.
    """
    cfg = dict(lookup(name).config)
    shape = lookup(name).shape
    keys = shape.arch.keys
    head_dim = min(shape.head_dim, hidden // 2)
    heads = max(1, hidden // head_dim)
    kv = max(1, heads * shape.n_kv_heads // shape.n_heads)
    while heads % kv:
        kv -= 1
    inter = int(round(hidden * shape.intermediate / shape.hidden / 8)) * 8
    # the intermediate size is left to the config where it says null (GPT-2's n_inner: 4h)
    keep_inter = keys.intermediate.per_hidden and cfg.get(keys.intermediate.names[0]) is None
    cfg.update(keys.write(layers=layers, hidden=hidden, heads=heads, kv_heads=kv,
                          intermediate=None if keep_inter else inter))
    if keys.embed_proj_dim and cfg.get(keys.embed_proj_dim[0]) is not None:  # OPT's word_embed_proj_dim
        cfg[keys.embed_proj_dim[0]] = shape.embed_dim * hidden // shape.hidden
    if keys.kv_heads and ("head_dim" in cfg or shape.head_dim * shape.n_heads != shape.hidden):
        cfg["head_dim"] = head_dim
    cfg.update(dict.fromkeys(keys.scales_with_head_dim, head_dim))  # Gemma 2's query_pre_attn_scalar
    for key in keys.scales_with_hidden:  # DeepSeek's latent ranks, per-head widths, dense MLP (null stays null)
        if isinstance(cfg.get(key), int):
            cfg[key] = max(8, int(round(cfg[key] * hidden / shape.hidden / 8)) * 8)
    for key in keys.layer_types:  # a per-layer list (GPT-OSS's layer_types): its first ``layers`` entries
        if isinstance(cfg.get(key), list):
            cfg[key] = cfg[key][:layers]
    return cfg


@dataclass(frozen=True, kw_only=True, slots=True)
class MatrixRow:
    """One spec of the matrix on one scaled architecture."""

    model: str
    config: dict[str, Any]
    spec: RunSpec

    @property
    def shape(self) -> ModelShape:
        return ModelShape.from_hf_config(self.config, name=self.model)

    @property
    def label(self) -> str:
        s = self.spec
        targets = ",".join(s.targets) or (f"re:{s.targets_regex}" if s.targets_regex else "default")
        if s.exclude_modules:
            targets += f" less {','.join(s.exclude_modules)}"
        if s.rank_pattern:
            targets += " ranks " + ",".join(f"{k}={r}" for k, r in s.rank_pattern)
        if s.layers_to_transform:
            targets += f" layers {','.join(map(str, s.layers_to_transform))}" + (
                f" of {','.join(s.layers_pattern)}" if s.layers_pattern else "")
        if s.bias != "none":
            targets += f" bias {s.bias}"
        if s.trainable_token_indices:
            targets += f" tokens {','.join(map(str, s.trainable_token_indices))}"
        adapter = s.method if not s.use_dora else ("dora" if s.method == "lora" else f"{s.method}+dora")  # qlora+dora
        method = s.method if s.method == "full" else f"{adapter}[{targets}]" + (
            " no-double-quant" if s.method == "qlora" and not s.double_quant else "")
        ck = ("ckpt+offload" if s.offload else "ckpt") if s.checkpointing != "none" else "-"
        ck += " act-offload" if s.offload_activations else ""  # TRL's OffloadActivations (rows_act_offload)
        ck += f" loss {s.loss}" if s.loss != "standard" else ""  # TRL's fused head, Liger's chunked loss
        if s.checkpointing in ("sqrt", "every-k"):  # segments / one block in k: the depth matters, say it
            mode = "sqrt" if s.checkpointing == "sqrt" else f"every{s.checkpoint_every}"
            ck = f"ckpt-{mode} L{self.shape.n_layers}"
        opt = f" {s.optimizer}" if s.optimizer != "adamw" else ("" if s.adamw_impl == "fused" else f" {s.adamw_impl}")
        w = self.shape.sliding_window
        window = f" window {w}" if w is not None and w <= s.seq else ""  # sliding layers past their window
        v = self.shape.vocab
        vocab = f" vocab {v}" if v != lookup(self.model).shape.vocab else ""  # a row that sets its own vocab_size
        return (f"{self.model} {method}{opt} {s.precision} {s.attention} {ck} b{s.batch} s{s.seq}{window}"
                f"{vocab}{self.dropout_label}")

    @property
    def dropout_label(self) -> str:
        """`` dropout(attn 0.1, resid 0.1, embd 0.1, lora 0.05)``: the dropout the row trains with ("" for none)."""
        sh, s = self.shape, self.spec
        parts = [f"{name} {p:g}" for name, p in (("attn", sh.attention_dropout), ("resid", sh.residual_dropout),
                                                 ("embd", sh.embedding_dropout), ("lora", s.lora_dropout)) if p]
        return f" dropout({', '.join(parts)})" if parts else ""


@dataclass(frozen=True, kw_only=True, slots=True)
class AgreementRow:
    """The three engines and two baselines on one row; errors are relative to the measured peak."""

    row: MatrixRow
    measured_bytes: int
    measured_phase: str
    estimate_bytes: int
    estimate_phase: str
    trace_bytes: int | None
    rule_of_thumb_bytes: int
    states_only_bytes: int
    by_category: dict[str, int] = field(default_factory=dict)
    estimate_components: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def error(self, value: int | None) -> float | None:
        return None if value is None else (value - self.measured_bytes) / self.measured_bytes

    @property
    def estimate_error(self) -> float:
        return (self.estimate_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def trace_error(self) -> float | None:
        return self.error(self.trace_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "row": self.row.label, "model": self.row.model, "spec": self.row.spec.to_dict(),
            "measured_bytes": self.measured_bytes, "measured_phase": self.measured_phase,
            "estimate_bytes": self.estimate_bytes, "estimate_phase": self.estimate_phase,
            "trace_bytes": self.trace_bytes, "rule_of_thumb_bytes": self.rule_of_thumb_bytes,
            "states_only_bytes": self.states_only_bytes, "estimate_error": self.estimate_error,
            "trace_error": self.trace_error, "rule_of_thumb_error": self.error(self.rule_of_thumb_bytes),
            "states_only_error": self.error(self.states_only_bytes), "by_category": self.by_category,
            "estimate_components": self.estimate_components, "seconds": self.seconds,
        }


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(device="cpu", **kw)


# The spec grid every scaled architecture runs: full and LoRA (several target sets), fp32 / bf16 /
# mixed-bf16, checkpointing none / full, eager / sdpa, several batch and sequence lengths. The bf16 rows
# are short: this CPU has no bf16 matrix units and torch's bf16 matmul with a long reduction (the
# lm_head's input gradient, K = vocabulary) runs at ~0.1 GFLOP/s here, so a step takes tens of seconds.
SPEC_GRID: tuple[RunSpec, ...] = (
    _spec(method="full", precision="fp32", attention="sdpa", batch=2, seq=128),
    _spec(method="lora", precision="fp32", attention="eager", batch=2, seq=96, targets=("all-linear",)),
    _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128, checkpointing="full"),
    _spec(method="lora", precision="bf16", attention="sdpa", batch=1, seq=32),
    _spec(method="lora", precision="mixed-bf16", attention="eager", batch=1, seq=32, targets=("all-linear",)),
)

# Dense-MLP layers among MoE ones (issue 13): Qwen3-MoE's mlp_only_layers (layer 0 a Qwen3MoeMLP of intermediate_size,
# 6144 in the real model, scaled here as its hidden) and DeepSeek-V3 with checkpointing over its dense and MoE layers.
LAYER_KIND_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("qwen3-30b-a3b", {"mlp_only_layers": [0], "intermediate_size": 768},
     _spec(method="full", precision="fp32", attention="sdpa", batch=2, seq=64)),
    ("qwen3-30b-a3b", {"mlp_only_layers": [0], "intermediate_size": 768},
     _spec(method="lora", precision="mixed-bf16", attention="eager", batch=1, seq=32, checkpointing="full")),
    ("moonlight-16b-a3b", {}, _spec(method="full", precision="fp32", attention="eager", batch=2, seq=64,
                                    checkpointing="full")),
    ("deepseek-v3", {}, _spec(method="lora", precision="bf16", attention="eager", batch=1, seq=64,
                              targets=("all-linear",))),
)

# Sliding layers past their window (issue 13): Gemma 3's sdpa calls take a mask in its five sliding layers of six
# once the sequence reaches the window (512 in the real model; 64 here, so that s=128 crosses it).
WINDOW_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("gemma-3-1b", {"sliding_window": 64}, _spec(method="lora", precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("gemma-3-1b", {"sliding_window": 64}, _spec(method="lora", precision="fp32", attention="sdpa", batch=2, seq=128,
                                                 checkpointing="full")),
    ("gemma-3-1b", {"sliding_window": 64}, _spec(method="full", precision="fp32", attention="sdpa", batch=1, seq=128)),
)

# Other optimizers, on full fine-tunes (where the optimizer step is the peak): transformers' Adafactor, as the HF
# Trainer's optim="adafactor" builds it. fp32 rows on three architectures (a tied embedding with GQA, GPT-2's
# Conv1D and learned positions, Mixtral's fused 3-D experts and router), and bf16 rows, where Adafactor
# upcasts each gradient and parameter to fp32 while it updates them. (GPT-2 at seq 64: at 128 its backward,
# not the optimizer step, is the peak.)
OPTIMIZER_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="full", optimizer="adafactor", precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("gpt2", _spec(method="full", optimizer="adafactor", precision="fp32", attention="sdpa", batch=2, seq=64)),
    ("mixtral-8x7b", _spec(method="full", optimizer="adafactor", precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("qwen2.5-0.5b", _spec(method="full", optimizer="adafactor", precision="bf16", attention="sdpa", batch=1, seq=32)),
    ("mixtral-8x7b", _spec(method="full", optimizer="adafactor", precision="bf16", attention="sdpa", batch=1, seq=32)),
)

# Rows with dropout beyond the defaults (GPT-2 and OPT train with theirs in every row of the grid): PEFT's
# lora_dropout, and attention / residual dropout set in configs that have none by default. On CPU, sdpa with
# attention dropout runs the math path (the CPU flash kernel has no dropout).
DROPOUT_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("gpt2", {}, _spec(method="lora", precision="fp32", attention="sdpa", batch=2, seq=128, lora_dropout=0.1)),
    ("opt-1.3b", {}, _spec(method="lora", precision="bf16", attention="eager", batch=1, seq=32,
                           targets=("all-linear",), lora_dropout=0.05)),
    ("llama-3.2-1b", {"attention_dropout": 0.1}, _spec(method="full", precision="fp32", attention="sdpa", batch=2,
                                                       seq=128)),
    ("qwen2.5-0.5b", {"attention_dropout": 0.1}, _spec(method="lora", precision="fp32", attention="eager", batch=2,
                                                       seq=96, targets=("all-linear",), lora_dropout=0.1)),
    ("pythia-1.4b", {"attention_dropout": 0.1, "hidden_dropout": 0.1},
     _spec(method="full", precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("phi-3-mini", {"attention_dropout": 0.1, "resid_pdrop": 0.1},
     _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128, checkpointing="full",
           targets=("qkv_proj", "o_proj"))),
)

# A fast subset for `make test` (a regression in any engine fails CI): eight rows, seven architectures, fp32
# but Mixtral (see above for why bf16 rows are left to the benchmark); gpt2 and opt train with dropout, and
# Llama runs twice, the second time with Adafactor.
FAST_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="lora", precision="fp32", attention="sdpa", batch=1, seq=64)),
    ("qwen2.5-0.5b", _spec(method="full", precision="fp32", attention="sdpa", batch=1, seq=64)),
    ("gemma-2-2b", _spec(method="lora", precision="fp32", attention="eager", batch=1, seq=64,
                         targets=("all-linear",))),
    ("phi-3-mini", _spec(method="lora", precision="fp32", attention="sdpa", batch=2, seq=64, checkpointing="full",
                         targets=("qkv_proj", "o_proj"))),
    ("gpt2", _spec(method="full", precision="fp32", attention="eager", batch=2, seq=64)),
    ("mixtral-8x7b", _spec(method="lora", precision="bf16", attention="sdpa", batch=1, seq=32)),
    ("opt-1.3b", _spec(method="lora", precision="fp32", attention="sdpa", batch=1, seq=64, lora_dropout=0.1)),
    ("llama-3.2-1b", _spec(method="full", optimizer="adafactor", precision="fp32", attention="sdpa", batch=1, seq=64)),
)


def cuda_matrix() -> list[MatrixRow]:
    """Full-size catalogue models (not scaled) for a GPU machine, plus the scaled MoE at CUDA size."""
    rows = [MatrixRow(model=m, config=dict(lookup(m).config), spec=_fit_spec(m, s)) for m, s in CUDA_ROWS]
    rows.append(MatrixRow(model="mixtral-8x7b", config=_scaled("mixtral-8x7b"),
                          spec=cuda_spec(method="lora", precision="bf16", batch=4, seq=1024, targets=("all-linear",))))
    return rows


def _scaled(name: str) -> dict[str, Any]:
    for model, hidden, layers in SCALED_MODELS:
        if model == name:
            return scaled_config(model, hidden, layers)
    raise KeyError(name)


def _fit_spec(model: str, spec: RunSpec) -> RunSpec:
    """What the grid's spec becomes on ``model`` (:meth:`Architecture.runnable_spec
    <memfit.estimate.arch.Architecture.runnable_spec>`): e.g. eager attention for Gemma-2, which transformers
    runs without sdpa, and Phi-3's fused projections named where PEFT has no default LoRA targets."""
    return lookup(model).shape.arch.runnable_spec(spec)


def full_matrix() -> list[MatrixRow]:
    """Every scaled architecture times every spec of the grid, then the dropout rows, the other optimizers'
    rows, the rows past a sliding window and those with dense-MLP layers among MoE ones."""
    return [MatrixRow(model=m, config=scaled_config(m, h, n), spec=_fit_spec(m, s))
            for m, h, n in SCALED_MODELS for s in SPEC_GRID] + dropout_matrix() + optimizer_matrix() + window_matrix() \
        + layer_kind_matrix() + offload_matrix() + quant_matrix() + dora_matrix() + peft_layer_matrix()


def layer_kind_matrix() -> list[MatrixRow]:
    """Rows whose MLP kind varies per layer (DeepSeek-V3's dense-first layers, Qwen3-MoE's ``mlp_only_layers``)."""
    return _with_fields(LAYER_KIND_ROWS)


def offload_matrix(rows: tuple[tuple[str, RunSpec], ...] = OFFLOAD_ROWS) -> list[MatrixRow]:
    """The --offload rows (:mod:`memfit.validate.rows_offload`; ``FAST_OFFLOAD_ROWS`` for the fast subset)."""
    return [MatrixRow(model=m, config=_scaled(m), spec=_fit_spec(m, s)) for m, s in rows]


def quant_matrix(*, fast: bool = False) -> list[MatrixRow]:
    """bitsandbytes bases and optimizers, and the AdamW kernels (:mod:`memfit.validate.rows_quant`), at hidden 256
    and 2 layers (Mistral is not among SCALED_MODELS)."""
    from memfit.validate.rows_quant import FAST_QUANT_ROWS, QUANT_ROWS

    return [MatrixRow(model=m, config=scaled_config(m, 256, 2), spec=_fit_spec(m, s))
            for m, s in (FAST_QUANT_ROWS if fast else QUANT_ROWS)]


def _with_fields(rows: Iterable[tuple[str, dict[str, Any], RunSpec]]) -> list[MatrixRow]:
    """Matrix rows of (model, config fields over its scaled config, spec)."""
    return [MatrixRow(model=m, config={**_scaled(m), **fields}, spec=_fit_spec(m, s)) for m, fields, s in rows]


def dora_matrix(rows: tuple[tuple[str, dict[str, Any], RunSpec], ...] = DORA_ROWS + PEFT_OPTION_ROWS
                ) -> list[MatrixRow]:
    """The --dora and PEFT option rows (:mod:`memfit.validate.rows_dora`; ``FAST_DORA_ROWS`` for the fast subset)."""
    return _with_fields(rows)


def peft_layer_matrix(rows: tuple[tuple[str, dict[str, Any], RunSpec], ...] | None = None) -> list[MatrixRow]:
    """The --layers-to-transform, --bias and --trainable-tokens rows (:mod:`memfit.validate.rows_peft`, and on MoE
    models :mod:`memfit.validate.rows_moe_peft`; ``FAST_*`` for the fast subsets)."""
    from memfit.validate.rows_moe_peft import MOE_PEFT_ROWS
    from memfit.validate.rows_peft import BIAS_ROWS, LAYER_ROWS, TOKEN_ROWS

    return _with_fields(LAYER_ROWS + BIAS_ROWS + TOKEN_ROWS + MOE_PEFT_ROWS if rows is None else rows)


def dropout_matrix() -> list[MatrixRow]:
    return _with_fields(DROPOUT_ROWS)


def window_matrix() -> list[MatrixRow]:
    return _with_fields(WINDOW_ROWS)


def optimizer_matrix() -> list[MatrixRow]:
    return [MatrixRow(model=m, config=_scaled(m), spec=_fit_spec(m, s)) for m, s in OPTIMIZER_ROWS]


def fast_matrix() -> list[MatrixRow]:
    return [MatrixRow(model=m, config=_scaled(m), spec=s) for m, s in FAST_ROWS]


def measure_row(row: MatrixRow) -> Any:
    """Two real training steps on ``row.spec.device`` (the first allocates the optimizer state): a PointResult."""
    from memfit.measure.point import measure_point

    return measure_point(row.config, row.spec, steps=0, warmup=0, device=row.spec.device)


def run_row(row: MatrixRow, *, with_trace: bool = True, measured: Any = None) -> AgreementRow:
    """Measure the row (or take a measurement made elsewhere, e.g. on a GPU machine), estimate it, trace it."""
    from memfit.estimate import estimate_memory

    t0 = time.perf_counter()
    if measured is None:
        measured = measure_row(row)
    if not measured.fits or measured.peak_bytes is None:
        raise RuntimeError(f"{row.label}: did not run ({measured.error})")
    trace_bytes = None
    if with_trace:
        from memfit.errors import MemfitError
        from memfit.trace.engine import trace_step

        try:
            trace_bytes = trace_step(row.config, row.spec, name=row.model).peak_bytes
        except MemfitError:  # a setting trace refuses (e.g. an fp32 MoE): reported as n/a
            trace_bytes = None
    est = estimate_memory(row.shape, row.spec)
    shape, s = row.shape, row.spec
    states = est.model_states.total
    rot = states + shape.n_layers * s.batch * s.seq * shape.hidden * RULE_OF_THUMB_BYTES
    return AgreementRow(
        row=row, measured_bytes=measured.peak_bytes, measured_phase=measured.peak_phase or "?",
        estimate_bytes=est.peak_bytes, estimate_phase=est.peak_phase, trace_bytes=trace_bytes,
        rule_of_thumb_bytes=rot, states_only_bytes=states, by_category=dict(measured.by_category),
        estimate_components=dict(est.components), seconds=time.perf_counter() - t0,
    )


def run_matrix(rows: Iterable[MatrixRow], *, with_trace: bool = True,
               on_row: Callable[[AgreementRow], None] | None = None) -> list[AgreementRow]:
    out = []
    for row in rows:
        result = run_row(row, with_trace=with_trace)
        out.append(result)
        if on_row:
            on_row(result)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class AgreementSummary:
    rows: int
    architectures: int
    estimate_median_abs: float
    estimate_max_abs: float
    trace_median_abs: float | None
    trace_max_abs: float | None
    rule_of_thumb_median_abs: float
    states_only_median_abs: float


def summarise(results: list[AgreementRow]) -> AgreementSummary:
    est = [abs(r.estimate_error) for r in results]
    tr = [abs(e) for r in results if (e := r.trace_error) is not None]
    rot = [abs(r.error(r.rule_of_thumb_bytes) or 0.0) for r in results]
    base = [abs(r.error(r.states_only_bytes) or 0.0) for r in results]
    return AgreementSummary(
        rows=len(results), architectures=len({lookup(r.row.model).shape.model_type for r in results}),
        estimate_median_abs=statistics.median(est), estimate_max_abs=max(est),
        trace_median_abs=statistics.median(tr) if tr else None, trace_max_abs=max(tr) if tr else None,
        rule_of_thumb_median_abs=statistics.median(rot), states_only_median_abs=statistics.median(base),
    )
