"""Invalid configs every engine must refuse at the boundary with one message naming the field (issue 21 #12).

Each case is (id, config, a fragment of the message). Shared by the estimate, trace and measure tests, so the
three engines are held to the same list.
"""

from __future__ import annotations

from typing import Any

LLAMA: dict[str, Any] = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
                         "max_position_embeddings": 512}
MIXTRAL: dict[str, Any] = {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
GPT2: dict[str, Any] = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256,
                        "n_positions": 512}

BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    ("kv-heads-0", {**LLAMA, "num_key_value_heads": 0}, "num_key_value_heads must be a positive integer"),
    ("kv-heads-negative", {**LLAMA, "num_key_value_heads": -2}, "num_key_value_heads must be a positive integer"),
    ("kv-heads-string", {**LLAMA, "num_key_value_heads": "2"}, "num_key_value_heads must be a positive integer"),
    ("kv-heads-not-a-divisor", {**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads 3 does not divide"),
    ("kv-heads-more-than-heads", {**LLAMA, "num_key_value_heads": 8}, "more key/value heads than the 4 heads"),
    ("head-dim-0", {**LLAMA, "head_dim": 0}, "head_dim must be a positive integer"),
    ("head-dim-string", {**LLAMA, "head_dim": "16"}, "head_dim must be a positive integer"),
    ("head-dim-float", {**LLAMA, "head_dim": 16.0}, "head_dim must be a positive integer"),
    ("heads-0", {**LLAMA, "num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
    ("layers-float", {**LLAMA, "num_hidden_layers": 2.0}, "num_hidden_layers must be a positive integer"),
    ("intermediate-0", {**LLAMA, "intermediate_size": 0}, "intermediate_size must be a positive integer"),
    ("llama-heads-do-not-divide-hidden", {**LLAMA, "hidden_size": 66, "num_key_value_heads": 4},
     "hidden_size 66 is not divisible by num_attention_heads 4"),
    ("gpt2-heads-do-not-divide-hidden", {**GPT2, "n_embd": 66}, "n_embd 66 is not divisible by n_head 4"),
    ("more-experts-per-token-than-experts", {**MIXTRAL, "num_experts_per_tok": 8},
     "num_experts_per_tok 8 is more than the 4 experts"),
    ("experts-per-token-0", {**MIXTRAL, "num_experts_per_tok": 0}, "num_experts_per_tok must be a positive integer"),
    ("absurd-hidden", {**LLAMA, "hidden_size": 10**12}, "hidden_size is 1,000,000,000,000: memfit accepts"),
    ("absurd-layers", {**LLAMA, "num_hidden_layers": 10**9}, "num_hidden_layers is 1,000,000,000: memfit accepts"),
    ("absurd-vocab", {**LLAMA, "vocab_size": 10**13}, "vocab_size is 10,000,000,000,000: memfit accepts"),
    ("absurd-experts", {**MIXTRAL, "num_local_experts": 10**6}, "num_local_experts is 1,000,000: memfit accepts"),
]
BAD_IDS = [case[0] for case in BAD_CONFIGS]
