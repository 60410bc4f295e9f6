"""MemfitCallback on real Trainer and SFTTrainer runs of tiny models on the CPU (transformers 5.24.0, TRL 1.16.0).

The prediction is memfit's estimate for the batch the loader yields; the measurement is memfit's live-storage
tracker over the Trainer's own first two steps (``measure_cpu=True``). The agreement target is the estimate's
(peak within 2%, ``tests/estimate/test_agreement_fast.py``). Each run takes about a second.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("datasets")

import tiny_run as tiny  # noqa: E402

LENGTHS = [32, 20, 32, 12, 30, 32, 25, 31]  # the longest batch: 2 x 32, padded


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    torch.set_num_threads(1)
    for name in ("transformers", "accelerate", "trl", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _hf(tmp_path: Any, model: Any, callback: Any, *, lengths: list[int] = LENGTHS, steps: int = 2,
        collator: str = "pad", **args: Any) -> Any:
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments, default_data_collator

    kw: dict[str, Any] = {"output_dir": str(tmp_path), "per_device_train_batch_size": 2, "max_steps": steps,
                          "use_cpu": True, "report_to": [], "save_strategy": "no", "logging_steps": 1,
                          "disable_tqdm": True}
    kw.update(args)
    if collator == "pad":
        data_collator = DataCollatorForLanguageModeling(tiny.tokenizer(), mlm=False)
        ds = tiny.dataset(lengths, labels=False)
    else:
        data_collator = default_data_collator
        ds = tiny.dataset(lengths)
    trainer = Trainer(model=model, args=TrainingArguments(**kw), train_dataset=ds, data_collator=data_collator,
                      callbacks=[callback])
    trainer.train()
    return trainer


def _trl(tmp_path: Any, model: Any, callback: Any, *, lengths: list[int] = LENGTHS, **args: Any) -> Any:
    from trl import SFTConfig, SFTTrainer

    kw: dict[str, Any] = {"output_dir": str(tmp_path), "per_device_train_batch_size": 2, "max_steps": 2,
                          "use_cpu": True, "report_to": [], "save_strategy": "no", "logging_steps": 1,
                          "disable_tqdm": True, "max_length": 64}
    kw.update(args)
    trainer = SFTTrainer(model=model, args=SFTConfig(**kw), train_dataset=tiny.dataset(lengths, labels=False),
                         processing_class=tiny.tokenizer(), callbacks=[callback])
    trainer.train()
    return trainer


def _model(method: str) -> Any:
    m = tiny.model()
    return tiny.lora(m) if method == "lora" else m


def _check_agreement(cb: Any, trainer: Any) -> None:
    measured = cb.measured
    assert measured is not None
    ratio = measured["measured_peak_bytes"] / measured["predicted_peak_bytes"]
    assert abs(ratio - 1) <= 0.02, (f"predicted {measured['predicted_peak_bytes']:,} vs measured "
                                    f"{measured['measured_peak_bytes']:,} ({ratio:.4f})")
    assert not cb.warnings
    logged = [h for h in trainer.state.log_history if "memfit/ratio" in h]
    assert len(logged) == 1
    assert logged[0]["memfit/measured_peak_bytes"] == measured["measured_peak_bytes"]
    assert logged[0]["memfit/predicted_peak_bytes"] == measured["predicted_peak_bytes"]


HF_ROWS = [
    # (method, checkpointing, collator, optim): LoRA peaks at the loss; full without checkpointing too
    ("lora", False, "pad", "adamw_torch_fused"),
    ("lora", True, "pad", "adamw_torch_fused"),
    ("full", False, "equal", "adamw_torch_fused"),
    # full + checkpointing peaks at the optimizer step with torch's for-each/for-loop AdamW (README: with the
    # fused default the peak moves into the backward, where the estimate is 4.0% high on this tiny model)
    ("full", True, "pad", "adamw_torch"),
    # bf16=True: autocast over the fp32 weights (memfit's mixed-bf16)
    ("lora", True, "pad", "bf16"),
    ("full", False, "equal", "bf16"),
]


@pytest.mark.parametrize("method,ckpt,collator,optim", HF_ROWS,
                         ids=[f"{m}-{'ckpt' if c else 'none'}-{p}-{o}" for m, c, p, o in HF_ROWS])
def test_trainer_prediction_matches_measured_peak(tmp_path: Any, method: str, ckpt: bool, collator: str,
                                                  optim: str) -> None:
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(measure_cpu=True)
    lengths = LENGTHS if collator == "pad" else [32] * 8
    extra = {"bf16": True} if optim == "bf16" else {"optim": optim}
    trainer = _hf(tmp_path, _model(method), cb, lengths=lengths, collator=collator, gradient_checkpointing=ckpt,
                  **extra)
    if optim == "bf16":
        assert cb.prediction.spec.precision == "mixed-bf16"
    assert cb.prediction is not None
    assert (cb.prediction.shape.batch, cb.prediction.shape.seq) == (2, 32)
    assert cb.prediction.spec.method == method
    assert cb.prediction.spec.checkpointing == ("full" if ckpt else "none")
    _check_agreement(cb, trainer)


TRL_ROWS = [("lora", False, False, False), ("full", False, False, False), ("lora", True, False, False),
            ("lora", False, True, False), ("full", True, True, False),
            # SFTConfig's defaults: bf16=True (autocast over the fp32 weights) and gradient_checkpointing=True
            ("lora", None, False, None), ("full", False, False, True)]


@pytest.mark.parametrize("method,ckpt,packing,bf16", TRL_ROWS,
                         ids=[f"{m}-{'default' if c is None else 'ckpt' if c else 'none'}-{'pack' if p else 'pad'}-"
                              f"{'default' if b is None else 'bf16' if b else 'fp32'}" for m, c, p, b in TRL_ROWS])
def test_sft_trainer_prediction_matches_measured_peak(tmp_path: Any, method: str, ckpt: bool | None, packing: bool,
                                                      bf16: bool | None) -> None:
    """TRL's fused LM head is predicted by :func:`trl_head_bytes`; with packing (BFD, padding-free) the longest
    batch is the two longest packed rows end to end: rows of 32+32 and 32+31 tokens -> 1 x 127."""
    pytest.importorskip("trl")
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(measure_cpu=True)
    extra: dict[str, Any] = {"packing": packing}
    if ckpt is not None:
        extra["gradient_checkpointing"] = ckpt
    if bf16 is not None:
        extra["bf16"] = bf16
    else:
        extra.pop("bf16", None)
    trainer = _trl(tmp_path, _model(method), cb, **extra)
    assert cb.prediction is not None
    if ckpt is None:
        assert cb.prediction.spec.checkpointing == "full"
    if bf16 is not False:
        assert cb.prediction.spec.precision == "mixed-bf16"
    assert cb.prediction is not None
    expected = (1, 127) if packing else (2, 32)
    assert (cb.prediction.shape.batch, cb.prediction.shape.seq) == expected
    assert cb.prediction.spec.loss == "chunked"
    _check_agreement(cb, trainer)


def test_gradient_accumulation_keeps_the_gradients_through_the_next_micro_batch(tmp_path: Any) -> None:
    """gradient_accumulation_steps=2, full fine-tune: the first micro-batch's gradients (every weight, 881,920 B)
    are alive through the second one's forward and backward (measured 5,009,840 B against 4,127,832 B for one
    micro-batch); the estimate keeps them (grad_accum in the RunSpec read from the arguments)."""
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(measure_cpu=True)
    trainer = _hf(tmp_path, _model("full"), cb, lengths=[32] * 8, collator="equal", gradient_accumulation_steps=2)
    assert cb.prediction is not None and cb.prediction.spec.grad_accum == 2
    _check_agreement(cb, trainer)


def test_fused_adamw_allocates_no_step_temporaries(tmp_path: Any) -> None:
    """The Trainer's default optim (adamw_torch_fused) runs a kernel with no temporaries: full fine-tune with
    checkpointing, whose estimate peaks at the optimizer step with torch's for-loop AdamW (4,040,788 B, 2 x the
    largest tensor of temporaries), measures 3,573,168 B, a backward peak. Counting the loop's temporaries the
    prediction is 13% high; without them it is the backward of the first block, 3,717,204 B: 4.0% high, because
    the estimate counts all of block 0's weight gradients at the widest op of its backward, where torch has made
    only the later ops' (reported; not fixed here). Held to 5%."""
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(measure_cpu=True, tolerance=0.05)
    _hf(tmp_path, _model("full"), cb, gradient_checkpointing=True)
    assert cb.measured is not None
    assert cb.measured["prediction"].peak_moment == "backward: first block"
    assert abs(cb.measured["ratio"] - 1) <= 0.05, cb.measured["ratio"]


