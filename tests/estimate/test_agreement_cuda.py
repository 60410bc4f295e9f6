"""The estimate against ``torch.cuda.max_memory_allocated`` on a real GPU (skipped without one).

On CUDA the optimizer takes torch's foreach path (one temporary per trainable tensor at once), sdpa picks
the flash / memory-efficient kernels, LayerNorm keeps fp32 statistics and AdamW's step counters stay on
the CPU: the estimate models each with ``device="cuda"``.
"""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import ModelShape, RunSpec, estimate_memory

torch = pytest.importorskip("torch")

LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8,
         "num_key_value_heads": 2, "intermediate_size": 704, "vocab_size": 32000, "max_position_embeddings": 4096,
         "tie_word_embeddings": False}
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 50257, "n_positions": 4096}

ROWS: list[tuple[str, dict[str, Any], RunSpec]] = [
    ("llama lora bf16 sdpa", LLAMA, RunSpec(method="lora", precision="bf16")),
    ("llama full mixed eager", LLAMA, RunSpec(method="full", precision="mixed-bf16", attention="eager")),
    ("llama lora bf16 ckpt", LLAMA, RunSpec(method="lora", precision="bf16", checkpointing="full")),
    ("gpt2 full bf16 sdpa", GPT2, RunSpec(method="full", precision="bf16")),
]


@pytest.mark.cuda
@pytest.mark.parametrize("name,config,spec", ROWS, ids=[r[0] for r in ROWS])
def test_estimate_matches_cuda_max_allocated(name: str, config: dict[str, Any], spec: RunSpec) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from memfit.measure.point import measure_point

    spec = spec.with_(batch=4, seq=512, device="cuda")
    measured = measure_point(config, spec, device="cuda", steps=0, warmup=0)  # max_memory_allocated, 2 steps
    est = estimate_memory(ModelShape.from_hf_config(config, name=name), spec)
    err = (est.peak_bytes - measured.peak_bytes) / measured.peak_bytes
    assert abs(err) <= 0.05, f"{name}: estimate {est.peak_bytes:,} vs cuda {measured.peak_bytes:,} ({err:+.2%})"
