"""The ordered plan on the toy memory model (tests/advise/toy_memory.py): every decision worked by hand."""

from __future__ import annotations

import pytest
from toy_memory import GIB, MIB, toy_estimate

from memfit.advise import OrderedPlan, PeakCache, Setup, TimeModel, fit
from memfit.advise.remedies import RANK, Context
from memfit.estimate import RunSpec, Target, resolve_model

SHAPE = resolve_model("llama-3.2-1b")


def test_checkpointing_then_the_largest_micro_batch_that_fits() -> None:
    """LoRA r64, b4 x s2048, sdpa, standard loss, on a 24 GiB budget (headroom 0, CPU: reserved = peak).
    As given: 10 + 1 (adapter) + 4 x 2 x 4 (activations) + 4 x 2 (logits) = 51 GiB: does not fit.
    longest_example and packing need data, attention is already sdpa: skipped. Checkpointing: activations
    4 x 2 x 1 = 8 -> 27 GiB, saves 24, still over. Micro-batch (effective 4): b=2 x accum 2 -> 10 + 1 + 4 + 4
    = 19 GiB fits, so b=1 is not needed; saves 8 GiB; time (1 + 256/4096) / (1 + 256/8192) = 1.0303."""
    spec = RunSpec(rank=64, batch=4, seq=2048, device="cpu")
    report = fit(SHAPE, spec, Target.resolve("24GiB", "0"), estimate=toy_estimate, search=False)
    assert report.initial_peak_bytes == 51 * GIB and not report.fits_initially
    assert [(s.action, s.peak_bytes, s.saved_bytes) for s in report.steps] == [
        ("checkpointing", 27 * GIB, 24 * GIB), ("micro_batch", 19 * GIB, 8 * GIB)]
    ckpt, micro = report.steps
    assert not ckpt.fits and micro.fits and report.fits
    assert ckpt.time_factor == pytest.approx(4 / 3) and ckpt.gives_up == "time"
    assert (micro.setup.spec.batch, micro.setup.spec.grad_accum) == (2, 2)
    assert micro.time_factor == pytest.approx(1.0625 / 1.03125)
    assert dict(micro.facts) == {"batch": 2, "grad_accum": 2, "effective": 4, "from_batch": 4, "from_grad_accum": 1}
    assert [(s.action, s.reason) for s in report.skipped] == [
        ("longest_example", "needs_data"), ("attention", "already"), ("packing", "needs_data")]
    assert report.final_cost.time_factor == pytest.approx(4 / 3 * 1.0625 / 1.03125)
    # rank 64 -> 8 alone: the adapter 1 GiB -> 128 MiB saves 896 MiB: 50.125 GiB, still over
    r = report.rank_reduction
    assert r is not None and r.saved_bytes == 896 * MIB and r.peak_after_bytes == 51 * GIB - 896 * MIB
    assert not r.fits_after


def test_a_step_that_saves_too_little_is_skipped() -> None:
    """Eager attention, r64, b1 x s1024, checkpointing full, chunked loss, budget 11 GiB: 10 + 1 + 1 x 1 x 1 x 2
    = 13 GiB. attention eager -> sdpa saves 1 GiB: 12 GiB, over; checkpointing, micro-batch and the loss are
    where they go already; one GPU, no sharding. The sequence (fallback rule) 1024 -> 960, 896, ..., 512 (half):
    activations b x s // 1024 = 0 below 1024, so 960 already gives 11 GiB: fits."""
    spec = RunSpec(rank=64, batch=1, seq=1024, attention="eager", checkpointing="full", loss="chunked", device="cpu")
    report = fit(SHAPE, spec, Target.resolve("11GiB", "0"), estimate=toy_estimate, search=False)
    assert [(s.action, s.peak_bytes) for s in report.steps] == [("attention", 12 * GIB), ("seq_len", 11 * GIB)]
    assert report.steps[1].setup.spec.seq == 960 and report.steps[1].gives_up == "task"
    assert dict(report.steps[1].facts) == {"from_seq": 1024, "to_seq": 960, "truncated": None}
    reasons = {s.action: (s.reason, dict(s.facts)) for s in report.skipped}
    assert reasons["checkpointing"] == ("already", {"value": "full"})
    assert reasons["micro_batch"] == ("micro_batch_one", {})
    assert reasons["chunked_loss"] == ("already", {"value": "chunked"})
    assert reasons["sharding"] == ("one_gpu", {})