def test_base_weights_left_trainable_are_named(tmp_path: Any) -> None:
    """A LoRA model whose base weights were left trainable: every weight gets a gradient and AdamW states, far
    above the LoRA prediction (1.9x on this model)."""
    from memfit.integrations.transformers import MemfitCallback

    model = _model("lora")
    model.requires_grad_(True)  # the bug: the base is trainable too
    cb = MemfitCallback(measure_cpu=True)
    _hf(tmp_path, model, cb)
    assert cb.measured is not None and cb.measured["ratio"] > 1.5
    assert len(cb.warnings) == 1
    assert "gradients present on frozen parameters: is requires_grad set on the base?" in cb.warnings[0]


def test_checkpointing_requested_but_off_is_named(tmp_path: Any) -> None:
    """gradient_checkpointing=True, but the model ignores the Trainer's call (a model whose enable method does
    nothing): every block keeps its activations, measured well above the checkpointed prediction."""
    from memfit.integrations.transformers import MemfitCallback

    model = _model("lora")
    model.activation_checkpointing_enable = lambda *a, **k: None  # the bug: enabling does nothing
    cb = MemfitCallback(measure_cpu=True)
    _hf(tmp_path, model, cb, gradient_checkpointing=True)
    assert cb.prediction is not None and cb.prediction.spec.checkpointing == "full"
    assert cb.measured is not None and cb.measured["ratio"] > 1.10
    assert len(cb.warnings) == 1
    assert "checkpointing requested (gradient_checkpointing=True) but off on the model" in cb.warnings[0]


