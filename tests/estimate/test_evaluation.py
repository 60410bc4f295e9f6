"""The Trainer's evaluation in the estimate (issue 14 part 6): an eval step's logits and loss, the logits kept for
compute_metrics, and the peak over training + evaluation. Expected bytes are worked by hand from transformers
5.24's ``evaluation_loop`` / ``prediction_step`` / ``EvalLoopContainer`` (see memfit.estimate.evaluation); the
real ``Trainer.evaluate`` is measured in tests/measure/test_evaluation_measured.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memfit.errors import MemfitError
from memfit.estimate import REGISTRY, ModelShape, RunSpec, estimate_memory
from memfit.estimate.category import Category

# 2 layers, hidden 64, vocab 1000 (the fast agreement subset's Llama)
LLAMA: dict[str, Any] = {"model_type": "llama", "hidden_act": "silu", "tie_word_embeddings": False,
                         **REGISTRY["llama"].keys.write(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=176,
                                                        vocab=1000, positions=256)}
SHAPE = ModelShape.from_hf_config(LLAMA)
BASE = {"method": "lora", "precision": "fp32", "device": "cpu", "batch": 1, "seq": 8}


def _moment(spec: RunSpec, label: str) -> Any:
    return next(m for m in estimate_memory(SHAPE, spec).moments if m.label == label)


def test_loss_only_eval_step_holds_logits_and_loss_but_no_gradients() -> None:
    """eval batch 2 x seq 8, fp32, vocab 1000, hidden 64: Te = 16.
    logits 16*1000*4 = 64,000 (fp32: .float() is the same tensor), log-softmax 64,000, padded labels 2*9*8 = 144 and
    shifted labels 16*8 = 128: LOGITS 128,272; the last hidden state 16*64*4 = 4,096; input_ids + labels 2*16*8 =
    256; the weights and optimizer states as in training, no gradients (zero_grad(set_to_none=True) ran)."""
    spec = RunSpec(**BASE, eval_batch=2, prediction_loss_only=True)
    est = estimate_memory(SHAPE, spec)
    m = _moment(spec, "evaluation: loss")
    assert m.part(Category.LOGITS) == 128_272
    assert m.part(Category.ACTIVATIONS) == 4_096
    assert m.part(Category.INPUTS) == 256
    assert m.part(Category.GRADIENTS) == 0
    assert m.part(Category.OPTIMIZER) == est.model_states.optimizer
    assert [x.label for x in est.moments if x.phase == "evaluation"] == ["evaluation: loss"]


def test_kept_logits_pile_up_over_the_whole_eval_set() -> None:
    """compute_metrics and eval_accumulation_steps None: 10 examples / eval batch 2 = 5 steps' logits on the device.
    At the 5th EvalLoopContainer.add the old 4 batches, the new one and the 5-batch concatenation are alive:
    2*5*64,000 = 640,000 + the 4 kept label batches 4*128 = 512 -> 640,512; that is the step's peak (training: the
    backward at the loss, 3*8*1000*4 + ... < 200,000)."""
    spec = RunSpec(**BASE, eval_batch=2, eval_metrics=True, eval_samples=10)
    est = estimate_memory(SHAPE, spec)
    assert _moment(spec, "evaluation: gather logits").part(Category.LOGITS) == 640_512
    # the 5th step's loss: its own 128,272 + 4 kept batches of logits and labels 4*(64,000 + 128)
    assert _moment(spec, "evaluation: loss").part(Category.LOGITS) == 128_272 + 256_512
    assert est.peak_moment == "evaluation: gather logits"
    assert est.to_dict()["evaluation"]["kept_steps"] == 5


def test_accumulation_steps_bound_the_kept_logits_and_mixed_precision_keeps_them_in_fp32() -> None:
    """mixed-bf16, eval_accumulation_steps 3 of 50 steps: 3 batches kept, each fp32 (accelerate's
    convert_outputs_to_fp32): 2*3*16*1000*4 = 384,000 + 2*128 = 384,256. The loss moment's own logits are bf16:
    16*1000*2 = 32,000 + fp32 copy 64,000 + log-softmax 64,000 + labels 272 + kept 2*(64,000 + 128)."""
    spec = RunSpec(**{**BASE, "precision": "mixed-bf16"}, eval_batch=2, eval_metrics=True, eval_samples=100,
                   eval_accumulation_steps=3)
    assert _moment(spec, "evaluation: gather logits").part(Category.LOGITS) == 384_256
    assert _moment(spec, "evaluation: loss").part(Category.LOGITS) == 32_000 + 128_000 + 272 + 128_256


def test_without_eval_batch_nothing_changes() -> None:
    est = estimate_memory(SHAPE, RunSpec(**BASE))
    assert all(m.phase != "evaluation" for m in est.moments)
    assert est.to_dict()["evaluation"] is None


def test_metrics_without_a_bound_on_the_kept_steps_is_refused() -> None:
    with pytest.raises(MemfitError, match="--eval-samples"):
        RunSpec(**BASE, eval_batch=2, eval_metrics=True)
    with pytest.raises(MemfitError, match="--eval-batch must be a positive integer"):
        RunSpec(**BASE, eval_batch=0)


def test_cli_shows_both_peaks_and_refuses_eval_flags_without_eval_batch(tmp_path: Any,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from memfit.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA))
    args = ["estimate", str(cfg), "--method", "lora", "--precision", "fp32", "--device", "cpu", "--seq", "8",
            "--batch", "1"]
    assert main([*args, "--eval-batch", "2", "--eval-metrics", "--eval-samples", "10", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_moment"] == "evaluation: gather logits"
    assert d["evaluation"]["eval_peak_bytes"] == d["peak_bytes"] > d["evaluation"]["training_peak_bytes"]
    assert main([*args, "--eval-batch", "2", "--eval-metrics", "--eval-samples", "10"]) == 0
    assert "evaluation (eval batch 2, logits of 5 eval steps kept" in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--eval-metrics"]) != 0
    out = capsys.readouterr()
    assert "add --eval-batch" in out.err + out.out and "Traceback" not in out.err


def test_trainer_config_imports_the_evaluation_only_when_it_runs(tmp_path: Any) -> None:
    """TrainingArguments: eval_strategy steps -> eval_batch, prediction_loss_only, eval_accumulation_steps as
    written; eval_strategy no (transformers 5.24's default) -> no evaluation, the fields ignored."""
    from memfit.configs import import_configs, to_spec

    on = tmp_path / "on.json"
    on.write_text(json.dumps({"per_device_train_batch_size": 2, "eval_strategy": "steps",
                              "per_device_eval_batch_size": 4, "eval_accumulation_steps": 2,
                              "prediction_loss_only": True}))
    spec = to_spec(import_configs([f"hf-trainer:{on}"])).spec
    assert (spec.eval_batch, spec.eval_accumulation_steps, spec.prediction_loss_only) == (4, 2, True)
    off = tmp_path / "off.json"
    off.write_text(json.dumps({"per_device_train_batch_size": 2, "per_device_eval_batch_size": 4}))
    si = to_spec(import_configs([f"hf-trainer:{off}"]))
    assert si.spec.eval_batch is None
    assert any(r.field == "per_device_eval_batch_size" and r.status == "ignored" for r in si.rows)
