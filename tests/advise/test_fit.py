"""``fit()`` on real estimates: the lesson's scenario and its edges. The advisor's decisions are checked against
the rule of "fits" (reserved + headroom <= the GPU, reserved the estimate's caching-allocator replay + 512 MiB of
CUDA context: worked by hand in tests/estimate/test_reserved.py) and hand-worked byte counts, never by the
advisor's own figures; the decisions themselves are worked by hand on a toy model in test_ordered.py and
test_search.py."""

from __future__ import annotations

import pytest

from memfit.advise import DataProfile, TimeModel, fit
from memfit.estimate import RunSpec, Target, estimate_memory, gpu_table, resolve_gpu, resolve_model

GIB = 1024**3
MIB = 1024**2
BUDGET_24GIB = int(24 * GIB * 0.95)  # 24 GiB less the default 5% headroom, by hand: what the step may reserve
LESSON = ["checkpointing", "micro_batch", "seq_len", "quantize", "rank"]  # the lesson's "order to try things"


def _need(model: str, spec: RunSpec) -> int:
    """What the CUDA step of ``spec`` reserves: the estimate's reserved figure (its caching-allocator replay + the
    CUDA context; the rule's stated figures when sharded), the advisor's input, estimated apart here."""
    return estimate_memory(resolve_model(model), spec).reserved_bytes


@pytest.fixture(scope="module")
def lesson() -> tuple[RunSpec, object]:
    """Practice question 3: a LoRA run out of memory; a colleague suggests rank 64 -> 8."""
    spec = RunSpec(method="lora", rank=64, batch=4, seq=2048, precision="bf16")
    return spec, fit(resolve_model("llama-2-7b"), spec, Target.resolve("24GiB"))


def test_lesson_rank_does_not_fit_checkpointing_does(lesson) -> None:
    """Rank 64 -> 8 on q_proj, v_proj of Llama-2-7B (32 layers, 4096 wide), at the loss's backward, by hand:
    32 x (64 - 8) x (4096 + 4096) x 2 linears = 29,360,128 fewer fp32 adapter parameters x 12 B (weight 4 +
    AdamW's two moments 8; no gradients yet) = 352,321,536 B, + the fp32 rank-wide output of each lora_A saved
    for lora_B's backward: 32 x 2 x (4 x 2048 tokens) x 56 x 4 B = 117,440,512 B. Saved: 469,762,048 B (470 MB),
    against tens of GiB of activations that checkpointing removes."""
    spec, report = lesson
    assert report.budget_bytes == BUDGET_24GIB
    assert not report.fits_initially and _need("llama-2-7b", spec) > BUDGET_24GIB
    r = report.rank_reduction
    assert r is not None and (r.from_rank, r.to_rank) == (64, 8)
    assert r.saved_bytes == 29_360_128 * 12 + 32 * 2 * 8192 * 56 * 4 == 469_762_048
    assert r.trainable_from - r.trainable_to == 29_360_128
    assert not r.fits_after and _need("llama-2-7b", spec.with_(rank=8)) > BUDGET_24GIB
    # checkpointing alone makes it fit: the plan stops after that one step
    assert [s.action for s in report.steps] == ["checkpointing"]
    step = report.steps[0]
    assert step.fits and _need("llama-2-7b", step.setup.spec) == step.reserved <= BUDGET_24GIB
    assert step.saved_bytes > 10 * r.saved_bytes
    assert step.time_factor == pytest.approx(4 / 3)  # one extra forward with fwd:bwd = 1:2
    assert report.fits


def test_lesson_json_shape(lesson) -> None:
    _, report = lesson
    d = report.to_dict()
    for key in ("fits_initially", "steps", "final", "fits", "cheapest", "gpu", "gpus", "rank_reduction"):
        assert key in d
    assert set(d["steps"][0]) >= {"action", "spec", "peak_bytes", "saved_bytes", "time_factor", "gives_up", "facts"}
    assert "cost" not in d["steps"][0]  # the sentences are the report's
    assert d["final"]["spec"]["checkpointing"] == "full"
    assert RunSpec.from_dict(d["final"]["spec"]).checkpointing == "full"  # the spec round-trips
    assert d["seq_rule"] == "fallback" and d["skipped"][0] == {"action": "longest_example", "reason": "needs_data",
                                                                "facts": {}}


