"""The analytic estimate against real CPU training steps of tiny configs (issue 6's fast subset).

Each row builds the transformers (+ PEFT) model from a config with random weights, runs two training
steps (:func:`memfit.validate.steps.real_steps`: peak of live storage bytes, saved-for-backward bytes), and
compares with ``estimate_memory`` for the same spec on ``device="cpu"``. Targets: peak within 2% per row
(issue 6 asks median <= 2%, max <= 5%), saved activations within 2%.
"""

from __future__ import annotations

from typing import Any

import pytest

from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.validate.steps import real_steps  # noqa: E402


def _config(model_type: str, *, heads: int = 4, kv_heads: int | None = None, intermediate: int | None = None,
            vocab: int = 1000, **extra: Any) -> dict[str, Any]:
    """2 layers, hidden 64, 256 positions, under the keys the architecture's config class reads."""
    keys = REGISTRY[model_type].keys.write(layers=2, hidden=64, heads=heads, kv_heads=kv_heads,
                                           intermediate=intermediate, vocab=vocab, positions=256)
    return {"model_type": model_type, **keys, **extra}


LLAMA = _config("llama", kv_heads=2, intermediate=176, hidden_act="silu", tie_word_embeddings=False)
GPT2 = _config("gpt2", activation_function="gelu_new")
QWEN2 = _config("qwen2", kv_heads=1, intermediate=352, vocab=1500, tie_word_embeddings=True, use_sliding_window=False)
NEOX = _config("gpt_neox", intermediate=256, rotary_pct=0.25, use_parallel_residual=True, hidden_act="gelu")
MIXTRAL = _config("mixtral", kv_heads=2, intermediate=224, num_local_experts=4, num_experts_per_tok=2,
                  tie_word_embeddings=False, sliding_window=None)
OPT = _config("opt", intermediate=256, word_embed_proj_dim=64, activation_function="relu")
# token embeddings narrower than h (as OPT-350m): project_in / project_out are linears of their own
OPT_PROJECTED = {**OPT, "word_embed_proj_dim": 32}

# Phi (issue 13) with its q/k LayerNorms switched on and every dropout it has (attention, residual, embedding)
PHI_QK = _config("phi", intermediate=256, qk_layernorm=True, resid_pdrop=0.1, embd_pdrop=0.1, attention_dropout=0.1)
# Falcon-7B's block (multi-query, parallel: CPU sdpa takes torch's math path) and its serial multi-head variant with
# biases (FalconLinear adds them after the matmul: fp32 outputs under autocast) and both of its dropouts
FALCON = _config("falcon", intermediate=256)
FALCON_SERIAL = {**FALCON, "multi_query": False, "parallel_attn": False, "bias": True, "hidden_dropout": 0.1,
                 "attention_dropout": 0.1}

# Qwen3-30B-A3B's block: qk-norm attention, 4 experts renormalised (norm_topk_prob) and cast back to bf16
QWEN3_MOE = _config("qwen3_moe", kv_heads=2, intermediate=128, vocab=300, head_dim=16, num_experts=4,
                    num_experts_per_tok=2, norm_topk_prob=True)

# gpt-oss-20b's block: attention sinks (eager only), biased experts with a clamped SwiGLU, top-k-then-softmax router
GPT_OSS = _config("gpt_oss", kv_heads=2, intermediate=128, vocab=300, head_dim=16, num_local_experts=4,
                  num_experts_per_tok=2)

# DeepSeek-V3's block (issue 13): multi-head latent attention with the q bottleneck (v narrower than q and k: CPU
# sdpa's math path), layer 0 a dense MLP, layer 1 a sigmoid-routed MoE with two shared experts
DEEPSEEK = _config("deepseek_v3", intermediate=32, vocab=300, intermediate_size=96, first_k_dense_replace=1,
                   q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=12,
                   n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, n_group=1, topk_group=1)
# Qwen3-MoE with layer 0 a dense Qwen3MoeMLP (mlp_only_layers): refused by the estimate before the per-layer MLP kind
QWEN3_MOE_DENSE0 = {**QWEN3_MOE, "mlp_only_layers": [0], "intermediate_size": 96}