def _lora_estimate(checkpointing: str, seq: int = 200) -> int:
    """``memfit estimate`` of the tiny LoRA run, from an explicit RunSpec (not from the live objects)."""
    from memfit.estimate import ModelShape, RunSpec, estimate_memory

    spec = RunSpec(method="lora", rank=8, alpha=16, targets=("q_proj", "v_proj"), precision="fp32", batch=2, seq=seq,
                   device="cpu", checkpointing=checkpointing)
    return estimate_memory(ModelShape.from_hf_config(tiny.LLAMA), spec).peak_bytes


def test_stop_if_oom_stops_before_step_one(tmp_path: Any) -> None:
    """Batches of 2 x 200 tokens. An 8,000,000 B GPU less the 5% headroom leaves 7,600,000 B: the LoRA step does not
    fit (about 8.7 MB), with checkpointing it does (about 6.1 MB; a saving above memfit fit's 1 MiB minimum), so
    the plan names the Trainer's field. No forward runs."""
    from memfit.integrations.transformers import MemfitCallback, WouldNotFit

    peak, checkpointed = _lora_estimate("none"), _lora_estimate("full")
    assert checkpointed < 7_600_000 < peak
    model = _model("lora")
    forwards = []
    model.register_forward_pre_hook(lambda *a: forwards.append(1))
    cb = MemfitCallback(gpu="8000000B", stop_if_oom=True)
    with pytest.raises(WouldNotFit) as info:
        _hf(tmp_path, model, cb, lengths=[200] * 8, collator="equal")
    assert forwards == []
    text = str(info.value)
    assert "does not fit" in text and "activation_checkpointing=True" in text
    assert "stopped before the first step" in text
    assert info.value.prediction.peak_bytes == peak


