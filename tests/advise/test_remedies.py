"""Each remedy as data: what it proposes from a setup, why it does not apply, and the figures of its step."""

from __future__ import annotations

import pytest

from memfit.advise import REMEDY_ORDER, DataProfile, Setup, TimeModel
from memfit.advise.remedies import (
    ADAPTER,
    ATTENTION,
    CHECKPOINTING,
    LONGEST_EXAMPLE,
    MICRO_BATCH,
    PACKING,
    QUANTIZE,
    RANK,
    SEQ_LEN,
    SHARDING,
    Context,
    NotApplicable,
    halved_ranks,
    packed_micro_batch,
)
from memfit.estimate import RunSpec, resolve_model

SHAPE = resolve_model("llama-3.2-1b")
LESSON = ["checkpointing", "micro_batch", "seq_len", "quantize", "rank"]  # the lesson's "order to try things"


def ctx(spec: RunSpec, data: DataProfile | None = None) -> Context:
    return Context(initial=Setup(spec=spec), time_model=TimeModel(), data=data, shape=SHAPE)


def specs(options: object) -> list[tuple[object, ...]]:
    assert isinstance(options, tuple)
    return [(o.spec.batch, o.spec.grad_accum, o.spec.seq, o.spec.rank) for o in options]


def test_the_order_is_the_lessons_with_the_free_remedies_first() -> None:
    names = [r.name for r in REMEDY_ORDER]
    assert [n for n in names if n in LESSON] == LESSON
    assert names == ["longest_example", "attention", "checkpointing", "packing", "micro_batch", "chunked_loss",
                     "sharding", "seq_len", "adapter", "quantize", "rank"]
    reluctance = ["nothing", "time", "task", "quality", "capacity"]
    worst = [reluctance.index(r.gives_up) for r in REMEDY_ORDER if r.name in LESSON]
    assert worst == sorted(worst)  # what the lesson's five give up only grows


def test_micro_batch_keeps_the_effective_batch() -> None:
    """b6 x accum 3 = 18 examples: the micro-batches below 6 that divide 18 are 3, 2, 1, largest first."""
    s = Setup(spec=RunSpec(batch=6, grad_accum=3))
    assert specs(MICRO_BATCH.options(s, ctx(s.spec))) == [(3, 6, 2048, 16), (2, 9, 2048, 16), (1, 18, 2048, 16)]
    one = Setup(spec=RunSpec(batch=1, grad_accum=8))
    assert MICRO_BATCH.options(one, ctx(one.spec)) == NotApplicable(reason="micro_batch_one")


def test_micro_batch_time_factor_by_hand() -> None:
    """8 -> 1 at seq 2048, T0 = 256 tokens per micro-step: (1 + 256/2048) / (1 + 256/16384) = 1.125 / 1.015625
    = 1.108."""
    before = Setup(spec=RunSpec(batch=8))
    effect = MICRO_BATCH.effect(before, before.with_(batch=1, grad_accum=8), ctx(before.spec))
    assert round(effect.time_factor, 3) == 1.108 and effect.gives_up == "time"


def test_sequence_fallback_rule_without_data() -> None:
    """seq 4096, no data: multiples of 64 from 4032 down to half the sequence, 2048."""
    s = Setup(spec=RunSpec(seq=4096))
    seqs = [o[2] for o in specs(SEQ_LEN.options(s, ctx(s.spec)))]
    assert seqs == list(range(4032, 2047, -64)) and len(seqs) == 32
    short = Setup(spec=RunSpec(seq=64))
    assert SEQ_LEN.options(short, ctx(short.spec)) == NotApplicable(reason="too_short")


def profile(lengths: list[int], p95: int, recommended: int, seq: int) -> DataProfile:
    return DataProfile(source="synthetic", lengths=tuple(sorted(lengths)), p95=p95, recommended_seq_len=recommended,
                       batch=4, seq_len=seq, waste_random=0.3, waste_packed=0.01, peak_len=max(lengths))


def test_sequence_with_data_stops_at_the_p95_and_counts_the_truncated() -> None:
    """1,000 examples of 4, 8, ..., 4000 tokens: p95 = 3800 (nearest rank), rounded up to 64: 3840. From seq
    4096: 4032, 3968, 3904, 3840. At 3904, the examples of 3908 ... 4000 tokens are cut: 24 of them."""
    data = profile([4 * (i + 1) for i in range(1000)], 3800, 3840, 4096)
    s = Setup(spec=RunSpec(seq=4096))
    assert [o[2] for o in specs(SEQ_LEN.options(s, ctx(s.spec, data)))] == [4032, 3968, 3904, 3840]
    effect = SEQ_LEN.effect(s, s.with_(seq=3904), ctx(s.spec, data))
    assert dict(effect.facts) == {"from_seq": 4096, "to_seq": 3904, "truncated": 24, "examples": 1000, "p95": 3800}
    assert effect.gives_up == "task"
    at = Setup(spec=RunSpec(seq=3840))
    assert SEQ_LEN.options(at, ctx(at.spec, data)) == NotApplicable(reason="at_p95",
                                                                    facts={"seq": 3840, "p95": 3800, "floor": 3840})