# GPT2 and OPT name no dropout field: they train with transformers' defaults (GPT-2: attention, residual and
# embedding dropout 0.1; OPT: residual dropout 0.1), like the real models.
ROWS: list[tuple[str, dict[str, Any], RunSpec]] = [
    ("llama lora bf16 eager", LLAMA, RunSpec(method="lora", precision="bf16", attention="eager")),
    ("llama full mixed sdpa", LLAMA, RunSpec(method="full", precision="mixed-bf16", attention="sdpa")),
    ("llama lora fp32 sdpa ckpt", LLAMA, RunSpec(method="lora", precision="fp32", checkpointing="full")),
    ("gpt2 full fp32 eager", GPT2, RunSpec(method="full", precision="fp32", attention="eager")),
    ("qwen2 lora all-linear mixed", QWEN2, RunSpec(method="lora", precision="mixed-bf16", targets=("all-linear",))),
    ("neox lora fp32 sdpa", NEOX, RunSpec(method="lora", precision="fp32")),
    # PEFT adapts the fused expert parameters too (ParamWrapper): W + delta materialised per forward
    ("mixtral lora all-linear bf16", MIXTRAL, RunSpec(method="lora", precision="bf16", targets=("all-linear",))),
    # dropout: CPU sdpa takes the math path (fp32 (b, a, s, s) probabilities, noise and dropped copy)
    ("gpt2 lora bf16 sdpa dropout", GPT2, RunSpec(method="lora", precision="bf16", attention="sdpa")),
    ("opt full fp32 sdpa dropout", OPT, RunSpec(method="full", precision="fp32", attention="sdpa")),
    ("llama lora all-linear fp32 lora-dropout", LLAMA, RunSpec(method="lora", precision="fp32",
                                                                targets=("all-linear",), lora_dropout=0.1)),
    # the estimate missed project_in's and project_out's saved inputs (saved bytes -6.4%)
    ("opt projected full fp32 sdpa", OPT_PROJECTED, RunSpec(method="full", precision="fp32", attention="sdpa")),
    ("phi qk-layernorm full fp32 eager dropout", PHI_QK, RunSpec(method="full", precision="fp32", attention="eager")),
    ("falcon full bf16 sdpa", FALCON, RunSpec(method="full", precision="bf16", attention="sdpa")),
    ("falcon serial lora all-linear mixed dropout", FALCON_SERIAL,
     RunSpec(method="lora", precision="mixed-bf16", attention="sdpa", targets=("all-linear",))),
    # the eager expert loop under autocast keeps one bf16 weight copy per expert (saved bytes were -37%)
    ("qwen3_moe lora q,v mixed eager", QWEN3_MOE, RunSpec(method="lora", precision="mixed-bf16", attention="eager",
                                                         targets=("q_proj", "v_proj"))),
    ("gpt_oss lora q,v mixed eager", GPT_OSS, RunSpec(method="lora", precision="mixed-bf16", attention="eager",
                                                     targets=("q_proj", "v_proj"))),
    ("deepseek_v3 lora all-linear mixed sdpa", DEEPSEEK, RunSpec(method="lora", precision="mixed-bf16",
                                                                 attention="sdpa", targets=("all-linear",))),
    ("deepseek_v3 full fp32 eager", DEEPSEEK, RunSpec(method="full", precision="fp32", attention="eager")),
    ("qwen3_moe dense layer 0 lora q,v fp32 sdpa", QWEN3_MOE_DENSE0, RunSpec(method="lora", precision="fp32",
                                                                           targets=("q_proj", "v_proj"))),
]