def test_does_not_fit_without_stop_logs_the_plan_and_trains(tmp_path: Any) -> None:
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(gpu="8000000B")
    trainer = _hf(tmp_path, _model("lora"), cb, lengths=[200] * 8, collator="equal", steps=1)
    assert trainer.state.global_step == 1
    assert cb.warnings and "activation_checkpointing=True" in cb.warnings[0]


def test_trainer_loop_and_memfit_loop_give_the_same_peak() -> None:
    """``memfit measure --trainer hf`` against memfit's own loop on the same point: the Trainer's batch holds the
    labels as a tensor of their own (b*s*8 = 512 B) and clips the gradients (a few scalars), so its peak may be
    higher by that much: within 0.2%."""
    from memfit.estimate import RunSpec
    from memfit.measure.point import measure_point
    from memfit.measure.trainer import measure_point_trainer

    spec = RunSpec(method="lora", rank=8, alpha=16, targets=("q_proj", "v_proj"), precision="fp32", batch=2, seq=32,
                   device="cpu")
    own = measure_point(tiny.LLAMA, spec, steps=1, warmup=0)
    hf = measure_point_trainer(tiny.LLAMA, spec, trainer="hf", steps=1, warmup=0)
    assert own.peak_bytes and hf.peak_bytes
    assert 0 <= hf.peak_bytes - own.peak_bytes <= 0.002 * own.peak_bytes, (own.peak_bytes, hf.peak_bytes)
    assert hf.peak_phase == own.peak_phase == "backward"
    for cat in ("weights_frozen", "weights_trainable", "optimizer", "logits"):
        assert hf.by_category[cat] == own.by_category[cat], cat


def test_sft_trainer_loop_peak_equals_its_prediction() -> None:
    pytest.importorskip("trl")
    from memfit.estimate import RunSpec
    from memfit.measure.trainer import measure_point_trainer

    spec = RunSpec(method="lora", rank=8, alpha=16, targets=("q_proj", "v_proj"), precision="fp32", batch=2, seq=32,
                   device="cpu")
    r = measure_point_trainer(tiny.LLAMA, spec, trainer="trl", steps=1, warmup=0)
    assert r.peak_bytes and r.estimate_bytes
    assert abs(r.peak_bytes / r.estimate_bytes - 1) <= 0.02