def test_a_step_that_saves_less_than_half_a_percent_of_the_budget_is_listed_not_taken() -> None:
    """LoRA r16, b4 x s2048 on a 40 GiB budget: 0.5% of it is 204.8 MiB. Rank 16 -> 8 shrinks the adapter
    256 -> 128 MiB: saves 128 MiB, too little to be a step."""
    spec = RunSpec(rank=16, batch=4, seq=2048, device="cpu")
    target = Target.resolve("40GiB", "0")
    plan = OrderedPlan(PeakCache(SHAPE, toy_estimate), target,
                       Context(initial=Setup(spec=spec), time_model=TimeModel(), data=None, shape=SHAPE))
    assert plan.min_saving == int(40 * GIB * 0.005)
    plan.apply(RANK)
    assert plan.steps == [] and plan.current.spec.rank == 16
    assert [(s.action, s.reason, dict(s.facts)) for s in plan.skipped] == [
        ("rank", "saves_too_little", {"saved_bytes": 128 * MIB})]


def test_sharding_comes_before_giving_up_full_fine_tuning() -> None:
    """Full fine-tune over 8 GPUs, b1 x s2048, budget 40 GiB: 16 + 16 + 32 + 1 x 2 x 4 + 2 = 74 GiB.
    Checkpointing -> 68; micro-batch is 1 already; the chunked loss -> 66; sharding zero1 (DDP + torch's
    ZeroRedundancyOptimizer) divides the AdamW states but adds DDP's gradient buckets: 16 + 16 + 16 + 32/8 + 2 = 54;
    zero2 (FSDP2, gathered from forward to backward) 16/8 + 16 gathered + 16 + 4 + 2 = 40 GiB fits."""
    spec = RunSpec(method="full", batch=1, seq=2048, gpus=8, device="cpu")
    report = fit(SHAPE, spec, Target.resolve("40GiB", "0"), estimate=toy_estimate, search=False)
    assert [(s.action, s.peak_bytes) for s in report.steps] == [
        ("checkpointing", 68 * GIB), ("chunked_loss", 66 * GIB), ("sharding", 40 * GIB)]
    step = report.steps[-1]
    assert step.setup.spec.sharding == "zero2" and step.setup.spec.method == "full" and step.time_factor == 1.0
    # llama-3.2-1b's real bf16 states (1,235,814,400 parameters x 2 B) gathered once and reduce-scattered once
    assert dict(step.facts) == {"stage": "zero2", "gpus": 8, "all_gather_bytes": 2_471_628_800,
                                "reduce_scatter_bytes": 2_471_628_800, "all_reduce_bytes": 0, "nodes": 1}
    alone = fit(SHAPE, spec.with_(gpus=1), Target.resolve("40GiB", "0"), estimate=toy_estimate, search=False)
    assert "sharding" not in [s.action for s in alone.steps]
    assert ("sharding", "one_gpu") in [(s.action, s.reason) for s in alone.skipped]


def test_nothing_fits_names_the_smallest_gpu() -> None:
    """A 2 GiB card, headroom 0: LoRA r16 b1 x s1024 with everything applied still holds the qlora base 4 GiB.
    The plan ends at qlora, rank 8, seq 512: 4 + 128 MiB + 0 (b x s // 1024 = 0) = 4.125 GiB: does not fit;
    the smallest GPU of the table it fits with the same headroom (0) is named."""
    from memfit.estimate import gpu_table

    spec = RunSpec(rank=16, batch=1, seq=1024, device="cpu")
    report = fit(SHAPE, spec, Target.resolve("2GiB", "0"), estimate=toy_estimate, search=False)
    assert not report.fits and report.final_peak_bytes == 4 * GIB + 128 * MIB
    final = report.final.spec
    assert (final.method, final.rank, final.seq, final.checkpointing) == ("qlora", 8, 512, "full")
    g = report.smallest_gpu_final
    assert g is not None and g == next(x for x in gpu_table() if x.bytes >= report.final_peak_bytes)
