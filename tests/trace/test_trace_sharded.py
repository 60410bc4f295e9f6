"""``memfit trace --sharding``: one rank of an N-rank job traced in this process on torch's fake process group.

The tiny model: Llama, 2 layers, hidden 64, 4 heads (2 KV heads: head dim 16, k/v 64 x 32), intermediate 256,
vocab 300, untied; fp32, full fine-tune, AdamW's for-loop kernel, one 32-token sequence, CPU. Its parameters by
hand: embed 300 x 64 = 19,200, lm_head 19,200; a layer q 4,096 + k 2,048 + v 2,048 + o 4,096 + gate/up/down
3 x 16,384 + 2 norms 128 = 61,568; final norm 64: 161,600 parameters = 646,400 B in 21 tensors. Every first
dimension (64, 32, 256, 300) divides by 2 and 4, so FSDP2 pads nothing: a rank holds 646,400 / N B of weights;
AdamW's two moments twice that, plus its 21 fp32 step counters (4 B each, on CPU): 2 x 646,400 / N + 84 B.

The peaks were measured with ``memfit measure --gpus N --sharding ...`` (two and four real gloo processes,
torch 2.13.0, :func:`memfit.measure.sharded.measure_sharded`) on the same model; every rank equal under FSDP2
and DDP, the largest rank's figure under ZeRO-1. The slow test measures them again.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from memfit.cli import main  # noqa: E402
from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.category import Category  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import tiny_config  # noqa: E402
from memfit.trace.engine import trace_step  # noqa: E402
from memfit.trace.sharded import check_sharded_trace  # noqa: E402

TINY = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)
WEIGHTS = 646_400  # by hand, module docstring
STEP_COUNTERS = 21 * 4
# memfit measure, N gloo processes (largest rank): (sharding, N) -> bytes
MEASURED = {("fsdp", 2): 2_280_996, ("fsdp", 4): 1_763_180, ("zero1", 4): 2_466_140, ("ddp", 2): 3_428_760}


def spec(sharding: str, gpus: int, **kw: object) -> RunSpec:
    return RunSpec(method="full", precision="fp32", batch=1, seq=32, device="cpu", sharding=sharding,  # type: ignore[arg-type]
                   gpus=gpus, adamw_impl="forloop", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("gpus", [2, 4])
def test_fsdp_rank_holds_its_shards_and_the_measured_peak(gpus: int) -> None:
    r = trace_step(TINY, spec("fsdp", gpus))
    assert r.rank == 0 and r.to_dict()["world_size"] == gpus
    assert r.model_states[Category.WEIGHTS_TRAINABLE] == WEIGHTS // gpus
    assert r.model_states[Category.OPTIMIZER] == 2 * WEIGHTS // gpus + STEP_COUNTERS
    measured = MEASURED[("fsdp", gpus)]
    assert abs(r.peak_bytes - measured) / measured < 0.01
    assert abs(r.peak_bytes - measured) <= 64  # in practice: 8 B and 16 B below


def test_zero1_keeps_the_larger_rank_and_ddp_a_replica() -> None:
    """ZeRO-1 over 4 ranks: rank 2 holds the largest partition (327,700 B of state), rank 0 the largest peak
    (2,466,140 B measured, with the largest tensor's for-loop temporaries): the trace keeps rank 0's. DDP holds the
    whole replica on every rank (646,400 B of weights, 2 x 646,400 + 84 B of moments)."""
    z = trace_step(TINY, spec("zero1", 4))
    assert (z.rank, z.largest_partition_rank) == (0, 2)
    assert abs(z.peak_bytes - MEASURED[("zero1", 4)]) / MEASURED[("zero1", 4)] < 0.01
    d = trace_step(TINY, spec("ddp", 2))
    assert d.model_states[Category.OPTIMIZER] == 2 * WEIGHTS + STEP_COUNTERS
    assert abs(d.peak_bytes - MEASURED[("ddp", 2)]) / MEASURED[("ddp", 2)] < 0.01


@pytest.mark.parametrize("kw, match", [
    ({"method": "qlora"}, "--method full, lora"),
    ({"optimizer": "adamw-8bit"}, "torch's own optimizers"),
    ({"grad_accum": 2}, "--grad-accum"),
    ({"prefetch": 2}, "--prefetch 2"),
])
def test_untraceable_sharded_specs_name_the_estimate(kw: dict[str, object], match: str) -> None:
    base = {"method": "full", "device": "cpu", "sharding": "fsdp", "gpus": 8, **kw}
    with pytest.raises(MemfitError, match=match) as err:
        check_sharded_trace(RunSpec(**base))  # type: ignore[arg-type]
    assert "memfit estimate" in str(err.value)


def test_cli_traces_one_of_eight_ranks_and_refuses_under_json(tmp_path, capsys) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    base = ["trace", str(tmp_path / "config.json"), "--batch", "1", "--seq", "32", "--device", "cpu", "--json"]
    assert main([*base, "--method", "full", "--sharding", "fsdp", "--gpus", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["rank"], out["world_size"], out["spec"]["sharding"]) == (0, 8, "fsdp")
    # bf16 (the CLI's default precision): 323,200 B / 8 = 40,400, but 300 vocabulary rows over 8 ranks pad to 38
    # rows a rank (FSDP2 pads dim 0 to a multiple of 8): embed and lm_head + 0.5 row x 64 x 2 B each = + 128 B
    assert out["model_states"]["weights_trainable"] == WEIGHTS // 2 // 8 + 2 * 64
    assert out["estimate"]["peak_bytes"] is None or out["estimate"]["peak_bytes"] > 0
    assert main([*base, "--method", "qlora", "--sharding", "fsdp", "--gpus", "8"]) == 1  # as measure: refused
    err = json.loads(capsys.readouterr().out)
    assert err["exit_code"] == 1 and "--method full, lora" in err["error"] and "memfit estimate" in err["error"]


@pytest.mark.parametrize("method, precision, wrap, measured", [
    ("lora", "fp32", "accelerate", 340_112_168),
    ("full", "mixed-bf16", "accelerate", 476_786_524),
])
def test_lora_and_mixed_precision_sharded_traces_equal_the_measured_rows(method: str, precision: str, wrap: str,
                                                                         measured: int) -> None:
    """Scaled Llama-3.2-1B (hidden 256, 2 layers, the real 128,256 vocabulary), fsdp over 2 ranks with accelerate's
    units, b1 s64, for-loop AdamW: the largest rank's peak measured on 2 real gloo processes (``bench/sharding.py
    --rows lora,mixed``, the figures of tests/estimate/test_sharding_modes_measured.py); LoRA's frozen base sharded
    beside its adapters, mixed-bf16's MixedPrecisionPolicy gathering bf16 copies. The trace within 0.01%."""
    from memfit.validate.agreement import scaled_config

    spec = RunSpec(method=method, precision=precision, batch=1, seq=64, device="cpu", sharding="fsdp", gpus=2,
                   adamw_impl="forloop", fsdp_wrap=wrap)
    traced = trace_step(scaled_config("llama-3.2-1b", 256, 2), spec, name="llama-3.2-1b")
    assert abs(traced.peak_bytes - measured) / measured < 1e-4