def test_importing_memfit_imports_no_transformers() -> None:
    code = ("import sys, memfit, memfit.integrations, memfit.estimate; "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the longest batch and the plan's wording, without a run ------------------------------------------------

class _Loader:
    def __init__(self, dataset: Any, collate_fn: Any) -> None:
        self.dataset, self.collate_fn = dataset, collate_fn


class _Args:
    per_device_train_batch_size = 4


class _Collator:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def test_longest_batch_padding_to_the_longest_example() -> None:
    from memfit.integrations.transformers import longest_batch

    ds = tiny.dataset([10, 50, 7, 33], labels=False)
    shape = longest_batch(_Args(), _Loader(ds, _Collator()))
    assert (shape.batch, shape.seq, shape.padding_mask) == (4, 50, True)
    shape = longest_batch(_Args(), _Loader(ds, _Collator(pad_to_multiple_of=64)))
    assert (shape.batch, shape.seq) == (4, 64)
    shape = longest_batch(_Args(), _Loader(ds, _Collator(padding="max_length", max_length=128)))
    assert (shape.batch, shape.seq, shape.padding_mask) == (4, 128, True)
    same = tiny.dataset([16] * 8, labels=False)
    assert longest_batch(_Args(), _Loader(same, _Collator())).padding_mask is False
    # a selection (an indices mapping over the Arrow table): only the selected rows count
    assert longest_batch(_Args(), _Loader(ds.select([0, 2]), _Collator())).seq == 10


def test_longest_batch_padding_free_concatenates_the_longest_rows() -> None:
    """4 rows per batch, padding-free: the 4 longest (50 + 33 + 20 + 10 = 113 tokens) in one row."""
    from memfit.integrations.transformers import longest_batch

    ds = tiny.dataset([10, 50, 7, 33, 20], labels=False)
    shape = longest_batch(_Args(), _Loader(ds, _Collator(padding_free=True)))
    assert (shape.batch, shape.seq, shape.padding_mask) == (1, 113, True)


def test_longest_batch_without_lengths_uses_max_length_or_refuses() -> None:
    from memfit.errors import MemfitError
    from memfit.integrations.transformers import longest_batch

    class Trl(_Args):
        max_length, packing = 512, False

    shape = longest_batch(Trl(), _Loader(None, _Collator()))
    assert (shape.batch, shape.seq) == (4, 512) and "max_length" in shape.how
    with pytest.raises(MemfitError, match="longest batch"):
        longest_batch(_Args(), _Loader(None, _Collator()))


def test_plan_changes_in_the_trainers_fields() -> None:
    from transformers import TrainingArguments

    from memfit.integrations.transformers import framework_fields

    hf = TrainingArguments(output_dir="/tmp/memfit-unused", use_cpu=True, report_to=[])
    assert framework_fields(hf, "checkpointing", "none", "full", {}) == "activation_checkpointing=True"
    assert framework_fields(hf, "batch", 8, 2, {}) == "per_device_train_batch_size=2"
    assert framework_fields(hf, "grad_accum", 1, 4, {}) == "gradient_accumulation_steps=4"
    assert "LoraConfig(r=16)" in framework_fields(hf, "method", "full", "lora", {"rank": 16})


def test_plan_changes_in_sft_configs_fields() -> None:
    """SFTConfig's own fields; LoRA's rank is a LoraConfig argument in Python (lora_r is trl sft's CLI field)."""
    pytest.importorskip("trl")
    from trl import SFTConfig

    from memfit.integrations.transformers import framework_fields

    sft = SFTConfig(output_dir="/tmp/memfit-unused", use_cpu=True, report_to=[])
    # transformers 5.24's name; gradient_checkpointing is its deprecated alias (TRL's docs still use it)
    assert framework_fields(sft, "checkpointing", "none", "full", {}) == "activation_checkpointing=True"
    assert framework_fields(sft, "seq", 2048, 1024, {}) == "max_length=1024"
    assert framework_fields(sft, "packing", False, True, {}) == "packing=True"
    # TRL 1.16's SFTTrainer keeps its own fused LM head under use_liger_kernel (Liger's cross-entropy turned off,
    # sft_trainer.py): no SFTConfig field switches to Liger's loss
    assert framework_fields(sft, "loss", "standard", "chunked", {}) == "loss standard -> chunked (memfit's setting)"
    assert framework_fields(sft, "rank", 64, 8, {}) == "LoraConfig(r=8)"


def test_a_gpu_size_without_unit_is_refused_at_construction() -> None:
    from memfit.errors import MemfitError
    from memfit.integrations.transformers import MemfitCallback

    with pytest.raises(MemfitError, match="no unit"):
        MemfitCallback(gpu="24")


@pytest.mark.cuda
def test_on_cuda_the_allocator_peak_is_compared(tmp_path: Any) -> None:
    """On a CUDA GPU: max_memory_allocated against the prediction (CUDA kernels, no tracker), within 10%."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback()
    trainer = _hf(tmp_path, _model("lora").cuda(), cb, use_cpu=False)
    assert cb.measured is not None and cb.measured["measured_reserved_bytes"]
    assert abs(cb.measured["ratio"] - 1) <= 0.10, cb.measured
    assert any("memfit/measured_reserved_bytes" in h for h in trainer.state.log_history)


# ---- memfit measure --trainer -------------------------------------------------------------------------------

@pytest.mark.slow
def test_measure_cli_trainer_hf_in_a_subprocess(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's point, measured through the Trainer in a fresh worker, is the in-process Trainer measurement, and
    within 0.2% of memfit's own loop on the same point (the labels tensor and the clipping's scalars)."""
    import json

    from memfit.cli import main
    from memfit.estimate import RunSpec
    from memfit.measure.point import measure_point

    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny.LLAMA))
    rc = main(["measure", str(path), "--batch", "2", "--seq", "32", "--device", "cpu", "--precision", "fp32",
               "--rank", "8", "--targets", "q_proj,v_proj", "--steps", "1", "--trainer", "hf", "--json"])
    assert rc == 0
    (one,) = json.loads(capsys.readouterr().out)["runs"]
    own = measure_point(tiny.LLAMA, RunSpec(method="lora", rank=8, targets=("q_proj", "v_proj"), precision="fp32",
                                            device="cpu", batch=2, seq=32), steps=1, warmup=0)
    assert own.peak_bytes is not None
    assert 0 <= one["peak_bytes"] - own.peak_bytes <= 0.002 * own.peak_bytes
    assert one["step_seconds"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--trainer", "axolotl"], "--trainer must be one of hf, trl"),
    (["--trainer", "hf", "--memory-limit", "2GiB"], "drop them, or drop --trainer"),
    (["--trainer", "hf", "--optimizer", "sgd-momentum"], "--trainer hf measures --optimizer adamw, sgd, adafactor"),
])
def test_measure_cli_trainer_bad_input_is_one_red_line(tmp_path: Any, args: list[str], message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from memfit.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny.LLAMA))
    rc = main(["measure", str(path), "--device", "cpu", "--batch", "1", "--seq", "16", *args])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert message in err and "Traceback" not in err


