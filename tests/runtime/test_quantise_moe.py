"""QLoRA on mixtures of experts: transformers 5.24 quantises ``nn.Linear`` modules only, so the fused experts and the
router stay floating point (then fp32, PEFT 0.21.2's ``prepare_model_for_kbit_training``). The estimate counted them
as 4-bit NF4: a tiny Mixtral's base 70% low (145,484 B against 485,600 B real). Checked here against the bytes of a
real quantised model on CPU (parameters and bitsandbytes quant-state tensors, each storage once, by dtype)."""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

from memfit.estimate import ModelShape, RunSpec, estimate_memory  # noqa: E402
from memfit.runtime.build import build_model, tiny_config  # noqa: E402
from memfit.runtime.quantise import quant_state_tensors  # noqa: E402

MOE = {
    "mixtral": tiny_config("mixtral", layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=128,
                           num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": tiny_config("qwen3_moe", layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=128,
                             num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64),
    "gpt_oss": tiny_config("gpt_oss", layers=1, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=128,
                           num_local_experts=4, num_experts_per_tok=2, head_dim=16),
    "deepseek_v3": tiny_config("deepseek_v3", layers=2, hidden=64, heads=4, kv_heads=4, intermediate=128, vocab=128,
                               n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                               first_k_dense_replace=1, n_group=1, topk_group=1, q_lora_rank=32, kv_lora_rank=16,
                               qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(MOE))
def test_qlora_moe_base_bytes_are_the_quantised_models(model_type: str) -> None:
    """Real bytes (every parameter and quant-state storage of the built QLoRA model) = the estimate's weights
    (frozen + trainable); the fused experts and the router are fp32 parameters, not Params4bit."""
    cfg = MOE[model_type]
    targets = ("kv_b_proj", "o_proj") if model_type == "deepseek_v3" else ("q_proj", "o_proj")
    spec = RunSpec(method="qlora", precision="bf16", batch=1, seq=8, device="cpu", targets=targets,
                   attention="eager" if model_type == "gpt_oss" else "sdpa")
    model = build_model(cfg, spec, device="cpu")
    storages: dict[int, tuple[str, int]] = {}
    for t in [*model.parameters(), *quant_state_tensors(model)]:
        storages[id(t.untyped_storage())] = (str(t.dtype), t.untyped_storage().nbytes())
    by_dtype = Counter[str]()
    for dtype, nbytes in storages.values():
        by_dtype[dtype] += nbytes
    experts = {n: p for n, p in model.named_parameters() if ".experts." in n or n.endswith("mlp.gate.weight")}
    assert experts and all(p.dtype == torch.float32 and type(p).__name__ == "Parameter" for p in experts.values())
    states = estimate_memory(ModelShape.from_hf_config(cfg), spec).model_states
    assert states.weights_frozen + states.weights_trainable == sum(by_dtype.values()), dict(by_dtype)
