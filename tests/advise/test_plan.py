"""The fit advisor on the lesson's scenario and its edges, every claim re-checked with an independent
call of the estimate (``estimate_memory``) and hand-worked figures."""

from __future__ import annotations

import pytest

from memfit.advise import DataProfile, Headroom, fit
from memfit.advise.sharding import shard_peak
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, estimate_memory, gpu_table, resolve_model

GIB = 1024**3
MIB = 1024**2
BUDGET_24GIB = int(24 * GIB * 0.95)  # 24 GiB less the default 5% headroom, by hand: what the step may reserve
LESSON = ["checkpointing", "micro_batch", "seq_len", "quantize", "rank"]  # the lesson's "order to try things"


def _peak(model: str, spec: RunSpec) -> int:
    return estimate_memory(resolve_model(model), spec).peak_bytes


def _need(peak: int) -> int:
    """What a CUDA step of ``peak`` allocated bytes reserves, by the rule's stated figures (memfit.estimate.fits):
    + 5% of the peak + 256 MiB (allocator) + 512 MiB (CUDA context)."""
    return peak + int(peak * 0.05) + 768 * MIB


@pytest.fixture(scope="module")
def lesson() -> tuple[RunSpec, object]:
    """Practice question 3: a LoRA run out of memory; a colleague suggests rank 64 -> 8."""
    spec = RunSpec(method="lora", rank=64, batch=4, seq=2048, precision="bf16")
    return spec, fit(resolve_model("llama-2-7b"), spec, gpu="24GiB")


def test_lesson_rank_does_not_fit_checkpointing_does(lesson) -> None:
    spec, report = lesson
    assert report.budget_bytes == BUDGET_24GIB
    # the run does not fit
    assert _need(_peak("llama-2-7b", spec)) > BUDGET_24GIB
    assert not report.fits_initially
    # rank 64 -> 8 alone does not make it fit, and saves far less than checkpointing
    rank8 = _peak("llama-2-7b", spec.with_(rank=8))
    assert _need(rank8) > BUDGET_24GIB
    assert report.rank_lesson is not None and not report.rank_lesson.fits_after
    assert report.rank_lesson.saved_bytes == _peak("llama-2-7b", spec) - rank8
    # checkpointing alone does: the advisor stops after that one step
    ckpt = _peak("llama-2-7b", spec.with_(checkpointing="full"))
    assert _need(ckpt) <= BUDGET_24GIB
    assert [s.action for s in report.steps] == ["checkpointing"]
    step = report.steps[0]
    assert step.peak_bytes == ckpt and step.fits
    assert step.saved_bytes == _peak("llama-2-7b", spec) - ckpt
    assert step.saved_bytes > 10 * report.rank_lesson.saved_bytes
    assert "x1.33" in step.cost  # one extra forward with fwd:bwd = 1:2 -> 4/3
    assert report.fits


def test_lesson_json_shape(lesson) -> None:
    _, report = lesson
    d = report.to_dict()
    for key in ("fits_initially", "steps", "final", "fits", "cheapest"):
        assert key in d
    assert set(d["steps"][0]) >= {"action", "spec", "peak_bytes", "saved_bytes", "cost"}
    assert d["final"]["spec"]["checkpointing"] == "full"
    assert RunSpec.from_dict(d["final"]["spec"]).checkpointing == "full"  # the spec round-trips