def test_a_run_memfit_cannot_predict_warns_once_and_trains(tmp_path: Any) -> None:
    """BLOOM is a transformers causal LM memfit's estimate has no architecture for: one warning, no crash."""
    from transformers import AutoModelForCausalLM, BloomConfig

    from memfit.integrations.transformers import MemfitCallback

    model = AutoModelForCausalLM.from_config(BloomConfig(vocab_size=1000, hidden_size=64, n_layer=2, n_head=4))
    cb = MemfitCallback(measure_cpu=True)
    trainer = _hf(tmp_path, model, cb, lengths=[16] * 4, collator="equal")
    assert trainer.state.global_step == 2
    assert len(cb.warnings) == 1 and cb.warnings[0].startswith("memfit: no prediction for this run: ")
    assert "memfit bug" not in cb.warnings[0], cb.warnings[0]
    assert cb.measured is None


def test_evaluation_between_the_measured_steps_is_not_measured(tmp_path: Any) -> None:
    """eval_steps=1 with an evaluation batch of 8 rows: the evaluation runs between the two measured steps; its
    batches are not training batches (the prediction stays 2 x 32) and its tensors are not tracked."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    from memfit.integrations.transformers import MemfitCallback

    cb = MemfitCallback(measure_cpu=True)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=8,
                             max_steps=2, use_cpu=True, report_to=[], save_strategy="no", eval_strategy="steps",
                             eval_steps=1, logging_steps=1, disable_tqdm=True)
    trainer = Trainer(model=_model("lora"), args=args, train_dataset=tiny.dataset([32] * 8),
                      eval_dataset=tiny.dataset([32] * 8), data_collator=default_data_collator, callbacks=[cb])
    trainer.train()
    assert cb.measured is not None
    shape = cb.measured["prediction"].shape
    assert (shape.batch, shape.seq) == (2, 32)
    _check_agreement(cb, trainer)
