"""Tiny models, tokenizer and datasets for real Trainer / SFTTrainer runs on the CPU (a second or two each)."""

from __future__ import annotations

from typing import Any

LLAMA: dict[str, Any] = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 176,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "max_position_embeddings": 256, "tie_word_embeddings": False, "hidden_act": "silu"}
PAD, EOS = 0, 1


def tokenizer(vocab: int = 1000) -> Any:
    """A word-level tokenizer over tokens ``t0``..``t{vocab-1}`` (pad ``t0``, eos ``t1``), built in memory."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t2"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")


def model(config: dict[str, Any] = LLAMA, *, dtype: str = "float32", attention: str = "sdpa") -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from memfit.runtime.build import hf_config

    cfg = hf_config(config)
    cfg.use_cache = False
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=attention, dtype=getattr(torch, dtype))


def lora(m: Any, r: int = 8, targets: tuple[str, ...] = ("q_proj", "v_proj")) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(m, LoraConfig(r=r, lora_alpha=2 * r, target_modules=list(targets), task_type="CAUSAL_LM"))


def dataset(lengths: list[int], *, vocab: int = 1000, labels: bool = True) -> Any:
    """Token ids (not EOS, not PAD) of the given lengths, as a ``datasets.Dataset``."""
    from datasets import Dataset

    ids = [[2 + (i * 7 + j) % (vocab - 2) for j in range(n)] for i, n in enumerate(lengths)]
    data: dict[str, Any] = {"input_ids": ids}
    if labels:
        data["labels"] = [list(x) for x in ids]
    return Dataset.from_dict(data)