@pytest.mark.parametrize("model, spec, gpu, headroom", [
    ("llama-3.1-8b", RunSpec(method="lora", rank=64, targets=("all-linear",), batch=8, seq=2048), "24GiB", "10%"),
    ("llama-3.1-8b", RunSpec(method="lora", rank=64, batch=8, seq=4096), "24GiB", "25%"),
    ("qwen2.5-7b", RunSpec(method="full", batch=4, seq=2048, attention="eager"), "A100-80GB", "2GiB"),
])
def test_final_plan_fits_with_headroom(model: str, spec: RunSpec, gpu: str, headroom: str) -> None:
    report = fit(resolve_model(model), spec, Target.resolve(gpu, headroom))
    assert report.fits and not report.fits_initially
    gpu_bytes = {"24GiB": 24 * GIB, "A100-80GB": 80 * GIB}[gpu]
    budget = gpu_bytes - 2 * GIB if headroom.endswith("GiB") else int(gpu_bytes * (1 - int(headroom[:-1]) / 100))
    assert report.budget_bytes == budget
    assert _need(model, report.final.spec) <= budget < _need(model, spec)
    # the last step is the first that fits, and each one saved at least 0.5% of the budget (the plan's rule)
    assert all(not s.fits for s in report.steps[:-1]) and report.steps[-1].fits
    assert all(s.saved_bytes >= max(MIB, int(budget * 0.005)) for s in report.steps)
    assert [_need(model, s.setup.spec) <= budget for s in report.steps] == [s.fits for s in report.steps]
    # the cheapest configuration fits too, and gives up no more than the ordered plan
    c = report.cheapest
    assert c.setup is not None and c.peak_bytes is not None and c.cost is not None
    assert _need(model, c.setup.spec) == c.reserved_bytes <= budget
    assert c.cost.key() <= report.final_cost.key()


def test_order_follows_the_lesson_and_nothing_fits_names_a_bigger_gpu() -> None:
    spec = RunSpec(method="lora", rank=16, batch=4, seq=4096)
    report = fit(resolve_model("llama-3.1-70b"), spec, Target.resolve("T4"))
    actions = [s.action for s in report.steps]
    assert [a for a in actions if a in LESSON] == LESSON  # all five, in the lesson's order
    assert not report.fits
    final = report.final.spec
    assert (final.checkpointing, final.batch, final.method, final.rank) == ("full", 1, "qlora", 8)
    assert final.seq == 2048  # the fallback rule stops at half the sequence
    # the smallest GPU named fits the final plan with 5% headroom; every smaller one does not
    need = _need("llama-3.1-70b", report.final.spec)
    g = report.smallest_gpu_final
    assert g is not None and need <= int(g.bytes * 0.95)
    assert all(need > int(other.bytes * 0.95) for other in gpu_table() if other.bytes < g.bytes)
    assert g.bytes > 15 * GIB
    # the spec as given fits no single GPU of the table: 2 B x 70.6e9 frozen weights alone are 131 GiB
    assert report.initial_peak_bytes > 2 * 70_553_706_496
    assert all(_need("llama-3.1-70b", spec) > int(other.bytes * 0.95) for other in gpu_table())
    assert report.smallest_gpu_initial is None
    d = report.to_dict()
    assert d["smallest_gpu"]["final"]["name"] == g.name
    assert d["cheapest"]["fits"] is False


