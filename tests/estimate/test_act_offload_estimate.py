"""``--offload-activations`` (TRL 1.16's OffloadActivations, :mod:`memfit.runtime.act_offload`) in the estimate:
host bytes worked by hand, the device's moments, the CLI, and the runs it refuses. No torch."""

from __future__ import annotations

import json

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import MemoryEstimate, ModelShape, RunSpec, estimate_memory
from memfit.estimate.category import Category

# 4 layers, hidden 64, vocab 1000 (as tests/runtime/test_offload.py); b2 s32: T = 64 tokens
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 1000, "max_position_embeddings": 256,
         "hidden_act": "silu", "tie_word_embeddings": False}
SHAPE = ModelShape.from_hf_config(LLAMA, name="llama")


def _spec(**kw: object) -> RunSpec:
    return RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=32,
                   checkpointing="full", offload_activations=True, **kw)  # type: ignore[arg-type]


def test_host_bytes_with_checkpointing_by_hand() -> None:
    """LoRA, fp32, checkpointing full, T = 64. TRL's pack sees what checkpoint saves with the ambient hooks (the 4
    block inputs, 64 x 64 x 4 = 16,384 B each: 65,536) and what runs outside the blocks: the final RMSNorm saves its
    fp32 input twice (pow and the product with rsqrt: 2 x 16,384 = 32,768; the rsqrt, 64 x 4 = 256 B, is under
    1,024 B and stays), the loss its log-probabilities twice (log_softmax's output and nll_loss's self: 2 x 64 x
    1000 x 4 = 512,000; the labels, 64 x 8 = 512 B, stay). The frozen lm_head saves its weight only (a parameter).
    Host: 65,536 + 32,768 + 512,000 = 610,304 B (measured the same: tests/validate/test_act_offload_rows.py).
    (Before: no --offload-activations; TRL's activation_offloading read as --offload, 4 block inputs, 65,536 B.)"""
    est = estimate_memory(SHAPE, _spec())
    assert est.host_bytes == 610_304
    assert est.to_dict()["host_bytes"] == 610_304


def test_the_device_keeps_no_log_probabilities_in_the_cpu_backward() -> None:
    """On a CPU run unpack hands the host copy itself to the backward: at the loss's backward the device holds the
    two fp32 gradients (2 x 256,000) and the scalar loss, not the log-probabilities; while the loss runs forward
    it holds them (the logits, 256,000, their log-softmax, 256,000, and the 512 B labels, + the 4 B loss)."""
    est = estimate_memory(SHAPE, _spec())
    moments = {m.label: m for m in est.moments}
    assert moments["backward: loss"].parts["logits"] == 2 * 256_000 + 4 + 512
    assert moments["forward: loss"].parts["logits"] == 256_000 + 256_000 + 512 + 4


def test_cuda_brings_the_log_probabilities_back() -> None:
    """On CUDA unpack makes a device copy: the loss's backward holds log-probabilities + 2 gradients, as without
    offloading (the labels stay: under 1,024 B)."""
    est = estimate_memory(SHAPE, _spec().with_(device="cuda"))
    moments = {m.label: m for m in est.moments}
    assert moments["backward: loss"].parts["logits"] == 3 * 256_000 + 512 + 4


def test_without_checkpointing_the_device_saves_almost_nothing() -> None:
    """No checkpointing: the blocks' saved tensors go too; a block keeps on the device only what is under 1,024 B:
    each of its two RMSNorms' rsqrt (64 x 4 = 256 B, one storage saved twice): 512 B."""
    est = estimate_memory(SHAPE, _spec().with_(checkpointing="none"))
    plain = estimate_memory(SHAPE, _spec().with_(checkpointing="none", offload_activations=False))
    assert est.activations.per_layer == 512
    assert plain.activations.per_layer > 100_000
    assert est.host_bytes > 0 and plain.host_bytes == 0


def test_refused_combinations() -> None:
    with pytest.raises(MemfitError, match="two rules"):
        _spec(offload=True)
    with pytest.raises(MemfitError, match="every-k"):
        estimate_memory(SHAPE, _spec().with_(checkpointing="every-k"))
    with pytest.raises(MemfitError, match="--loss chunked"):
        estimate_memory(SHAPE, _spec().with_(loss="chunked"))


def _logits(est: MemoryEstimate, label: str) -> int:
    return next(m.parts[Category.LOGITS] for m in est.moments if m.label == label)


def test_trl_loss_hidden_copy_on_the_host() -> None:
    """TRL's fused head (``--loss trl``) saves a copy of the scored positions' hidden states (N x h in the weights'
    dtype), its targets (N x 8), ``log_z`` and ``entropy`` (N x 4 each); under OffloadActivations each of at least
    1,024 B goes to the host. N = 2 x 31 = 62 positions, h = 64, fp32: the copy is 62 x 64 x 4 = 15,872 B (moved);
    the targets (496 B) and the two vectors (248 B each) stay. With the 4 block inputs (4 x 16,384) and the final
    RMSNorm's two fp32 saves (2 x 16,384), as in the test above: 65,536 + 32,768 + 15,872 = 114,176 B on the host
    (the pattern a real step showed on the scaled Llama: 524,288 + 129,024 B). On a CPU run the loss's backward
    reads the host copy itself (15,872 B fewer on the device than with the head's tensors kept); CUDA copies it
    back (the same bytes as kept)."""
    head = "backward: loss"
    cpu = estimate_memory(SHAPE, _spec().with_(loss="trl"))
    assert cpu.host_bytes == 114_176
    kept = estimate_memory(SHAPE, _spec().with_(loss="trl", offload_activations=False))
    assert _logits(kept, head) - _logits(cpu, head) == 15_872
    cuda = estimate_memory(SHAPE, _spec().with_(loss="trl", device="cuda"))
    cuda_kept = estimate_memory(SHAPE, _spec().with_(loss="trl", device="cuda", offload_activations=False))
    assert _logits(cuda, head) == _logits(cuda_kept, head) > 0


def test_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--offload-activations`` reaches the spec and the host bytes come out apart; ``--offload`` keeps its
    meaning (the checkpoints only: 4 x 16,384 B)."""
    args = ["estimate", "llama-3.2-1b", "--method", "lora", "--precision", "fp32", "--batch", "2", "--seq", "32",
            "--checkpointing", "full", "--device", "cpu", "--json"]
    assert main([*args, "--offload-activations"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["spec"]["offload_activations"] is True and d["host_bytes"] > 0
    assert main([*args, "--offload"]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert d2["spec"]["offload_activations"] is False
    assert d2["host_bytes"] == 16 * 2 * 32 * 2048 * 4  # 16 layers x b*s*h fp32


def test_autocast_keeps_the_trainable_weights_casts_on_the_device() -> None:
    """Full fine-tune under mixed-bf16: autocast caches each trainable weight's bf16 cast to the end of the forward,
    so the offloaded copy does not free it. Per layer q 64x64, k and v 32x64 (2 KV heads of 16), o 64x64, gate,
    up and down 176x64: 46,080 weights x 2 B = 92,160 B; 4 layers: 368,640 B on the device at the forward's loss
    (lm_head's cast is saved inside lm_head, kept with the head). (Without it the qwen2.5-0.5b full mixed-bf16 row
    at vocabulary 2,000 was -1.84%.)"""
    est = estimate_memory(SHAPE, _spec().with_(method="full", precision="mixed-bf16", checkpointing="none"))
    assert est.activations.forward_cached == 368_640
    fp32 = estimate_memory(SHAPE, _spec().with_(method="full", checkpointing="none"))
    assert fp32.activations.forward_cached == 0
