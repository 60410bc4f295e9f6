"""ZeRO / FSDP per-GPU bytes against hand-worked figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from memfit.advise import shard_components, shard_peak
from memfit.advise.sharding import block_weight_bytes
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, resolve_model


@dataclass
class _States:
    weights_frozen: int
    weights_trainable: int
    gradients: int
    optimizer: int


@dataclass
class _Est:
    """The parts of a MemoryEstimate the sharding model reads."""

    components: dict[str, int]
    moments: dict[str, int] = field(default_factory=dict)
    peak_moment: str = ""
    model_states: _States | None = None

    @property
    def peak_bytes(self) -> int:
        return sum(self.components.values())


COMPS = {"weights_frozen": 1600, "weights_trainable": 400, "gradients": 400, "optimizer": 800,
         "activations": 1000, "logits": 200, "temporaries": 0}


@pytest.mark.parametrize("stage, expected", [
    ("none", 4400),
    ("zero1", 4400 - 800 + 200),  # optimizer / 4
    ("zero2", 4400 - 1200 + 300),  # + gradients / 4
    ("zero3", 1000 + 200 + (1600 + 400 + 400 + 800) // 4),  # every model state / 4
])
def test_shard_components_by_hand(stage: str, expected: int) -> None:
    per_gpu, away = shard_components(COMPS, stage, 4)
    assert per_gpu == expected
    assert per_gpu + away == 4400


def test_block_weight_bytes_llama_8b() -> None:
    shape = resolve_model("llama-3.1-8b")
    # one Llama-3.1-8B block: q,o 4096x4096; k,v 4096x1024; gate,up,down 4096x14336; two RMSNorms of 4096
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert per_layer == 218_112_000
    assert block_weight_bytes(shape, RunSpec(precision="bf16")) == 2 * per_layer
    assert block_weight_bytes(shape, RunSpec(method="qlora")) == per_layer // 2


def test_zero3_adds_two_gathered_blocks_and_takes_the_worst_moment() -> None:
    shape = resolve_model("llama-3.1-8b")
    spec = RunSpec(precision="bf16")
    states = _States(weights_frozen=8000, weights_trainable=0, gradients=400, optimizer=800)
    # the unsharded peak is the optimizer step: weights + grads + optimizer + temporaries = 10000
    opt = {"weights_frozen": 8000, "gradients": 400, "optimizer": 800, "temporaries": 800}
    # the forward: weights + optimizer + activations 1000 = 9800 (its components are not given)
    est = _Est(components=opt, moments={"forward: loss": 9800, "optimizer: step": 10000},
               peak_moment="optimizer: step", model_states=states)
    gather = 2 * 2 * 218_112_000
    sharded = shard_peak(est, shape, spec, "zero3", 8)
    # the optimizer step's temporaries are per shard too: 1000 + 50 + 100 + 100 = 1250;
    # forward: 9800 - 7000 - 700 = 2100 -> the forward wins
    assert sharded.peak_bytes == 2100 + gather
    assert sharded.gather_bytes == gather
    assert sharded.unsharded_peak_bytes == 10000
    # zero1 shards the optimizer (and its step's scratch): forward 9800 - 700 = 9100, step 10000 - 1400 = 8600
    assert shard_peak(est, shape, spec, "zero1", 8).peak_bytes == 9100
    # zero2 also shards the gradients, alive in the step only: step 8600 - 350 = 8250; forward still 9100
    assert shard_peak(est, shape, spec, "zero2", 8).peak_bytes == 9100
    assert shard_peak(est, shape, spec, "zero2", 1).peak_bytes == 10000  # one GPU: nothing sharded
    with pytest.raises(MemfitError, match="--sharding"):
        shard_components(COMPS, "zero4", 2)


def test_sharding_a_real_estimate_never_raises_the_peak() -> None:
    from memfit.estimate import estimate_memory

    shape = resolve_model("qwen2.5-7b")
    est = estimate_memory(shape, RunSpec(method="full", batch=2, seq=1024))
    peaks = [shard_peak(est, shape, est.spec, z, 8).peak_bytes for z in ("none", "zero1", "zero2", "zero3")]
    assert peaks[0] == est.peak_bytes
    assert peaks[0] > peaks[1] >= peaks[2] > peaks[3]  # full fine-tuning: the model states dominate
    # zero2 can save at most 7/8 of the optimizer states, the gradients and the optimizer step's scratch
    st = est.model_states
    assert peaks[0] - peaks[2] <= (st.optimizer + st.gradients + est.components["temporaries"]) * 7 // 8 + 3