@pytest.mark.parametrize("name,config,spec", ROWS, ids=[r[0] for r in ROWS])
def test_estimate_matches_measured_peak(name: str, config: dict[str, Any], spec: RunSpec) -> None:
    torch.set_num_threads(1)
    spec = spec.with_(batch=2, seq=32, device="cpu")
    measured = real_steps(config, spec, steps=2)
    est = estimate_memory(ModelShape.from_hf_config(config, name=name), spec)
    err = (est.peak_bytes - measured.peak_bytes) / measured.peak_bytes
    assert abs(err) <= 0.02, f"{name}: estimate {est.peak_bytes:,} vs measured {measured.peak_bytes:,} ({err:+.2%})"
    act_err = (est.activation_bytes - measured.saved_bytes) / measured.saved_bytes
    if spec.checkpointing == "none":  # with checkpointing the hooks see only what the checkpoints keep
        assert abs(act_err) <= 0.02, f"{name}: saved {est.activation_bytes:,} vs {measured.saved_bytes:,}"
    assert est.peak_phase == measured.peak_phase


@pytest.mark.parametrize("model_type", list(REGISTRY))
def test_every_registered_architecture_matches_a_real_step(model_type: str) -> None:
    """Each registry entry (so each new one, with no test edited) against two real CPU steps: LoRA on its
    default targets (or the hint where PEFT has none), fp32, the first attention kernel transformers has for it,
    transformers' default dropout (GPT-2 and OPT train with it). d = h / a = 16 where the config can say (Gemma's
    class default, 256, would dwarf a 64-wide model), batch 1."""
    torch.set_num_threads(1)
    arch = REGISTRY[model_type]
    extra: dict[str, Any] = {"head_dim": 16} if arch.keys.kv_heads else {}
    extra.update(arch.keys.moe_sizes(4, 2))
    config = _config(model_type, kv_heads=2, intermediate=128, vocab=300, pad_token_id=0, **extra)
    targets = arch.lora_targets or tuple(arch.lora_hint.split(","))  # named, as memfit.measure passes them
    spec = arch.runnable_spec(RunSpec(method="lora", precision="fp32", attention="sdpa", batch=1, seq=32,
                                      device="cpu", targets=targets))
    measured = real_steps(config, spec, steps=2)
    est = estimate_memory(ModelShape.from_hf_config(config, name=model_type), spec)
    err = (est.peak_bytes - measured.peak_bytes) / measured.peak_bytes
    assert abs(err) <= 0.02, f"{model_type}: estimate {est.peak_bytes:,} vs {measured.peak_bytes:,} ({err:+.2%})"
    act_err = (est.activation_bytes - measured.saved_bytes) / measured.saved_bytes
    assert abs(act_err) <= 0.02, f"{model_type}: saved {est.activation_bytes:,} vs {measured.saved_bytes:,}"



@pytest.mark.parametrize("method", ["full", "lora"])
def test_gradient_accumulation_against_real_micro_batches(method: str) -> None:
    """``grad_accum 2``: two micro-batches' forward and backward, then one optimizer step (the Trainer's
    order). From the second micro-batch on every gradient is alive through the forward and backward; the
    real step (memfit's runtime, which now runs the micro-batches) against the estimate, both at accum 1 and 2.
    For the full fine-tune the second micro-batch's backward holds all the gradients beside the activations,
    so the measured peak must rise by most of the gradient bytes (an independent check that the effect is
    there: before the runtime ran micro-batches, accum 1 and 2 measured the same)."""
    torch.set_num_threads(1)
    peaks = {}
    for accum in (1, 2):
        spec = RunSpec(method=method, precision="fp32", attention="sdpa", batch=2, seq=32, device="cpu",
                       grad_accum=accum)
        measured = real_steps(LLAMA, spec, steps=2)
        est = estimate_memory(ModelShape.from_hf_config(LLAMA, name="llama"), spec)
        err = (est.peak_bytes - measured.peak_bytes) / measured.peak_bytes
        assert abs(err) <= 0.02, f"accum {accum}: estimate {est.peak_bytes:,} vs measured {measured.peak_bytes:,}"
        peaks[accum] = (measured.peak_bytes, est.model_states.gradients)
    if method == "full":
        (p1, grads), (p2, _) = peaks[1], peaks[2]
        assert p2 - p1 > grads // 2, f"accum 2 peak {p2:,} vs accum 1 {p1:,}: gradients {grads:,} B"
