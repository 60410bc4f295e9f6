"""torch AdamW's kernel (``--adamw-impl``) and bitsandbytes' paged optimizers in the estimate (issue 14)."""

from __future__ import annotations

import pytest

from memfit.errors import MemfitError
from memfit.estimate import RunSpec, estimate_memory, lookup
from memfit.estimate.category import Category
from memfit.estimate.states import model_states, optimizer_temporaries

GPT2 = lookup("gpt2").shape
GPT2_P = 124_439_808  # GPT-2 small's parameters (HF: 124,439,808, the lm_head tied to wte)


def test_default_is_the_trainers_fused_kernel() -> None:
    """transformers 5.24 TrainingArguments.optim defaults to adamw_torch_fused on torch >= 2.8."""
    assert RunSpec().adamw_impl == "fused"
    with pytest.raises(MemfitError, match="adamw_impl"):
        RunSpec(adamw_impl="apex")  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu-device", "gpu-device"])
def test_step_temporaries_by_kernel_by_hand(device: str) -> None:
    """GPT-2 full fine-tune, fp32 (by hand, torch 2.13 torch/optim/adam.py): fused updates in place, 0 B; for-each
    holds sqrt(v) of every tensor at once, 4P = 497,759,232 B; the for-loop two temporaries of the largest tensor,
    the embedding (50,257 x 768 x 4 = 154,389,504 B): 308,779,008 B."""
    spec = RunSpec(method="full", precision="fp32", batch=1, seq=8, device=device)
    st = model_states(GPT2, spec)
    assert optimizer_temporaries(st, spec.with_(adamw_impl="fused")) == 0
    assert optimizer_temporaries(st, spec.with_(adamw_impl="foreach")) == 4 * GPT2_P == 497_759_232
    assert optimizer_temporaries(st, spec.with_(adamw_impl="forloop")) == 2 * 50_257 * 768 * 4 == 308_779_008
    step = {impl: next(m for m in estimate_memory(GPT2, spec.with_(adamw_impl=impl)).moments
                       if m.phase == "optimizer").part(Category.TEMPORARIES) for impl in ("fused", "foreach")}
    assert step == {"fused": 0, "foreach": 497_759_232}


def test_fused_step_counters_live_on_the_gpu() -> None:
    """The fused kernel keeps each tensor's 0-dim fp32 ``step`` on the parameter's device (Adam._init_group), a
    512-byte CUDA block each; for-each / for-loop keep it on the host. GPT-2 has 148 tensors: 148 x 512 = 75,776 B."""
    spec = RunSpec(method="full", precision="fp32", device="cuda")
    fused, foreach = model_states(GPT2, spec), model_states(GPT2, spec.with_(adamw_impl="foreach"))
    assert foreach.optimizer == 8 * GPT2_P and fused.optimizer - foreach.optimizer == fused.n_tensors * 512 == 75_776


def test_paged_states_are_reported_apart_from_the_peak() -> None:
    """paged-adamw-8bit keeps what adamw-8bit keeps (bitsandbytes' states are the same tensors), but in CUDA unified
    memory: out of the device peak's optimizer category, in ``paged_optimizer`` and the JSON."""
    spec = RunSpec(method="qlora", batch=1, seq=512)
    shape = lookup("llama-3.1-8b").shape
    plain = estimate_memory(shape, spec.with_(optimizer="adamw-8bit"))
    paged = estimate_memory(shape, spec.with_(optimizer="paged-adamw-8bit"))
    assert plain.model_states.optimizer > 0 and paged.model_states.optimizer == 0
    assert paged.model_states.paged_optimizer == plain.model_states.optimizer
    assert paged.peak_bytes == plain.peak_bytes - plain.model_states.optimizer
    assert paged.to_dict()["paged_optimizer_bytes"] == plain.model_states.optimizer
    # 32-bit paged states are fp32 whatever the parameter's dtype: 8 B per trainable parameter
    p32 = model_states(shape, spec.with_(optimizer="paged-adamw-32bit"))
    assert p32.paged_optimizer == 8 * p32.trainable_params


def test_int8_base_bytes_by_hand() -> None:
    """Llama-3.1-8B with an LLM.int8 base: per layer the seven linears' weights at 1 B (218,103,808) + one fp32
    scale per output row (4 x (4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096) = 172,032); 32 layers; the rest
    (embeddings 2 x 525,336,576 params, 65 norms of 4,096) upcast to fp32 by prepare_model_for_kbit_training."""
    st = model_states(lookup("llama-3.1-8b").shape, RunSpec(method="int8-lora"))
    rest = 2 * 128_256 * 4096 + 65 * 4096
    assert st.weights_frozen == 32 * (218_103_808 + 172_032) + 4 * rest
