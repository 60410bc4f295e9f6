"""The Python API: memfit.estimate / memfit.fit, RunSpec.from_config, RunSpec.from_training_args on live
transformers / PEFT objects, and the README's claim that the same run as an axolotl file and as a TRL file
gives the same estimate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import memfit
from memfit.configs import import_configs, to_spec
from memfit.estimate import RunSpec, estimate_memory, resolve_model

FILES = Path(__file__).parent / "files"


def test_estimate_call_equals_the_engine() -> None:
    est = memfit.estimate("llama-3.1-8b", rank=16, batch=4, seq=2048, targets="q_proj,v_proj")
    spec = RunSpec(rank=16, batch=4, seq=2048, targets=("q_proj", "v_proj"))
    assert est.peak_bytes == estimate_memory(resolve_model("llama-3.1-8b"), spec).peak_bytes
    assert isinstance(est, memfit.MemoryEstimate)
    assert memfit.estimate.estimate_memory is estimate_memory  # still the package


def test_estimate_from_a_config_file() -> None:
    est = memfit.estimate(config=FILES / "axolotl_lora_fsdp.yml")
    expected = to_spec(import_configs([FILES / "axolotl_lora_fsdp.yml"])).spec
    assert est.model == "meta-llama/Llama-3.1-8B" and est.spec == expected
    assert memfit.estimate(config=FILES / "axolotl_lora_fsdp.yml", batch=1).spec.batch == 1  # keywords win


def test_fit_call() -> None:
    report = memfit.fit("llama-3.1-8b", gpu="24GiB", batch=4, seq=2048, search=False)
    assert report.fits and report.steps[0].action == "checkpointing"
    # accelerate's num_processes is the world size fit weighs sharding over
    sharded = memfit.fit("llama-3.1-8b", gpu="24GiB", method="full", config=[FILES / "accelerate_fsdp.yaml"],
                         search=False)
    assert sharded.gpus == 4


def test_runspec_from_config() -> None:
    assert RunSpec.from_config(FILES / "trl_lora.yaml") == to_spec(import_configs([FILES / "trl_lora.yaml"])).spec
    spec = RunSpec.from_config(FILES / "accelerate_zero3.yaml", FILES / "trl_lora.yaml", seq=512)
    assert (spec.batch, spec.seq, spec.precision) == (2, 512, "bf16")
    assert (spec.sharding, spec.gpus) == ("zero3", 8)  # accelerate's DeepSpeed stage 3 over num_processes 8
    with pytest.raises(memfit.MemfitError, match="unknown run setting packing"):
        RunSpec.from_config(FILES / "trl_lora.yaml", packing=True)


@pytest.mark.slow
def test_runspec_from_live_training_args(tmp_path: Path) -> None:
    """Real objects built on CPU (bf16 on CPU needs use_cpu): read by attribute, never called. By hand: batch 4,
    accumulation 2, checkpointing on, paged_adamw_8bit -> paged-adamw-8bit, bf16 autocast over a model loaded in
    bf16 -> bf16, LoRA r16 alpha 32 on q_proj/v_proj (PEFT stores a set: memfit sorts it), device cpu."""
    from peft import LoraConfig
    from transformers import LlamaConfig, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                             bf16=True, use_cpu=True, gradient_checkpointing=True, optim="paged_adamw_8bit",
                             report_to="none")
    model_config = LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                               vocab_size=1000, dtype="bfloat16")
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["v_proj", "q_proj"],
                      task_type="CAUSAL_LM")
    spec = RunSpec.from_training_args(args, model_config, lora)
    assert spec == RunSpec(method="lora", rank=16, alpha=32, lora_dropout=0.05, targets=("q_proj", "v_proj"),
                           precision="bf16", optimizer="paged-adamw-8bit", batch=4, grad_accum=2, checkpointing="full",
                           device="cpu")
    # the same arguments as the JSON a script writes (args.to_json_string()) read as a file: the same run
    dumped = tmp_path / "training_args.json"
    dumped.write_text(args.to_json_string())
    from_file = RunSpec.from_config(dumped, precision="bf16", method="lora", rank=16, alpha=32, lora_dropout=0.05,
                                    targets="q_proj,v_proj")
    assert from_file == spec
    assert RunSpec.from_training_args(args, batch=1).batch == 1


SAME_RUN = ("same_run_axolotl.yml", "same_run_trl.yaml")


def test_same_run_as_axolotl_and_as_trl_gives_the_same_estimate() -> None:
    """README: one run, written for axolotl and for TRL. axolotl loads bf16 under bf16: true; TRL needs
    dtype: bfloat16 for that (its default is float32) and has checkpointing and bf16 on by default; TRL's loss is
    its fused LM head (memfit's loss trl), axolotl's the Trainer's standard one."""
    a, t = (memfit.estimate(config=FILES / f) for f in SAME_RUN)
    assert a.spec == t.spec.with_(loss="standard") == RunSpec(
        rank=16, alpha=32, lora_dropout=0.05, targets=("q_proj", "k_proj", "v_proj", "o_proj"), precision="bf16",
        batch=2, seq=2048, grad_accum=4, checkpointing="full")
    # TRL 1.16's SFTTrainer: its fused LM head whatever loss_type says; no (b, s, V) fp32 logits
    assert t.spec.loss == "trl"
    assert a.model == t.model == "meta-llama/Llama-3.1-8B"
    assert t.peak_bytes < a.peak_bytes


def test_readme_shows_the_same_run_files() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in SAME_RUN:
        body = "\n".join(ln for ln in (FILES / name).read_text().splitlines() if not ln.startswith("#"))
        assert body.strip() in readme, f"README's copy of {name} is out of date"


CODE = f"""
import sys
sys.modules['torch'] = None
sys.modules['transformers'] = None
sys.modules['peft'] = None
import memfit
from memfit.configs import import_configs
from memfit.estimate import RunSpec
spec = RunSpec.from_config({str(FILES / 'axolotl_qlora.yml')!r}, {str(FILES / 'ds_zero2.json')!r})
est = memfit.estimate(config={str(FILES / 'trl_lora.yaml')!r})
print(spec.method, est.spec.batch)
"""


def test_configs_never_import_torch() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["qlora", "2"]