@pytest.mark.parametrize("model, spec, gpu, headroom", [
    ("llama-3.1-8b", RunSpec(method="lora", rank=64, targets=("all-linear",), batch=8, seq=2048), "24GiB", "10%"),
    ("llama-3.1-8b", RunSpec(method="lora", rank=64, batch=8, seq=4096), "24GiB", "25%"),
    ("qwen2.5-7b", RunSpec(method="full", batch=4, seq=2048, attention="eager"), "A100-80GB", "2GiB"),
])
def test_final_plan_fits_with_headroom(model: str, spec: RunSpec, gpu: str, headroom: str) -> None:
    report = fit(resolve_model(model), spec, gpu=gpu, headroom=Headroom.parse(headroom))
    assert report.fits and not report.fits_initially
    gpu_bytes = {"24GiB": 24 * GIB, "A100-80GB": 80 * GIB}[gpu]
    budget = gpu_bytes - 2 * GIB if headroom.endswith("GiB") else int(gpu_bytes * (1 - int(headroom[:-1]) / 100))
    final = RunSpec.from_dict(report.to_dict()["final"]["spec"])
    assert _need(_peak(model, final)) <= budget  # re-estimated independently
    assert report.final_peak_bytes == _peak(model, final)
    # every step saved what it claims, and the last one is the first that fits
    assert all(not s.fits for s in report.steps[:-1]) and report.steps[-1].fits
    peaks = [report.initial_peak_bytes] + [s.peak_bytes for s in report.steps]
    assert [a - b for a, b in zip(peaks, peaks[1:], strict=False)] == [s.saved_bytes for s in report.steps]
    # the cheapest configuration fits too, and gives up no more than the ordered path
    c = report.cheapest
    assert c.setup is not None and c.peak_bytes is not None and c.cost is not None
    assert _peak(model, c.setup.spec) == c.peak_bytes and _need(c.peak_bytes) <= budget
    assert c.cost.key() <= report.final_cost.key()


def test_order_follows_the_lesson_and_nothing_fits_names_a_bigger_gpu() -> None:
    spec = RunSpec(method="lora", rank=16, batch=4, seq=4096)
    report = fit(resolve_model("llama-3.1-70b"), spec, gpu="T4")
    actions = [s.action for s in report.steps]
    assert [a for a in actions if a in LESSON] == LESSON  # all five, in the lesson's order
    assert not report.fits
    final = report.final.spec
    assert (final.checkpointing, final.batch, final.method, final.rank) == ("full", 1, "qlora", 8)
    assert final.seq == 2048  # the fallback rule stops at half the sequence
    # the smallest GPU named fits the final plan with 5% headroom; every smaller one does not
    need = _need(_peak("llama-3.1-70b", final))
    g = report.smallest_gpu_final
    assert g is not None and need <= int(g.bytes * 0.95)
    assert all(need > int(other.bytes * 0.95) for other in gpu_table() if other.bytes < g.bytes)
    assert g.bytes > 15 * GIB
    # the spec as given (605 GiB) fits no single GPU of the table
    assert all(_need(_peak("llama-3.1-70b", spec)) > int(other.bytes * 0.95) for other in gpu_table())
    assert report.smallest_gpu_initial is None
    d = report.to_dict()
    assert d["smallest_gpu"]["final"]["name"] == g.name
    assert d["cheapest"]["fits"] is False


