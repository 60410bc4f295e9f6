"""Agreement rows for bitsandbytes bases and optimizers (issue 14): QLoRA (4-bit NF4, double quantisation on and
off), LLM.int8 bases (``int8-lora``) and ``adamw-8bit``, on four architectures, LoRA on PEFT's default targets and
on every linear layer, with and without checkpointing; and the AdamW kernels (fused / for-each / for-loop) on a
full fine-tune, where the optimizer step's temporaries can hold the peak.

Measured on the CPU with bitsandbytes 0.50 (its CPU kernels): the frozen base's bytes, what the adapted linears save
and the 8-bit optimizer states are the same tensors on CUDA. CUDA differs in what no row here can see (stated next
to the figures in bench/RESULTS.md): ``gemm_4bit`` / ``dequantize_4bit`` hold the dequantised weight
(out x in in the compute dtype) inside the kernel, and LLM.int8's ``MatMul8bitLt`` keeps the outlier columns of x
(``subA``, data-dependent) where the CPU's ``MatMul8bitFp`` keeps x alone.

QLoRA on mixtures of experts (Mixtral, Qwen3-MoE): transformers 5.24 quantises ``nn.Linear`` modules only, so the
fused experts and the router stay floating point and PEFT makes them fp32 (the estimate counted them as 4-bit:
-22.90% / -10.48% on these rows before). The trace refuses fp32 MoE (its eager expert loop): n/a. QLoRA + DoRA:
PEFT's weight norm dequantises the 4-bit weight; the trace refuses it (the fake 4-bit weight is not a Params4bit).
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.spec import RunSpec

ALL = ("all-linear",)


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(device="cpu", precision="fp32", attention="sdpa", **kw)


# (scaled catalogue model, spec): fp32 compute on this CPU (bf16 matmuls crawl here, see agreement.SPEC_GRID)
QUANT_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="qlora", batch=1, seq=64)),
    ("llama-3.2-1b", _spec(method="qlora", batch=2, seq=96, targets=ALL, double_quant=False)),
    ("llama-3.2-1b", _spec(method="qlora", batch=2, seq=128, checkpointing="full", targets=ALL)),
    ("qwen3-8b", _spec(method="qlora", batch=2, seq=96, targets=ALL)),
    ("qwen3-8b", _spec(method="qlora", batch=2, seq=128, checkpointing="full", double_quant=False)),
    ("mistral-7b", _spec(method="qlora", batch=2, seq=128)),
    ("mistral-7b", _spec(method="int8-lora", batch=2, seq=96, targets=ALL, checkpointing="full")),
    ("phi-3-mini", _spec(method="qlora", batch=2, seq=96, targets=ALL)),
    ("phi-3-mini", _spec(method="int8-lora", batch=2, seq=64, targets=ALL)),
    ("llama-3.2-1b", _spec(method="int8-lora", batch=1, seq=64)),
    ("qwen2.5-0.5b", _spec(method="qlora", batch=1, seq=64, optimizer="adamw-8bit", targets=ALL)),
    ("llama-3.2-1b", _spec(method="lora", batch=1, seq=64, optimizer="adamw-8bit", targets=ALL)),
    ("phi-3-mini", _spec(method="full", batch=1, seq=64, optimizer="adamw-8bit")),
    # the AdamW kernels on a full fine-tune with an untied head (the optimizer step is the peak)
    ("phi-3-mini", _spec(method="full", batch=1, seq=64, adamw_impl="fused")),
    ("phi-3-mini", _spec(method="full", batch=1, seq=64, adamw_impl="foreach")),
    ("phi-3-mini", _spec(method="full", batch=1, seq=64, adamw_impl="forloop")),
    # QLoRA on mixtures of experts: transformers 5.24 leaves the fused experts and the router unquantised (then fp32)
    ("mixtral-8x7b", _spec(method="qlora", batch=2, seq=64)),
    ("qwen3-30b-a3b", _spec(method="qlora", batch=2, seq=64, targets=("q_proj", "v_proj"))),
    # QLoRA + DoRA: PEFT 0.21.2's weight norm dequantises the 4-bit weight (dora.py, dequantize_module_weight)
    ("llama-3.2-1b", _spec(method="qlora", use_dora=True, batch=2, seq=64)),
    ("qwen2.5-0.5b", _spec(method="qlora", use_dora=True, batch=1, seq=32, targets=ALL)),
)

# the fast subset in `make test`: seconds each
FAST_QUANT_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="qlora", batch=1, seq=64)),
    ("mistral-7b", _spec(method="int8-lora", batch=2, seq=96, targets=ALL, checkpointing="full")),
    ("qwen2.5-0.5b", _spec(method="qlora", batch=1, seq=32, optimizer="adamw-8bit", targets=ALL,
                           double_quant=False)),
    ("phi-3-mini", _spec(method="full", batch=1, seq=32, adamw_impl="foreach")),
)