def test_micro_batch_keeps_the_effective_batch() -> None:
    spec = RunSpec(method="lora", rank=64, targets=("all-linear",), batch=6, grad_accum=3, seq=2048,
                   checkpointing="full")
    report = fit(resolve_model("llama-3.1-8b"), spec, Target.resolve("24GiB"))
    step = next(s for s in report.steps if s.action == "micro_batch")
    b, ga = step.setup.spec.batch, step.setup.spec.grad_accum
    assert b < 6 and b * ga == 6 * 3
    assert dict(step.facts) == {"batch": b, "grad_accum": ga, "effective": 18, "from_batch": 6, "from_grad_accum": 3}
    # the largest micro-batch dividing 18 that fits: a larger divisor would not (those estimates are the
    # advisor's inputs here, not its figures)
    larger = [d for d in (2, 3, 6, 9, 18) if b < d <= 6]
    assert all(_need("llama-3.1-8b", spec.with_(batch=d, grad_accum=18 // d)) > BUDGET_24GIB
               for d in larger)


def test_seq_step_with_data_reports_the_truncation() -> None:
    # 1,000 examples of 4, 8, ..., 4000 tokens: p95 = 3800 (nearest rank), rounded up to 64 -> 3840
    lengths = [4 * (i + 1) for i in range(1000)]
    prof = DataProfile(source="synthetic", lengths=tuple(lengths), p95=3800, recommended_seq_len=3840, batch=4,
                       seq_len=4096, waste_random=0.3, waste_packed=0.01, peak_len=4000)
    spec = RunSpec(method="lora", rank=16, batch=4, seq=4096)
    report = fit(resolve_model("llama-3.1-70b"), spec, Target.resolve("T4"), data=prof)
    actions = [s.action for s in report.steps]
    assert actions.index("longest_example") < actions.index("checkpointing")  # free: nothing is cut at 4032
    assert report.steps[0].setup.spec.seq == 4032  # 4000 rounded up to 64
    seq_step = next(s for s in report.steps if s.action == "seq_len")
    L = seq_step.setup.spec.seq
    assert 3840 <= L < 4032 and L % 64 == 0
    assert seq_step.facts["truncated"] == sum(1 for n in lengths if n > L) and seq_step.facts["examples"] == 1000
    packing = next(s for s in report.steps if s.action == "packing")
    # the effective batch kept: 4 examples of mean (4 + 4000) / 2 = 2002 tokens (all below 4032) fill
    # 4 x 2002 / (4032 x 0.99) = 2.006 packed rows -> 2 rows, one micro-step of 2
    assert packing.setup.packing and packing.setup.spec.seq == 4032
    assert (packing.setup.spec.batch, packing.setup.spec.grad_accum) == (2, 1)
    assert packing.facts["mean_tokens"] == 2002.0 and packing.facts["examples"] == 4


def test_sharding_over_gpus_makes_a_full_fine_tune_fit() -> None:
    """Llama-3.1-8B full bf16, b1 x s2048, checkpointed, on 40 GB A100s: one replica holds 2 + 2 + 4 (AdamW in
    bf16) = 8 B per parameter = 64.2 GB of model states alone, more than the card; over 8 GPUs a stage that
    divides them fits, before the plan gives up full fine-tuning."""
    spec = RunSpec(method="full", batch=1, seq=2048, checkpointing="full", precision="bf16")
    shape = resolve_model("llama-3.1-8b")
    alone = fit(shape, spec, Target.resolve("A100-40GB"), search=False)
    assert not any(s.action == "sharding" for s in alone.steps)
    assert alone.initial_peak_bytes > 8 * 8_030_261_248
    report = fit(shape, spec.with_(gpus=8), Target.resolve("A100-40GB"))
    step = next(s for s in report.steps if s.action == "sharding")
    assert step.setup.spec.sharding in ("zero1", "zero2", "zero3") and step.facts["gpus"] == 8
    assert step.setup.spec.method == "full"  # sharding came before giving up full fine-tuning
    a100 = resolve_gpu("A100-40GB").bytes  # 40,960 MiB as nvidia-smi reports it
    assert step.fits and _need("llama-3.1-8b", step.setup.spec) <= int(a100 * 0.95)


def test_fits_as_given() -> None:
    spec = RunSpec(method="lora", rank=16, batch=1, seq=512)
    report = fit(resolve_model("qwen2.5-0.5b"), spec, Target.resolve("24GiB"))
    assert report.fits_initially and report.fits and report.steps == ()
    assert report.cheapest.setup == report.initial and report.cheapest.changes == {}


def test_measured_checkpointing_factor_replaces_the_model() -> None:
    spec = RunSpec(method="lora", rank=64, batch=4, seq=2048)
    tm = TimeModel(checkpoint_factor=1.25, source="measured: median of 3 point(s) in m.json")
    report = fit(resolve_model("llama-2-7b"), spec, Target.resolve("24GiB"), time_model=tm, search=False)
    step = report.steps[0]
    assert step.action == "checkpointing" and step.time_factor == 1.25
    assert report.final_cost.time_factor == pytest.approx(1.25)
    assert report.to_dict()["time_model"]["source"] == "measured: median of 3 point(s) in m.json"


def test_breakdown_bytes(lesson) -> None:
    _, report = lesson
    b = report.breakdown()
    assert b["budget"] == BUDGET_24GIB
    assert b["steps/1-checkpointing/peak"] == b["final/peak"] == report.steps[0].peak_bytes
    assert b["initial/peak"] == report.initial_peak_bytes > b["final/peak"]


def test_fit_names_expandable_segments_when_the_allocator_replay_saves_notably() -> None:
    """GPT-2 full fine-tune, fp32, batch 8 x 1024 on CUDA (24 GiB: fits as it is). Its synthesised allocation
    sequence replayed through the caching allocator reserves more with torch's defaults than with
    expandable_segments:True, by >= 256 MiB and >= 2%: the report names PYTORCH_CUDA_ALLOC_CONF. On CPU nothing is
    replayed."""
    shape = resolve_model("gpt2")
    spec = RunSpec(device="cuda", method="full", precision="fp32", attention="sdpa", batch=8, seq=1024)
    report = fit(shape, spec, Target.resolve("24GiB"), search=False)
    assert report.allocator is not None and report.allocator.notable
    assert report.allocator.saving_bytes >= 256 * 1024**2
    d = report.to_dict()["allocator"]
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in d["message"]
    assert fit(shape, spec.with_(device="cpu"), Target.resolve("24GiB"), search=False).allocator is None


@pytest.mark.slow
def test_search_does_not_assume_a_4bit_base_is_smallest_on_moe() -> None:
    """Qwen3-30B-A3B LoRA r16 on attention, b4 s4096, A100-80GB: QLoRA leaves its fused experts unquantised and fp32
    (transformers 5.24 quantises nn.Linear only; PEFT upcasts the rest), 4 B per expert weight against LoRA's bf16
    2 B, so QLoRA is the larger run. The search's "if the least-memory candidates do not fit, nothing does" took
    only the QLoRA ones and answered "nothing fits"; a bf16 LoRA run with checkpointing fits (the ordered plan finds
    one too)."""
    spec = RunSpec(method="lora", rank=16, targets=("q_proj", "k_proj", "v_proj", "o_proj"), batch=4, seq=4096)
    shape = resolve_model("qwen3-30b-a3b")
    lora = estimate_memory(shape, spec.with_(checkpointing="full", batch=1))
    qlora = estimate_memory(shape, spec.with_(checkpointing="full", batch=1, method="qlora"))
    assert qlora.model_states.weights_frozen > lora.model_states.weights_frozen
    report = fit(shape, spec, Target.resolve("A100-80GB"))
    assert report.fits and report.cheapest.setup is not None
    assert report.cheapest.setup.spec.method == "lora"


def test_tied_trainable_tokens_leave_the_chunked_loss_out() -> None:
    """--trainable-tokens on tied embeddings (Llama-3.2-1B): the estimate does not model a fused loss head with the
    lm_head's merged table, so `memfit fit` skips the chunked loss (it raised the estimate's refusal from the middle
    of the plan) and no candidate it weighs uses it; the run still gets an answer."""
    spec = RunSpec(method="lora", batch=8, seq=4096, trainable_token_indices=(128000,))
    report = fit(resolve_model("llama-3.2-1b"), spec, Target.resolve("8GiB", None))
    assert {s.action: s.reason for s in report.skipped}["chunked_loss"] == "not_modelled"
    assert report.fits and report.cheapest is not None and report.cheapest.setup is not None
    assert report.cheapest.setup.spec.loss == "standard"
