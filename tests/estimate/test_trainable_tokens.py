"""``--trainable-tokens`` (PEFT 0.21.2 ``LoraConfig.trainable_token_indices``, ``TrainableTokensLayer``): k delta rows
of the input embedding train; trainable counts equal PEFT's own on the meta device, and the backward's dense
(V, h) gradient of the merged table is a temporary at the embedding (agreement rows: tests/validate/
test_peft_rows.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from peft_on_meta import peft_trainable, two_layers

from memfit.errors import MemfitError
from memfit.estimate import ModelShape, RunSpec, estimate_memory, lookup, lora_trainable_params, model_states

CASES = [("pythia-1.4b", [0, 5, 50000], {}), ("llama-3.2-1b", [128000, 128001], {"tie_word_embeddings": False}),
         ("opt-1.3b", [3], {"tie_word_embeddings": False}),
         # tied: PEFT wraps the lm_head too, its TrainableTokensLayer sharing the embedding's delta (counted once)
         ("gpt2", [0, 1, 50000], {}), ("qwen2.5-0.5b", [5, 7], {}), ("llama-3.2-1b-tied", [128000], {}),
         ("gemma-2-2b", [3], {})]


@pytest.mark.parametrize("name,ids,fields", CASES, ids=[c[0] for c in CASES])
def test_trainable_params_equal_peft(name: str, ids: list[int], fields: dict[str, object]) -> None:
    name = name.removesuffix("-tied")
    config = {**two_layers(name), **fields}
    targets = list(lookup(name).shape.arch.default_lora_targets())
    expected = peft_trainable(config, r=8, target_modules=targets, trainable_token_indices=ids)
    spec = RunSpec(method="lora", rank=8, trainable_token_indices=tuple(ids))
    shape = ModelShape.from_hf_config(config)
    assert lora_trainable_params(shape, spec) == expected
    assert model_states(shape, spec).trainable_params == expected
    assert expected - lora_trainable_params(shape, spec.with_(trainable_token_indices=())) == len(ids) * \
        shape.embed_dim


def test_llama2_worked() -> None:
    """Llama-2-7B (V 32,000, h 4,096, bf16), ids 1 and 2: 2 * 4,096 = 8,192 trained elements (16,384 B), a frozen
    copy of the original rows (16,384 B more frozen), their gradient (16,384 B) and AdamW moments (2 * 16,384 B +
    the fused step's 512 B block); the embedding's backward holds the dense merged-table gradient, 32,000 * 4,096
    * 2 = 262,144,000 B, beside every gradient."""
    shape, spec = lookup("llama-2-7b").shape, RunSpec(method="lora")
    tok = spec.with_(trainable_token_indices=(1, 2))
    a, b = model_states(shape, spec), model_states(shape, tok)
    assert b.trainable_params - a.trainable_params == 8_192
    assert b.weights_frozen - a.weights_frozen == 16_384
    assert b.gradients - a.gradients == 16_384
    assert b.optimizer - a.optimizer == 2 * 16_384 + 512
    emb = [m for m in estimate_memory(shape, tok).moments if m.label == "backward: embeddings"][0]
    emb0 = [m for m in estimate_memory(shape, spec).moments if m.label == "backward: embeddings"][0]
    assert emb.total - emb0.total - (b.total - a.total) == 262_144_000


def test_refused_and_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memfit.cli import main
    from memfit.configs import import_configs, to_spec

    with pytest.raises(MemfitError, match="tied embeddings with --loss chunked"):
        lora_trainable_params(lookup("llama-3.2-1b").shape, RunSpec(method="lora", trainable_token_indices=(1,),
                                                                    loss="chunked"))
    with pytest.raises(MemfitError, match="past the vocabulary"):
        lora_trainable_params(lookup("llama-2-7b").shape, RunSpec(method="lora", trainable_token_indices=(32000,)))
    with pytest.raises(MemfitError, match="both train the embedding"):
        lora_trainable_params(lookup("llama-2-7b").shape, RunSpec(method="lora", trainable_token_indices=(1,),
                                                                  modules_to_save=("embed_tokens",)))
    with pytest.raises(MemfitError, match="--trainable-tokens"):
        RunSpec(method="lora", trainable_token_indices="1,x")  # type: ignore[arg-type]
    assert main(["estimate", "llama-2-7b", "--json"]) == 0
    base = json.loads(capsys.readouterr().out)["trainable_params"]
    assert main(["estimate", "llama-2-7b", "--trainable-tokens", "1,2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainable_params"] - base == 8_192
    data = json.loads((Path(__file__).parents[1] / "configs" / "files" / "adapter_config.json").read_text())
    data["trainable_token_indices"] = [5, 6]
    (tmp_path / "adapter_config.json").write_text(json.dumps(data))
    si = to_spec(import_configs([str(tmp_path / "adapter_config.json")]))
    assert si.spec.trainable_token_indices == (5, 6)


def test_peft_ties_the_head_adapter() -> None:
    """What the tied estimate rests on (PEFT 0.21.2 ``set_additional_trainable_modules``): with tied embeddings the
    lm_head is a ``TrainableTokensWrapper`` whose layer is tied to the embedding's and holds the very same delta
    Parameter."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = dict(two_layers("qwen2.5-0.5b"))
    model_type = cfg.pop("model_type")
    cfg.pop("torch_dtype", None)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(model_type, **cfg))
    pm = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", trainable_token_indices=[5, 7]))
    emb, head = pm.get_input_embeddings().token_adapter, pm.get_output_embeddings().token_adapter
    assert head.tied_adapter is emb
    assert head.trainable_tokens_delta["default"] is emb.trainable_tokens_delta["default"]
    assert head.get_base_layer().weight is emb.get_base_layer().weight


def _moment(shape: ModelShape, spec: RunSpec, label: str) -> dict[str, int]:
    moment = next(m for m in estimate_memory(shape, spec).moments if m.label == label)
    return {k.value: v for k, v in moment.parts.items()}


def test_tied_llama_worked() -> None:
    """Llama-3.2-1B (tied; V 128,256, h 2,048), b1 s512 (T 512), one id. fp32: the lm_head's F.linear saves the merged
    table (128,256 * 2,048 * 4 = 1,050,673,152 B), its input x (512 * 2,048 * 4 = 4,194,304 B) and the int64 index
    (8 B) until its backward, where the table's dense gradient (1,050,673,152 B) and d(x) (4,194,304 B) are made at
    once, the peak. mixed-bf16: at the end of the lm_head's forward the fp32 merged table (1,050,673,152 B) is alive
    beside its saved bf16 copy, with the bf16 logits (512 * 128,256 * 2 = 131,334,144 B) and the final norm's fp32
    output (4,194,304 B; nothing saved it)."""
    from memfit.estimate import estimate_activations

    shape = lookup("llama-3.2-1b").shape
    spec = RunSpec(method="lora", precision="fp32", batch=1, seq=512)
    tok = spec.with_(trainable_token_indices=(128000,))
    assert estimate_activations(shape, tok).head - estimate_activations(shape, spec).head == (
        1_050_673_152 + 4_194_304 + 8)
    est = estimate_memory(shape, tok)
    assert est.peak_moment == "backward: lm_head matmul"
    assert _moment(shape, tok, "backward: lm_head matmul")["temporaries"] == 1_050_673_152 + 4_194_304
    mixed = tok.with_(precision="mixed-bf16")
    assert _moment(shape, mixed, "forward: lm_head merged table")["temporaries"] == (
        1_050_673_152 + 131_334_144 + 4_194_304)