def test_longest_example_cuts_nothing() -> None:
    """The longest example, 4000 tokens, rounded up to 64: 4032."""
    data = profile([4 * (i + 1) for i in range(1000)], 3800, 3840, 4096)
    s = Setup(spec=RunSpec(seq=4096))
    assert [o[2] for o in specs(LONGEST_EXAMPLE.options(s, ctx(s.spec, data)))] == [4032]
    assert LONGEST_EXAMPLE.options(s, ctx(s.spec)) == NotApplicable(reason="needs_data")
    near = Setup(spec=RunSpec(seq=4032))
    assert LONGEST_EXAMPLE.options(near, ctx(near.spec, data)) == NotApplicable(
        reason="longest_reaches_seq", facts={"longest": 4000, "seq": 4032})


def test_packing_keeps_the_examples_per_step() -> None:
    """4 examples per optimizer step (b4 x accum 1) of mean (4 + 4000) / 2 = 2002 tokens at seq 4032, packed
    at 99% efficiency: 4 x 2002 / (4032 x 0.99) = 2.006 -> 2 rows, one micro-step of 2."""
    data = profile([4 * (i + 1) for i in range(1000)], 3800, 3840, 4032)
    s = Setup(spec=RunSpec(batch=4, seq=4032))
    (packed,) = PACKING.options(s, ctx(s.spec, data))  # type: ignore[misc]
    assert packed.packing and (packed.spec.batch, packed.spec.grad_accum) == (2, 1)
    facts = PACKING.effect(s, packed, ctx(s.spec, data)).facts
    assert facts["mean_tokens"] == 2002.0 and facts["rows"] == 2 and facts["examples"] == 4
    assert facts["rows_exact"] == pytest.approx(4 * 2002 / (4032 * 0.99))
    assert PACKING.options(packed, ctx(s.spec, data)) == NotApplicable(reason="already", facts={"value": "packed"})
    assert packed_micro_batch(3, 1) == 3 and packed_micro_batch(3, 4) == 1 and packed_micro_batch(6, 2) == 3


def test_sharding_proposes_the_next_stages_over_the_world_size() -> None:
    one = Setup(spec=RunSpec())
    assert SHARDING.options(one, ctx(one.spec)) == NotApplicable(reason="one_gpu")
    eight = Setup(spec=RunSpec(gpus=8, sharding="zero1"))
    opts = SHARDING.options(eight, ctx(eight.spec))
    assert isinstance(opts, tuple) and [o.spec.sharding for o in opts] == ["zero2", "zero3"]
    z3 = eight.with_(sharding="zero3")
    assert SHARDING.options(z3, ctx(z3.spec)) == NotApplicable(reason="already", facts={"value": "zero3"})
    assert SHARDING.effect(eight, z3, ctx(eight.spec)).time_factor == TimeModel().zero3_factor == 1.1


def test_rank_halves_down_to_eight() -> None:
    assert halved_ranks(64) == [32, 16, 8] and halved_ranks(48) == [24, 12] and halved_ranks(8) == []
    r48 = Setup(spec=RunSpec(rank=48))
    assert [o[3] for o in specs(RANK.options(r48, ctx(r48.spec)))] == [24, 12, 8]  # 8 is always the last offer
    r8 = Setup(spec=RunSpec(rank=8))
    assert RANK.options(r8, ctx(r8.spec)) == NotApplicable(reason="at_min_rank", facts={"rank": 8, "min_rank": 8})
    full = Setup(spec=RunSpec(method="full"))
    assert RANK.options(full, ctx(full.spec)) == NotApplicable(reason="no_rank")


def test_method_remedies() -> None:
    full, lora, qlora = (Setup(spec=RunSpec(method=m)) for m in ("full", "lora", "qlora"))
    (to_lora,) = ADAPTER.options(full, ctx(full.spec))  # type: ignore[misc]
    assert to_lora.spec.method == "lora" and ADAPTER.effect(full, to_lora, ctx(full.spec)).gives_up == "quality"
    assert ADAPTER.options(lora, ctx(lora.spec)) == NotApplicable(reason="already", facts={"value": "lora"})
    (to_qlora,) = QUANTIZE.options(lora, ctx(lora.spec))  # type: ignore[misc]
    assert QUANTIZE.effect(lora, to_qlora, ctx(lora.spec)).time_factor == 1.3
    assert QUANTIZE.options(qlora, ctx(qlora.spec)) == NotApplicable(reason="method", facts={"value": "qlora"})


def test_kernel_remedies() -> None:
    eager = Setup(spec=RunSpec(attention="eager"))
    (sdpa,) = ATTENTION.options(eager, ctx(eager.spec))  # type: ignore[misc]
    assert sdpa.spec.attention == "sdpa" and ATTENTION.effect(eager, sdpa, ctx(eager.spec)).gives_up == "nothing"
    assert ATTENTION.options(sdpa, ctx(sdpa.spec)) == NotApplicable(reason="already", facts={"value": "sdpa"})
    (full,) = CHECKPOINTING.options(eager, ctx(eager.spec))  # type: ignore[misc]
    assert CHECKPOINTING.effect(eager, full, ctx(eager.spec)).time_factor == pytest.approx(4 / 3)
