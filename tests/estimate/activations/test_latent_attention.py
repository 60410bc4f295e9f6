"""Multi-head latent attention (``transformers/models/deepseek_v3/modeling_deepseek_v3.py``, 5.24.0) worked by hand.

b=2, s=8, h=16, a=2 heads, no q bottleneck (q_proj), kv_rank 8, nope 4, rope 4 (q/k heads 8 wide), v 6; full
fine-tune, fp32, eager, CPU. fp32 = 4 B.
"""

from __future__ import annotations

from activation_cases import by_component, model, replay

from memfit.estimate.activations.latent import latent_attention
from memfit.estimate.lora import block_linears_by_role

DEEPSEEK = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
            "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64, "q_lora_rank": None,
            "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 6,
            "moe_intermediate_size": 8, "intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
            "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}


def _saved(**spec: object) -> dict[str, int]:
    m = model(DEEPSEEK)
    rp = replay(m, **{"method": "full", "precision": "fp32", "attention": "eager", "device": "cpu", "batch": 2, **spec})
    t = rp.tape
    x = t.new((2, 8, 16), 4, True)
    rope = (t.new((1, 8, 4), 4, False), t.new((1, 8, 4), 4, False))
    latent_attention(rp, x, block_linears_by_role(m), rope)
    skip = {x.storage, *(r.storage for r in rope)}
    return by_component({k: v for k, v in t.saved.items() if k not in skip})


def test_mla_eager_saves_the_latent_norm_the_query_key_copies_and_a_value_copy() -> None:
    """Per the modeling code::

        q_proj, kv_a_proj_with_mqa: their input x (not counted here)
        kv_a_layernorm on a view of ckv (2, 8, 8 + 4): x.float() is that view -> ckv's storage 2*8*12*4 = 768,
            rsqrt 2*8*4 = 64, the normed y for the trained weight 2*8*8*4 = 512                 -> 1,344
        kv_b_proj: its input, the normed latent 2*8*8*4                                         ->   512
        query = cat(q_pass, q_rot), key = new_empty + copy_: (2, 2, 8, 8) each, saved by q @ k^T -> 2,048
        softmax output (2, 2, 8, 8) fp32                                                          -> 1,024
        p @ v: v is a split view of kv_b's output; matmul's (b*a, s, v) reshape copies it at b=2: 2*2*8*6*4 = 768
        o_proj: its input (2, 8, 2*6)                                                             ->   768
    """
    assert _saved() == {"attention/kv_a_norm": 1344, "attention/kv_b": 512, "attention/qk": 2048,
                        "attention/scores": 1024, "attention/pv": 768, "attention/out": 768}


def test_mla_cpu_sdpa_runs_the_math_path_in_fp32() -> None:
    """v (6) narrower than q and k (8): torch 2.13's CPU flash kernel refuses differing head widths, so sdpa runs
    the math composite: q*sqrt(scale) and k^T*sqrt(scale) fp32 (2, 2, 8, 8) each (2,048), its softmax (1,024), and
    v's bmm operand, a (2*2, 8, 6) copy of the split view (768) -- the eager figures, under other names."""
    saved = _saved(attention="sdpa")
    assert saved["attention/qk"] == 2048 and saved["attention/scores"] == 1024 and saved["attention/pv"] == 768
