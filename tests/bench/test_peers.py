"""bench/peers.py, the pure parts: the Hugging Face cache layout, the row -> peer option mapping, and the
summary statistics. The peers themselves run in `make bench-peers`, not here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from memfit.estimate import RunSpec, lookup

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import peers  # noqa: E402

GIB = 1024**3


def _spec(**kw: object) -> dict:
    return RunSpec(device="cpu", **kw).to_dict()  # type: ignore[arg-type]


# --- the cache layout ------------------------------------------------------------------------------


def test_cache_layout_is_found_by_huggingface_hub(tmp_path: Path) -> None:
    """huggingface_hub itself (not the builder) finds the file: the offline lookup fitcheck and
    accelerate make, and the cache scanner, which checks blobs, snapshots and refs."""
    hub = pytest.importorskip("huggingface_hub")
    config = dict(lookup("llama-3.2-1b").config)
    path = peers.lay_out_hf_cache(tmp_path, "meta-llama/Llama-3.2-1B", config)
    repo = tmp_path / "models--meta-llama--Llama-3.2-1B"
    revision = (repo / "refs" / "main").read_text()
    assert len(revision) == 40 and path == repo / "snapshots" / revision / "config.json"
    assert path.is_symlink() and path.resolve().parent == (repo / "blobs").resolve()
    found = hub.try_to_load_from_cache("meta-llama/Llama-3.2-1B", "config.json", cache_dir=tmp_path)
    assert found is not None and json.loads(Path(found).read_text()) == config
    info = hub.scan_cache_dir(tmp_path)
    assert not info.warnings, info.warnings
    (entry,) = info.repos
    assert entry.repo_id == "meta-llama/Llama-3.2-1B" and [r.commit_hash for r in entry.revisions] == [revision]
    assert {ref for r in entry.revisions for ref in r.refs} == {"main"}


def test_cache_layout_is_stable_and_follows_the_config(tmp_path: Path) -> None:
    config = {"model_type": "llama", "hidden_size": 64, "vocab_size": 100}
    a = peers.lay_out_hf_cache(tmp_path, "org/m", config)
    assert peers.lay_out_hf_cache(tmp_path, "org/m", config) == a  # the same config, the same place
    b = peers.lay_out_hf_cache(tmp_path, "org/m", {**config, "hidden_size": 128})
    assert b != a and (tmp_path / "models--org--m" / "refs" / "main").read_text() == b.parent.name
    assert json.loads(b.read_text())["hidden_size"] == 128


# --- mapping a row onto each peer's options ----------------------------------------------------------


def test_fitcheck_llama_lora_default_targets_maps_exactly() -> None:
    """PEFT's default for llama is q_proj, v_proj -> fitcheck's "q,v"; checkpointing and sdpa have flags."""
    cfg = lookup("llama-3.2-1b").config
    m = peers.fitcheck_options(cfg, _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128,
                                          checkpointing="full"))
    assert m.options["argv"] == ["--precision", "fp32", "--batch-size", "4", "--seq-len", "128", "--gpu", "h100",
                                 "--optimizer", "adamw", "--lora-r", "16", "--lora-targets", "q,v",
                                 "--grad-checkpoint", "--flash-attn"]
    assert m.codes == ()


def test_fitcheck_records_what_it_cannot_be_told() -> None:
    phi = lookup("phi-3-mini").config
    fused = peers.fitcheck_options(phi, _spec(method="lora", precision="bf16", attention="eager", batch=1, seq=32,
                                              targets=("qkv_proj", "o_proj")))
    argv = fused.options["argv"]
    assert argv[argv.index("--lora-targets") + 1] == "q,k,v,o" and "--flash-attn" not in argv
    assert fused.codes == ("T",)
    full_bf16 = peers.fitcheck_options(phi, _spec(method="full", precision="bf16", batch=1, seq=32))
    argv = full_bf16.options["argv"]
    assert "--no-lora" in argv and argv[argv.index("--optimizer-dtype") + 1] == "bf16"
    assert full_bf16.codes == ("P",)  # fitcheck adds a 4-byte master copy to a bf16 full fine-tune
    full_fp32 = peers.fitcheck_options(phi, _spec(method="full", precision="fp32", batch=1, seq=32))
    assert full_fp32.codes == () and "--optimizer-dtype" not in full_fp32.options["argv"]
    mixed = peers.fitcheck_options(lookup("llama-3.2-1b").config,
                                   _spec(method="lora", precision="mixed-bf16", targets=("all-linear",)))
    argv = mixed.options["argv"]
    assert argv[1] == "bf16" and argv[argv.index("--lora-targets") + 1] == "full" and mixed.codes == ("P",)
    every_k = peers.fitcheck_options(lookup("gpt2").config, _spec(method="lora", checkpointing="every-k"))
    assert set(every_k.codes) == {"T", "C"}  # c_attn as q,k,v; every-k given as every layer


def test_accelerate_and_deepspeed_codes() -> None:
    cfg = lookup("qwen2.5-0.5b").config
    assert peers.accelerate_options(cfg, _spec(method="full", precision="fp32")).options == {"dtype": "float32"}
    assert peers.accelerate_options(cfg, _spec(method="full", precision="fp32")).codes == ("A",)
    mixed = peers.accelerate_options(cfg, _spec(method="full", precision="mixed-bf16"))
    assert mixed.options == {"dtype": "float16"} and mixed.codes == ("A",)  # its own mixed-precision recipe
    assert peers.accelerate_options(cfg, _spec(method="lora", precision="bf16")).codes == ("L", "A", "P")
    assert peers.deepspeed_options(cfg, _spec(method="lora"), full_size=True).options == {"mode": "cold"}
    assert peers.deepspeed_options(cfg, _spec(method="full"), full_size=False).codes == ("A", "P")
    assert peers.accelerate_options(cfg, _spec(method="full", loss="chunked")).codes[0] == "K"


def test_llm_analysis_reads_each_architecture_s_own_field_names() -> None:
    """gpt2 (n_layer=12, n_head=12, n_embd=768, n_inner=None -> 4 x 768 = 3072, n_positions=1024) and
    mixtral (8 local experts, 2 per token, kv 8 of 32 heads, FFN 14336)."""
    m = peers.llm_analysis_options(lookup("gpt2").config, _spec(method="full", precision="fp32", batch=2, seq=64,
                                                                 attention="eager"))
    model = m.options["model"]
    assert (model["num_layers"], model["n_head"], model["hidden_dim"], model["ffn_embed_dim"], model["vocab_size"],
            model["max_seq_len"], model["expansion_ratio"]) == (12, 12, 768, 3072, 50257, 1024, 4.0)
    # fp32 cannot be said: llm-analysis asserts 4-, 8- or 16-bit weights and activations
    assert m.options["dtype"] == {"name": "w16a16e16", "weight_bits": 16, "activation_bits": 16, "embedding_bits": 16}
    t = m.options["training"]
    assert (t["flash_attn"], t["activation_recomputation"], t["master_weights_dtype_bytes"], t["other_op_bytes"],
            t["mlp_gated_linear_units"]) == (False, "NONE", 4, 8, False)
    assert m.codes == ("P",)
    mx = peers.llm_analysis_options(lookup("mixtral-8x7b").config,
                                    _spec(method="lora", precision="mixed-bf16", checkpointing="full"))
    model = mx.options["model"]
    assert (model["moe_num_experts"], model["moe_top_k"], model["num_key_value_heads"], model["n_head"],
            model["ffn_embed_dim"]) == (8, 2, 8, 32, 14336)
    assert mx.options["training"]["activation_recomputation"] == "FULL" and mx.codes == ("L", "P")
    bf16 = peers.llm_analysis_options(lookup("llama-3.2-1b").config, _spec(method="full", precision="bf16"))
    assert (bf16.options["training"]["master_weights_dtype_bytes"], bf16.options["training"]["other_op_bytes"]) == (
        2, 4)


def test_peft_default_targets_match_peft() -> None:
    """The table in bench/peers.py against PEFT's own mapping (peft 0.21.2)."""
    constants = pytest.importorskip("peft.utils.constants")
    mapping = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    for model_type, targets in peers.PEFT_DEFAULT_TARGETS.items():
        assert tuple(mapping[model_type]) == targets, model_type
    assert "phi3" not in mapping


