"""ZeRO / FSDP sharding in the estimate: per-GPU bytes from the typed moments, against hand-worked figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import Category, RunSpec, estimate_memory, resolve_model
from memfit.estimate.moments import Moment, peak_moment
from memfit.estimate.sharding import block_weight_bytes, shard_moment

W_F, W_T, G, O = Category.WEIGHTS_FROZEN, Category.WEIGHTS_TRAINABLE, Category.GRADIENTS, Category.OPTIMIZER  # noqa: E741
A, L, T, I = Category.ACTIVATIONS, Category.LOGITS, Category.TEMPORARIES, Category.INPUTS  # noqa: E741
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "files"
LLAMA8B_P = 8_030_261_248  # Llama-3.1-8B's parameter count (tests/estimate/test_params.py GOLDEN_TOTALS)

BACKWARD = Moment(phase="backward", label="backward: x",
                  parts={W_F: 1600, W_T: 400, G: 400, O: 800, A: 1000, L: 200, T: 60})


@pytest.mark.parametrize("stage, expected", [
    ("none", {W_F: 1600, W_T: 400, G: 400, O: 800, A: 1000, L: 200, T: 60}),  # 4,460: a full replica
    ("zero1", {W_F: 1600, W_T: 400, G: 400, O: 200, A: 1000, L: 200, T: 60}),  # optimizer / 4: 3,860
    ("zero2", {W_F: 1600, W_T: 400, G: 100, O: 200, A: 1000, L: 200, T: 60}),  # + gradients / 4: 3,560
    ("zero3", {W_F: 400, W_T: 100, G: 100, O: 200, A: 1000, L: 200, T: 60}),  # + weights / 4: 2,060
])
def test_each_stage_divides_its_states_by_hand(stage: str, expected: dict[Category, int]) -> None:
    """Four GPUs, a backward moment: activations, logits and the backward's temporaries are per micro-batch
    and stay whole."""
    per_gpu = shard_moment(BACKWARD, stage, 4, {})  # type: ignore[arg-type]
    assert dict(per_gpu.parts) == expected
    assert per_gpu.total == {"none": 4460, "zero1": 3860, "zero2": 3560, "zero3": 2060}[stage]


def test_the_optimizer_step_shards_its_temporaries_not_the_inputs() -> None:
    """In the optimizer step each GPU updates only its partition: its scratch is per shard from zero1 on; the
    batch's inputs are not (81 / 4 rounds up: 21)."""
    step = Moment(phase="optimizer", label="optimizer: step", parts={W_T: 400, G: 400, O: 81, T: 400, I: 16})
    assert dict(shard_moment(step, "zero1", 4, {}).parts) == {W_T: 400, G: 400, O: 21, T: 100, I: 16}
    assert dict(shard_moment(step, "zero3", 4, {W_T: 7}).parts) == {W_T: 107, G: 100, O: 21, T: 100, I: 16}


def test_sharding_can_move_the_peak_to_another_moment() -> None:
    """Unsharded the optimizer step is the peak (10,000 > 9,800); over 8 GPUs:
    zero1: forward 8000 + 800/8 + 1000 = 9,100, step 8000 + 400 + 100 + 100 = 8,600 -> the forward;
    zero2: step 8000 + 50 + 100 + 100 = 8,250, forward 9,100; zero3: forward 1000 + 100 + 1000 = 2,100, step
    1000 + 50 + 100 + 100 = 1,250."""
    forward = Moment(phase="forward", label="forward: loss", parts={W_F: 8000, O: 800, A: 1000})
    step = Moment(phase="optimizer", label="optimizer: step", parts={W_F: 8000, G: 400, O: 800, T: 800})
    assert peak_moment((forward, step)) is step
    for stage, totals in (("zero1", (9100, 8600)), ("zero2", (9100, 8250)), ("zero3", (2100, 1250))):
        sharded = tuple(shard_moment(m, stage, 8, {}) for m in (forward, step))  # type: ignore[arg-type]
        assert tuple(m.total for m in sharded) == totals
        assert peak_moment(sharded).label == "forward: loss"


def test_block_weight_bytes_llama_8b() -> None:
    shape = resolve_model("llama-3.1-8b")
    # one Llama-3.1-8B block: q,o 4096x4096; k,v 4096x1024; gate,up,down 4096x14336; two RMSNorms of 4096
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert per_layer == 218_112_000
    assert block_weight_bytes(shape, RunSpec(precision="bf16")) == 2 * per_layer
    assert block_weight_bytes(shape, RunSpec(method="qlora")) == per_layer // 2


def test_zero3_llama_8b_full_fine_tune_golden() -> None:
    """The module docstring's example, Llama-3.1-8B full fine-tune in bf16, AdamW (bf16 moments), CUDA, b=1,
    s=2048, zero3 (FSDP2, reshard_after_forward=True) over 8 GPUs, torch's for-each AdamW (``adamw_torch`` on
    CUDA). The optimizer step per GPU, by hand with
    P = 8,030,261,248: every unit is resharded after its backward (measured: the sharded agreement rows), so
    weights 2P / 8 = 2,007,565,312; gradients 2P / 8; moments 4P / 8 = 4,015,130,624; foreach temporaries
    2P / 8; inputs 2 x 2048 x 8 = 32,768 (never sharded). Total 10,037,859,328."""
    spec = RunSpec(method="full", precision="bf16", batch=1, seq=2048, sharding="zero3", gpus=8, adamw_impl="foreach")
    est = estimate_memory(resolve_model("llama-3.1-8b"), spec)
    step = next(m for m in est.moments if m.phase == "optimizer")
    assert dict(step.parts) == {W_F: 0, W_T: 2_007_565_312, O: 4_015_130_624, I: 32_768, G: 2_007_565_312,
                                T: 2_007_565_312}