def test_micro_batch_keeps_the_effective_batch() -> None:
    spec = RunSpec(method="lora", rank=64, targets=("all-linear",), batch=6, grad_accum=3, seq=2048,
                   checkpointing="full")
    report = fit(resolve_model("llama-3.1-8b"), spec, gpu="24GiB")
    step = next(s for s in report.steps if s.action == "micro_batch")
    b, ga = step.setup.spec.batch, step.setup.spec.grad_accum
    assert b < 6 and b * ga == 6 * 3
    # the largest micro-batch dividing 18 that fits: a larger divisor would not
    larger = [d for d in (2, 3, 6, 9, 18) if b < d <= 6]
    assert all(_need(_peak("llama-3.1-8b", spec.with_(batch=d, grad_accum=18 // d))) > BUDGET_24GIB for d in larger)
    assert "nothing statistical" in step.cost


def test_seq_step_with_data_reports_the_truncation() -> None:
    # 1,000 examples of 4, 8, ..., 4000 tokens: p95 = 3800 (nearest rank), rounded up to 64 -> 3840
    lengths = [4 * (i + 1) for i in range(1000)]
    prof = DataProfile(source="synthetic", lengths=tuple(lengths), p95=3800, recommended_seq_len=3840, batch=4,
                       seq_len=4096, waste_random=0.3, waste_packed=0.01, peak_len=4000)
    spec = RunSpec(method="lora", rank=16, batch=4, seq=4096)
    report = fit(resolve_model("llama-3.1-70b"), spec, gpu="T4", data=prof)
    actions = [s.action for s in report.steps]
    assert actions.index("longest_example") < actions.index("checkpointing")  # free: nothing is cut at 4032
    assert report.steps[0].setup.spec.seq == 4032  # 4000 rounded up to 64
    seq_step = next(s for s in report.steps if s.action == "seq_len")
    L = seq_step.setup.spec.seq
    assert 3840 <= L < 4032 and L % 64 == 0
    cut = sum(1 for n in lengths if n > L)
    assert f"truncates {cut:,} of 1,000" in seq_step.cost
    packing = next(s for s in report.steps if s.action == "packing")
    # the effective batch kept: 4 examples of mean (4 + 4000) / 2 = 2002 tokens (all below 4032) fill
    # 4 x 2002 / (4032 x 0.99) = 2.006 packed rows -> 2 rows, one micro-step of 2
    assert packing.setup.packing and packing.setup.spec.seq == 4032
    assert round(4 * 2002 / (4032 * 0.99)) == 2
    assert (packing.setup.spec.batch, packing.setup.spec.grad_accum) == (2, 1)
    assert "4 examples x mean 2,002.0 tokens = 8,008 tokens" in packing.cost


def test_sharding_over_gpus_makes_a_full_fine_tune_fit() -> None:
    spec = RunSpec(method="full", batch=1, seq=2048, checkpointing="full", precision="bf16")
    shape = resolve_model("llama-3.1-8b")
    alone = fit(shape, spec, gpu="A100-40GB", search=False)
    assert not any(s.action == "sharding" for s in alone.steps)
    report = fit(shape, spec, gpu="A100-40GB", gpus=8)
    step = next(s for s in report.steps if s.action == "sharding")
    assert step.setup.sharding in ("zero1", "zero2", "zero3")
    assert step.setup.spec.method == "full"  # sharding came before giving up full fine-tuning
    est = estimate_memory(shape, step.setup.spec)
    per_gpu = shard_peak(est, shape, step.setup.spec, step.setup.sharding, 8).peak_bytes
    assert per_gpu == step.peak_bytes < est.peak_bytes
    # per-GPU bytes can drop by at most (N-1)/N of the model states and the optimizer step's scratch
    shardable = est.model_states.total + est.components["temporaries"]
    assert est.peak_bytes - per_gpu <= shardable * 7 // 8 + 8


def test_fits_as_given() -> None:
    spec = RunSpec(method="lora", rank=16, batch=1, seq=512)
    report = fit(resolve_model("qwen2.5-0.5b"), spec, gpu="24GiB")
    assert report.fits_initially and report.fits and report.steps == ()
    assert report.cheapest.setup == report.initial and report.cheapest.changes == {}


def test_bad_input() -> None:
    with pytest.raises(MemfitError, match="--gpu"):
        fit(resolve_model("gpt2"), RunSpec())
    with pytest.raises(MemfitError, match="--gpus"):
        fit(resolve_model("gpt2"), RunSpec(), gpu="24GiB", gpus=0)
    with pytest.raises(MemfitError, match="--headroom"):
        fit(resolve_model("gpt2"), RunSpec(), gpu="1GiB", headroom=Headroom.parse("2GiB"))


def test_measured_checkpointing_factor_replaces_the_model() -> None:
    from memfit.advise import TimeModel

    spec = RunSpec(method="lora", rank=64, batch=4, seq=2048)
    tm = TimeModel(checkpoint_factor=1.25, source="measured: median of 3 point(s) in m.json")
    report = fit(resolve_model("llama-2-7b"), spec, gpu="24GiB", time_model=tm, search=False)
    step = report.steps[0]
    assert step.action == "checkpointing" and step.time_factor == 1.25
    assert "x1.25" in step.cost and "measured" in step.cost
    assert report.final_cost.time_factor == pytest.approx(1.25)


def test_breakdown_bytes(lesson) -> None:
    _, report = lesson
    b = report.breakdown()
    assert b["initial/peak"] - b["steps/1-checkpointing/saved"] == b["steps/1-checkpointing/peak"] == b["final/peak"]
    assert b["budget"] == BUDGET_24GIB