# --- summary statistics --------------------------------------------------------------------------------


def test_summary_statistics_hand_worked() -> None:
    """Reference 100 B rows with tools 110, 97, 150, 92 B: errors +10%, -3%, +50%, -8%; |e| sorted
    3, 8, 10, 50 -> median (8 + 10) / 2 = 9%, max 50%; within 5%: 1 of 4; within 10%: 3 of 4 (10% counts).
    One row without a figure is counted as failed, not as an error, and its seconds are not an estimate's."""
    pairs = [(110, 100), (97, 100), (150, 100), (92, 100), (None, 100)]
    s = peers.summarise_tool(pairs, seconds=[0.5, 1.0, 2.0, None, 3.0], cards=(("100 B", 100),))
    assert (s.rows, s.failed) == (4, 1)
    assert s.median_abs == pytest.approx(0.09) and s.max_abs == pytest.approx(0.50)
    assert (s.within_5, s.within_10) == (0.25, 0.75)
    assert s.median_seconds == 1.0  # of 0.5, 1.0, 2.0 (the 4th row has no time, the 5th no figure)
    # at a 100 B card every reference fits; 110 and 150 say "does not fit": 2 wrong, none said fits wrongly
    assert s.wrong == {"100 B": 2} and s.fits_but_over == {"100 B": 0}


def test_verdicts_on_the_24_and_80_gib_cards() -> None:
    """Reference 20 GiB, tool 25 GiB: wrong at 24 GiB (says no, it fits), right at 80. Reference 30 GiB, tool
    23 GiB: wrong at 24 GiB the dangerous way (says fits, it does not). Reference 100 GiB, tool 79 GiB: wrong
    at 80 GiB the dangerous way."""
    s = peers.summarise_tool([(25 * GIB, 20 * GIB), (23 * GIB, 30 * GIB), (79 * GIB, 100 * GIB)])
    assert s.wrong == {"24 GiB": 2, "80 GiB": 1}
    assert s.fits_but_over == {"24 GiB": 1, "80 GiB": 1}


def test_summary_of_a_tool_with_no_figure_at_all() -> None:
    s = peers.summarise_tool([(None, 100), (None, 200)])
    assert (s.rows, s.failed, s.median_abs, s.max_abs, s.within_5) == (0, 2, None, None, None)
