"""The builder: configs, LoRA targets, what each spec field does to the model, and the meta / fake build."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.errors import MemfitError  # noqa: E402
from memfit.estimate.spec import RunSpec  # noqa: E402
from memfit.runtime.build import (  # noqa: E402
    autocast_dtype,
    build_meta_model,
    build_model,
    check_spec,
    fake_model,
    hf_config,
    lora_config,
    tiny_config,
    to_fake,
)

LLAMA = tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=300)


def test_tiny_config_speaks_each_architectures_keys() -> None:
    gpt2 = tiny_config("gpt2", layers=3, hidden=32, heads=2)
    assert (gpt2["n_layer"], gpt2["n_embd"], gpt2["n_head"], gpt2["n_inner"]) == (3, 32, 2, 128)
    assert (LLAMA["num_key_value_heads"], LLAMA["intermediate_size"]) == (2, 256)
    assert hf_config(LLAMA).num_hidden_layers == 2


def test_hf_config_refuses_what_transformers_cannot_build() -> None:
    with pytest.raises(MemfitError, match="no model_type"):
        hf_config({k: v for k, v in LLAMA.items() if k != "model_type"})


def test_lora_targets() -> None:
    """peft 0.21.2's defaults for llama (q_proj, v_proj) through the estimate's table; all-linear passed on; an
    architecture the estimate does not model left to PEFT (None)."""
    assert sorted(lora_config(RunSpec(), "llama").target_modules) == ["q_proj", "v_proj"]
    assert lora_config(RunSpec(targets=("all-linear",)), "llama").target_modules == "all-linear"
    assert lora_config(RunSpec(targets=("starcoder_thing",)), "starcoder2").target_modules == {"starcoder_thing"}
    assert lora_config(RunSpec(), "starcoder2").target_modules is None


def test_precision_sets_the_weight_dtype_and_autocast() -> None:
    bf16 = build_model(LLAMA, RunSpec(method="full", precision="bf16"), device="meta")
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    mixed = build_model(LLAMA, RunSpec(method="full", precision="mixed-bf16"), device="meta")
    assert {p.dtype for p in mixed.parameters()} == {torch.float32}
    assert autocast_dtype(RunSpec(precision="mixed-bf16")) == torch.bfloat16
    assert autocast_dtype(RunSpec(precision="bf16")) is None


def test_lora_trains_fp32_adapters_only_and_full_trains_everything() -> None:
    """Default targets q_proj, v_proj, r=16, hidden 64, 2 kv heads of 16: q A 16x64 + B 64x16 = 2,048; v A 16x64 +
    B 32x16 = 1,536; 2 layers: 7,168 trainable parameters, fp32 (PEFT's autocast_adapter_dtype) on a bf16 base."""
    lora = build_model(LLAMA, RunSpec(method="lora", precision="bf16"), device="meta")
    trainable = [p for p in lora.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == 7_168 and {p.dtype for p in trainable} == {torch.float32}
    full = build_model(LLAMA, RunSpec(method="full", precision="fp32"), device="meta")
    assert all(p.requires_grad for p in full.parameters())
    assert full.config.use_cache is False and full.training


def test_dora_builds_fp32_magnitudes() -> None:
    """--dora: LoraConfig(use_dora=True); the magnitudes (q out 64, v out 32, 2 layers: 192) join the 7,168
    adapter parameters above, fp32 on a bf16 base: 7,360."""
    assert lora_config(RunSpec(use_dora=True), "llama").use_dora is True
    dora = build_model(LLAMA, RunSpec(method="lora", precision="bf16", use_dora=True), device="meta")
    trainable = [p for p in dora.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == 7_360 and {p.dtype for p in trainable} == {torch.float32}


def test_checkpointing_is_applied_to_the_decoder_layers() -> None:
    model = build_model(LLAMA, RunSpec(method="full", checkpointing="full"), device="meta")
    assert model.is_activation_checkpointing
    assert not build_model(LLAMA, RunSpec(method="full"), device="meta").is_activation_checkpointing


@pytest.mark.parametrize(("fields", "device", "message"), [
    ({"optimizer": "paged-adamw-8bit"}, "cpu", "runs on CUDA only"),
    ({"attention": "flash"}, "cpu", "--attention flash needs CUDA"),
    ({"checkpointing": "sqrt", "offload": True}, "cpu", "drop --offload"),
    ({"loss": "chunked"}, "cpu", "standard loss only"),
])
def test_settings_the_real_model_cannot_run_are_refused(fields: dict[str, object], device: str,
                                                        message: str) -> None:
    with pytest.raises(MemfitError, match=message):
        check_spec(RunSpec(**fields), device)  # type: ignore[arg-type]


def test_fake_model_keeps_ties_and_requires_grad() -> None:
    """Qwen2 ties the embedding and lm_head: one fake tensor for both. LoRA: adapters train, the base does not."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    cfg = tiny_config("qwen2", layers=1, hidden=64, heads=4, kv_heads=2, vocab=300, tie_word_embeddings=True)
    model = fake_model(cfg, RunSpec(method="lora", precision="bf16"), FakeTensorMode())
    params = list(model.parameters())
    assert params and all(isinstance(p, FakeTensor) and p.device.type == "cpu" for p in params)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert {p.requires_grad for p in params} == {True, False}
    meta = build_meta_model(cfg, RunSpec(method="full"))
    n_tensors = len({id(t) for t in [*meta.parameters(), *meta.buffers()]})
    assert to_fake(meta, FakeTensorMode()) >= n_tensors  # every parameter and buffer (and tensor attributes)


def test_an_attention_transformers_refuses_names_the_flag() -> None:
    """Gemma 2's logit soft-capping has no sdpa path in transformers."""
    cfg = tiny_config("gemma2", layers=1, hidden=64, heads=4, kv_heads=2, vocab=300)
    with pytest.raises(MemfitError, match="--attention eager"):
        build_meta_model(cfg, RunSpec(attention="sdpa"))
