"""Exact parameter counts: independent golden totals, hand-worked formulas, and transformers itself."""

from __future__ import annotations

import pytest

from memfit.estimate import catalogue, count_params, lookup

# Published / independently known totals (model cards, `sum(p.numel())` on the released checkpoints).
GOLDEN_TOTALS = {
    "gpt2": 124_439_808,
    "llama-2-7b": 6_738_415_616,
    "llama-3.1-8b": 8_030_261_248,
    "qwen2.5-0.5b": 494_032_768,
    "mixtral-8x7b": 46_702_792_704,
    "pythia-1.4b": 1_414_647_808,
}


@pytest.mark.parametrize(("name", "total"), GOLDEN_TOTALS.items())
def test_golden_totals(name: str, total: int) -> None:
    assert count_params(lookup(name).shape).total == total


def test_llama2_block_worked_by_hand() -> None:
    h, i, v, layers = 4096, 11008, 32000, 32
    block = 4 * h * h + 3 * h * i + 2 * h
    c = count_params(lookup("llama-2-7b").shape)
    assert c.per_layer == block
    assert c.total == 2 * v * h + layers * block + h
    assert c.by_kind["q_proj"] == layers * h * h
    assert c.by_kind["lm_head"] == v * h


def test_breakdown_sums_to_total() -> None:
    for entry in catalogue():
        c = count_params(entry.shape)
        assert sum(c.by_kind.values()) == c.total, entry.name


@pytest.fixture(scope="module")
def meta_counts() -> dict[str, tuple[int, dict[str, int]]]:
    """What transformers reports for each catalogue config built on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out = {}
    from memfit.estimate.shape import language_config

    for entry in catalogue():  # a multimodal config: the language model memfit trains (gemma-3-12b's text_config)
        cfg = transformers.AutoConfig.for_model(**language_config(entry.config))
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        # parameters() yields tied weights once, as a checkpoint stores them
        by_name = {n: p.numel() for n, p in model.named_parameters()}
        out[entry.name] = (sum(by_name.values()), by_name)
    return out


@pytest.mark.parametrize("name", [e.name for e in catalogue()])
def test_equals_transformers_on_meta_device(meta_counts, name: str) -> None:
    hf_total, by_name = meta_counts[name]
    c = count_params(lookup(name).shape)
    assert c.total == hf_total
    # per module kind too: sum transformers' parameters whose module name ends with the kind
    for kind in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "c_attn", "fc1",
                 "query_key_value", "qkv_proj", "gate_up_proj"):
        if kind in c.by_kind:
            hf = sum(n for k, n in by_name.items() if f".{kind}." in k or k.endswith(f".{kind}"))
            assert c.by_kind[kind] == hf, (name, kind)


def test_phi2_worked_by_hand() -> None:
    """Phi-2 (issue 13): biases on q/k/v/dense and fc1/fc2, LayerNorm with bias, and lm_head with a bias.
    h=2560, i=10240, V=51200, L=32: attention 4*(h*h + h) = 26,224,640; fc1 h*i + i = 26,224,640;
    fc2 i*h + h = 26,216,960; input_layernorm 2h = 5,120; block 78,671,360. Total = V*h (embed) + 32 blocks
    + 2h (final LayerNorm) + V*h + V (lm_head and its bias) = 2,779,683,840."""
    c = count_params(lookup("phi-2").shape)
    assert c.per_layer == 78_671_360
    assert c.lm_head == 51_200 * 2560 + 51_200
    assert c.total == 2_779_683_840