@pytest.mark.slow
def test_trace_agrees_with_a_real_two_process_run() -> None:
    """The same tiny model measured again on 2 real gloo processes (~1 min): DDP's trace within 1% of the largest
    rank; FSDP2's at or below it (a loaded gloo run holds more, see below) and within 1% of the usual figure."""
    from memfit.measure.sharded import measure_sharded

    specs = [spec("fsdp", 2), spec("ddp", 2)]
    for m in measure_sharded(TINY, specs):
        t = trace_step(TINY, m.spec).peak_bytes
        if m.spec.sharding == "ddp":  # DDP's buckets are allocated in a fixed order: the trace within 1%
            assert abs(m.peak_bytes - t) <= 0.01 * m.peak_bytes
            continue
        # FSDP2 over gloo is not deterministic under load: the reduce-scatters complete on gloo's worker thread,
        # most likely releasing their input copies later on a loaded machine, which then holds more at the
        # backward's peak (CI: 2,280,996 B usually, 2,363,172 and 2,527,012 B in two loaded runs). The trace follows
        # the unloaded order: it is the live run's floor, and within 1% of the usual figure (MEASURED, the fast test)
        assert t <= m.peak_bytes * 1.01
        assert abs(t - MEASURED[("fsdp", 2)]) <= 0.01 * MEASURED[("fsdp", 2)]