def test_sharding_a_real_estimate_only_lowers_the_peak() -> None:
    shape = resolve_model("qwen2.5-7b")
    base = RunSpec(method="full", batch=2, seq=1024, gpus=8)
    peaks = [estimate_memory(shape, base.with_(sharding=z)).peak_bytes for z in ("none", "zero1", "zero2", "zero3")]
    assert peaks[0] == estimate_memory(shape, base.with_(gpus=1)).peak_bytes  # DDP: every GPU a full replica
    assert peaks[0] > peaks[1] >= peaks[2] > peaks[3]  # full fine-tuning: the model states dominate


def test_sharding_needs_a_world_size() -> None:
    with pytest.raises(MemfitError, match="--sharding zero3 .* add --gpus N"):
        RunSpec(sharding="zero3")
    with pytest.raises(MemfitError, match="--sharding must be one of none, zero1, zero2, zero3, ddp, fsdp, hsdp"):
        RunSpec(sharding="zero4", gpus=2)  # type: ignore[arg-type]
    with pytest.raises(MemfitError, match="--gpus must be a positive integer"):
        RunSpec(gpus=0)


def test_estimate_cli_prints_per_gpu_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """``memfit estimate --sharding zero3 --gpus 8``: the JSON and the table are per GPU (the golden above)."""
    args = ["estimate", "llama-3.1-8b", "--method", "full", "--batch", "1", "--seq", "2048"]
    args = [*args, "--adamw-impl", "foreach"]  # the for-each step of the README's worked example
    assert main([*args, "--sharding", "zero3", "--gpus", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    step = next(m for m in d["moments"] if m["phase"] == "optimizer")
    # gathered at the peak (backward: loss): the root (embeddings + lm_head 2 x 128,256 x 4,096 x 2 B + the final
    # norm 4,096 x 2 B = 2,101,354,496) + the prefetched last block (218,112,000 x 2 B) = 2,537,578,496
    assert step["total"] == 10_037_859_328 and d["sharding"]["gather_bytes"] == 2_537_578_496
    assert (d["spec"]["sharding"], d["spec"]["gpus"]) == ("zero3", 8)
    assert main([*args, "--sharding", "zero3", "--gpus", "8", "--gpu", "A100-40GB"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "zero3 over 8 GPUs: per GPU" in out and "per GPU" in out.rsplit("fits", 1)[-1]
    assert main([*args, "--sharding", "zero3"]) == 1
    assert "--gpus N" in capsys.readouterr().err
    assert main(["estimate", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "FULL_SHARD = zero3" in help_text and "SHARD_GRAD_OP = zero2" in help_text


def test_a_config_names_the_stage_and_the_world_size(capsys: pytest.CaptureFixture[str]) -> None:
    """accelerate's FSDP file: FULL_SHARD (zero3) over num_processes 4. A DeepSpeed file alone names the stage
    but not the world size: estimated unsharded, the row says to pass --gpus; with --gpus 8 it shards."""
    base = ["estimate", "llama-3.1-8b", "--method", "full", "--json"]
    assert main([*base, "--config", str(CONFIGS / "accelerate_fsdp.yaml")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["spec"]["sharding"], d["spec"]["gpus"]) == ("zero3", 4) and d["sharding"]["gpus"] == 4
    assert main([*base, "--config", str(CONFIGS / "ds_zero2.json")]) == 0
    d = json.loads(capsys.readouterr().out)
    row = next(r for r in d["config_import"] if r["setting"] == "sharding")
    assert d["spec"]["sharding"] == "none" and row["status"] == "NOT MODELLED" and "--gpus N" in row["note"]
    assert main([*base, "--config", str(CONFIGS / "ds_zero2.json"), "--gpus", "8"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["spec"]["sharding"], d["spec"]["gpus"]) == ("zero2", 8) and d["sharding"]["sharding"] == "zero2"


def test_trace_and_measure_refuse_a_sharded_qlora(capsys: pytest.CaptureFixture[str]) -> None:
    # trace --sharding traces one rank of a full fine-tune or LoRA run (tests/trace/test_trace_sharded.py); QLoRA is
    # refused before any build
    assert main(["trace", "llama-3.1-8b", "--method", "qlora", "--sharding", "zero3", "--gpus", "8"]) == 1
    err = capsys.readouterr().err
    assert "memfit estimate" in err and "--method full, lora" in err and "Traceback" not in err
    # measure --sharding runs real processes (tests/measure/test_sharded.py), full and LoRA; a QLoRA run is refused
    # before any
    assert main(["measure", "llama-3.1-8b", "--method", "qlora", "--sharding", "zero3", "--gpus", "8"]) == 1
    err = capsys.readouterr().err
    assert "--method full, lora" in err and "Traceback" not in err


def test_offloaded_optimizer_moves_to_host_by_hand() -> None:
    """Llama-3.1-8B full bf16 for-each AdamW, zero3 over 8 GPUs, --offload-optimizer: each rank's moments 4P / 8 =
    4,015,130,624 B live on the host, and in the step its foreach temporaries 2P / 8 = 2,007,565,312 B too: host
    6,022,695,936 B; the GPU's step keeps the weight and gradient shards and the inputs (2,007,565,312 x 2 +
    32,768)."""
    spec = RunSpec(method="full", precision="bf16", batch=1, seq=2048, sharding="zero3", gpus=8,
                   cpu_offload_optimizer=True, adamw_impl="foreach")
    est = estimate_memory(resolve_model("llama-3.1-8b"), spec)
    step = next(m for m in est.moments if m.phase == "optimizer")
    assert step.total == 2 * 2_007_565_312 + 32_768 and O not in step.parts
    assert est.sharded is not None and est.sharded.host_bytes == 6_022_695_936
