"""The exhaustive search: the candidate grid counted by hand, the cheapest fit on the toy memory model
(tests/advise/toy_memory.py) worked by hand, requirements and changes."""

from __future__ import annotations

from collections import Counter

import pytest
from toy_memory import GIB, toy_estimate, toy_peak

from memfit.advise import PeakCache, Setup, TimeModel, candidates, cheapest_fit, requirements, setup_changes
from memfit.advise.search import minimal_setups
from memfit.estimate import RunSpec, Target, resolve_model

SHAPE = resolve_model("llama-3.2-1b")


def test_the_grid_by_hand() -> None:
    """LoRA r64, b4, s2048, sdpa on CUDA, no data, one GPU: checkpointing none/full/every-2/sqrt (4) x seq 2048,
    3/4 of it 1536, half 1024 (3) x micro-batches dividing 4 (1, 2, 4: 3) x lora, qlora (2) x ranks 64, 32, 16,
    8 (4) x sdpa, flash (2) x standard, chunked (2) = 1,152; on CPU there is no flash: 576."""
    cands = list(candidates(Setup(spec=RunSpec(rank=64, batch=4, seq=2048)), data=None))
    assert len(cands) == 1152
    assert Counter(c.spec.rank for c in cands) == {64: 288, 32: 288, 16: 288, 8: 288}
    assert {c.spec.batch * c.spec.grad_accum for c in cands} == {4}  # the effective batch is kept
    cpu = list(candidates(Setup(spec=RunSpec(rank=64, batch=4, seq=2048, device="cpu")), data=None))
    assert len(cpu) == 576
    # over 8 GPUs every candidate comes in four shardings
    sharded = list(candidates(Setup(spec=RunSpec(rank=64, batch=4, seq=2048, gpus=8)), data=None))
    assert len(sharded) == 4 * 1152 and {c.spec.sharding for c in sharded} == {"none", "zero1", "zero2", "zero3"}


def test_the_cheapest_fit_by_hand() -> None:
    """LoRA r64, b4 x s2048, sdpa on CPU, 24 GiB budget (headroom 0), toy model. Ranked by what is given up,
    then time: only time is given up by the grid's seq-2048 LoRA r64 runs; their time factors are 1.0 (b4, no
    checkpointing: 10 + 1 + 32 + 8 = 51 GiB, chunked 43: over), 1.0303 (b2: 31 / 27 GiB, over), 1.0909
    ((1 + 256/2048) / (1 + 256/8192), b1: 10 + 1 + 8 + 2 = 21 GiB, fits; chunked 19 also fits at the same
    cost) and 4/3 with checkpointing. The tie goes to the fewest changed knobs: b1 x accum 4, standard loss."""
    spec = RunSpec(rank=64, batch=4, seq=2048, device="cpu")
    initial = Setup(spec=spec)
    c = cheapest_fit(PeakCache(SHAPE, toy_estimate), Target.resolve("24GiB", "0"), initial, time_model=TimeModel(),
                     data=None)
    assert c.setup is not None and c.cost is not None
    assert (c.setup.spec.batch, c.setup.spec.grad_accum, c.setup.spec.loss, c.setup.spec.checkpointing) == (
        1, 4, "standard", "none")
    assert c.peak_bytes == 21 * GIB == toy_peak(c.setup.spec)
    assert c.cost.time_factor == pytest.approx(1.125 / 1.03125) and c.cost.gives_up == "time"
    assert c.changes == {"batch": [4, 1], "grad_accum": [1, 4]} and c.needs == ()
    assert c.candidates == 576 and 0 < c.evaluated < 576


def test_nothing_fits_when_the_least_memory_candidates_do_not() -> None:
    """The least-memory candidates (b1, the shortest sequence, the lowest rank, chunked, checkpointed; every method's,
    since a 4-bit base is not always the smallest: MoE experts stay unquantised): qlora 4 GiB + rank 8 x 16 MiB on a
    4 GiB budget, lora larger still: over, so the search stops before ranking."""
    spec = RunSpec(rank=64, batch=4, seq=2048, device="cpu")
    minimal = minimal_setups(Setup(spec=spec), data=None)
    assert {(m.spec.method, m.spec.rank, m.spec.seq, m.spec.batch, m.spec.loss, m.spec.checkpointing)
            for m in minimal} == {(method, 8, 1024, 1, "chunked", ck) for method in ("qlora", "lora")
                                  for ck in ("full", "sqrt")}
    cache = PeakCache(SHAPE, toy_estimate)
    c = cheapest_fit(cache, Target.resolve("4GiB", "0"), Setup(spec=spec), time_model=TimeModel(), data=None)
    assert c.setup is None and c.candidates == 576 and cache.estimates == 4  # the four minimal runs only


def test_requirements_and_changes() -> None:
    a = Setup(spec=RunSpec(rank=16, batch=4, gpus=8))
    b = a.with_(packing=True, method="qlora", checkpointing="every-k", attention="flash", loss="chunked",
                sharding="zero2", batch=2, grad_accum=2)
    assert requirements(a, b) == ("segment_checkpointing", "flash_attention", "fused_cross_entropy", "packing",
                                  "zero2", "bitsandbytes")
    assert requirements(a, a.with_(checkpointing="full")) == ("gradient_checkpointing",)
    assert setup_changes(a, b) == {"method": ["lora", "qlora"], "batch": [4, 2], "grad_accum": [1, 2],
                                   "checkpointing": ["none", "every-k"], "attention": ["sdpa", "flash"],
                                   "loss": ["standard", "chunked"], "sharding": ["none", "zero2"],
                                   "packing": [False, True]}


def test_the_cache_estimates_each_run_once_and_derives_its_shardings() -> None:
    calls: list[RunSpec] = []

    def counting(shape: object, spec: RunSpec) -> object:
        calls.append(spec)
        return toy_estimate(SHAPE, spec)

    cache = PeakCache(SHAPE, counting)  # type: ignore[arg-type]
    spec = RunSpec(method="full", batch=1, seq=1024, gpus=8, device="cpu")
    peaks = {z: cache.peak(spec.with_(sharding=z)) for z in ("none", "zero1", "zero2")}
    assert calls == [spec.with_(gpus=1)] and cache.estimates == 1
    # the toy's full run: 16 + 16 + 32 + 4 + 1 = 69 GiB; zero1 (DDP + ZeroRedundancyOptimizer): + DDP's gradient
    # buckets 16, AdamW / 8 = 4 -> 57; zero2 (FSDP2, kept gathered): weights 16 / 8 + 16 gathered, the head's
    # backward holds its gradients whole 16, AdamW 4 -> 43 (estimate/sharding.py, measured in RESULTS ## sharding)
    assert peaks == {"none": 69 * GIB, "zero1": 57 * GIB, "zero2": 43 * GIB}
