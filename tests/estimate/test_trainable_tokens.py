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
         ("opt-1.3b", [3], {"tie_word_embeddings": False})]


@pytest.mark.parametrize("name,ids,fields", CASES, ids=[c[0] for c in CASES])
def test_trainable_params_equal_peft(name: str, ids: list[int], fields: dict[str, object]) -> None:
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

    with pytest.raises(MemfitError, match="tied embeddings"):
        lora_trainable_params(lookup("llama-3.2-1b").shape, RunSpec(method="lora", trainable_token_indices=(1,)))
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
