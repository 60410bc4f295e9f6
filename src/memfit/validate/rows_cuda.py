"""The agreement matrix's full-size rows for a GPU machine (:func:`memfit.validate.agreement.cuda_matrix`,
``bench/gpu_run.sh``): real catalogue models at the sizes users run them."""

from __future__ import annotations

from typing import Any

from memfit.estimate.spec import RunSpec


def cuda_spec(**kw: Any) -> RunSpec:
    """A CUDA run's spec."""
    return RunSpec(device="cuda", **kw)


# Full-size real models measured on a GPU machine (bench/gpu_check.sh): what users run, at their sizes.
CUDA_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("qwen2.5-0.5b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=4, seq=1024)),
    ("qwen2.5-0.5b", cuda_spec(method="full", precision="mixed-bf16", attention="sdpa", batch=2, seq=1024)),
    ("llama-3.2-1b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=4, seq=2048)),
    ("llama-3.2-1b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=4, seq=2048,
                           checkpointing="full")),
    ("llama-3.2-1b", cuda_spec(method="lora", precision="bf16", attention="eager", batch=2, seq=1024)),
    ("gemma-2-2b", cuda_spec(method="lora", precision="bf16", attention="eager", batch=2, seq=1024)),
    ("gemma-2-2b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=2, seq=1024,
                         targets=("all-linear",))),
    ("phi-3-mini", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=2, seq=2048)),
    ("tinyllama-1.1b", cuda_spec(method="full", precision="bf16", attention="sdpa", batch=2, seq=2048)),
    ("gpt2", cuda_spec(method="full", precision="fp32", attention="sdpa", batch=8, seq=1024)),
    ("pythia-1.4b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=4, seq=2048,
                          targets=("all-linear",))),
    ("mistral-7b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=2, seq=2048,
                         checkpointing="full")),
    ("qwen3-8b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=1, seq=2048)),
    ("llama-3.1-8b", cuda_spec(method="lora", precision="bf16", attention="sdpa", batch=1, seq=4096,
                           checkpointing="full")),
    # Adafactor's fp32 copies of the bf16 embedding while it updates it are the peak
    ("llama-3.2-1b", cuda_spec(method="full", optimizer="adafactor", precision="bf16", attention="sdpa", batch=1,
                           seq=256)),
)
