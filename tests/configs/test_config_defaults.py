"""Each framework's own defaults where the file is silent, as its source says (file:line of the version followed),
and the generated schema tables checked against the installed transformers 5.24.0 and PEFT 0.21.2."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from memfit.configs import import_configs, to_spec
from memfit.configs.schema import load_schema
from memfit.estimate import RunSpec


def _spec(tmp_path: Path, name: str, text: str, **kw: object) -> RunSpec:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return to_spec(import_configs([str(p)]), **kw).spec  # type: ignore[arg-type]


def test_trl_defaults(tmp_path: Path) -> None:
    """TRL 1.16.0: gradient_checkpointing True (trl/trainer/base_config.py:62), bf16 = not fp16 (:68, :106),
    the model loaded in float32 (model_config.py:89, utils.py:1332) -> fp32 weights under bf16 autocast =
    mixed-bf16; max_length 1024 (sft_config.py:202); use_peft False (model_config.py:103) -> full; the Trainer's
    per_device_train_batch_size 8 and optim adamw_torch_fused (transformers training_args.py:777, :806-813);
    loss_type "nll" (sft_config.py:283): SFTTrainer's fused LM head (sft_trainer.py:1144), memfit's loss trl."""
    spec = _spec(tmp_path, "sft.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\ndataset_name: trl-lib/Capybara\n")
    assert spec == RunSpec(method="full", precision="mixed-bf16", checkpointing="full", seq=1024, batch=8,
                           optimizer="adamw", loss="trl")
    q = _spec(tmp_path, "q.yaml", "model_name_or_path: x/y\nuse_peft: true\nload_in_4bit: true\n")
    # lora_r 16, lora_alpha 32, lora_dropout 0.05 (model_config.py:107-117), use_bnb_nested_quant False (:164)
    assert (q.method, q.rank, q.alpha, q.lora_dropout, q.double_quant) == ("qlora", 16, 32, 0.05, False)


def test_trainer_defaults(tmp_path: Path) -> None:
    """A plain TrainingArguments file keeps transformers' defaults: checkpointing off (activation_checkpointing
    None -> False, training_args.py:1545), no autocast, and the model in its checkpoint's dtype
    (from_pretrained's "auto" in transformers 5): llama-3.1-8b's config says bfloat16 -> bf16."""
    spec = _spec(tmp_path, "args.json", '{"output_dir": "o", "per_device_train_batch_size": 2}',
                 model_dtype="bfloat16")
    assert (spec.checkpointing, spec.precision, spec.batch) == ("none", "bf16", 2)


def test_llamafactory_defaults(tmp_path: Path) -> None:
    """LLaMA-Factory 0.9.5: finetuning_type lora (finetuning_args.py:464), lora_rank 8 (:77), lora_alpha None ->
    2 x rank (:568), lora_target "all" (:81) = every linear but lm_head (misc.py:28-52), lora_dropout 0.0;
    cutoff_len 2048 (data_args.py:46); checkpointing on (disable_gradient_checkpointing False, model_args.py:145);
    packing None -> only for stage pt (parser.py:520); no bf16/fp16 -> loaded in the GPU's best dtype (bf16)."""
    spec = _spec(tmp_path, "lf.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\ndo_train: true\n"
                 "dataset: alpaca_en_demo\ntemplate: llama3\noutput_dir: out\n")
    assert spec == RunSpec(method="lora", rank=8, alpha=16, lora_dropout=0.0, targets=("all-linear",), seq=2048,
                           batch=8, checkpointing="full", precision="bf16")
    run = import_configs([str(tmp_path / "lf.yaml")])
    assert run.settings["packing"] is False


def test_axolotl_defaults(tmp_path: Path) -> None:
    """axolotl 0.21.0: no adapter -> full; micro_batch_size 1, gradient_accumulation_steps 1 (training.py:111-120);
    sequence_len 512 (config.py:706); bf16 "auto" (config.py:596) -> bf16 on a bf16 GPU, model loaded bf16;
    gradient_checkpointing False (config.py:641); optimizer adamw_torch_fused (training.py:162)."""
    spec = _spec(tmp_path, "ax.yml", (Path(__file__).parent / "files" / "minimal_axolotl.yml").read_text())
    assert spec == RunSpec(method="full", batch=1, grad_accum=1, seq=512, precision="bf16", checkpointing="none",
                           optimizer="adamw", attention="sdpa")


def test_torchtune_defaults(tmp_path: Path) -> None:
    """torchtune 0.6.1: lora_llama3_2_1b's lora_rank 8, lora_alpha 16, lora_dropout 0.0, MLP and output off
    (models/llama3_2/_model_builders.py:71-80); enable_activation_checkpointing False
    (recipes/lora_finetune_single_device.py:161); dtype None -> float32 (training/precision.py:101)."""
    spec = _spec(tmp_path, "tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n"
                 "  lora_attn_modules: [q_proj, output_proj]\ntokenizer:\n  _component_: x\n  max_seq_len: 1024\n"
                 "batch_size: 4\n")
    assert spec == RunSpec(method="lora", rank=8, alpha=16, lora_dropout=0.0, targets=("q_proj", "o_proj"),
                           seq=1024, batch=4, checkpointing="none", precision="fp32")


@pytest.mark.slow
def test_peft_defaults(tmp_path: Path) -> None:
    """PEFT 0.21.2 LoraConfig: r 8, lora_alpha 8, lora_dropout 0.0, target_modules None (PEFT's default for the
    architecture) -- read from the installed class below, not from memfit's table."""
    from peft import LoraConfig

    d = LoraConfig()
    spec = _spec(tmp_path, "adapter_config.json", '{"peft_type": "LORA"}')
    assert (spec.rank, spec.alpha, spec.lora_dropout, spec.targets) == (d.r, d.lora_alpha, d.lora_dropout, ())


def test_accelerate_and_deepspeed_defaults(tmp_path: Path) -> None:
    """accelerate 1.15.0: fsdp_version 1 (utils/dataclasses.py:1831) with FULL_SHARD -> ZeRO-3;
    DeepSpeed 0.19.8: zero_optimization.stage 0 (zero/config.py:95) -> no sharding."""
    acc = import_configs([_write(tmp_path, "acc.yaml", "distributed_type: FSDP\nnum_processes: 2\n")])
    assert acc.settings["sharding"] == "zero3" and acc.settings["gpus"] == 2
    ds = import_configs([_write(tmp_path, "ds.json", '{"zero_optimization": {"overlap_comm": true}}')])
    assert ds.settings["sharding"] == "none"


@pytest.mark.parametrize("zero, copies, elements", [
    ('{"stage": 2, "overlap_comm": true}', 2, 500_000_000),  # HF's ds_zero2.json: the key absent, overlap on
    ('{"stage": 1}', 1, 500_000_000),
    ('{"stage": 2, "reduce_bucket_size": 2e8}', 1, 200_000_000),
    ('{"stage": 2, "reduce_bucket_size": "auto"}', 0, 0)])
def test_deepspeed_reduce_bucket_is_named_with_its_bytes(tmp_path: Path, zero: str, copies: int,
                                                         elements: int) -> None:
    """DeepSpeed 0.19.8 ``DeepSpeedZeroOptimizer.setup_buckets`` allocates ``reduce_bucket_size`` elements (default
    500,000,000, ``zero/config.py``) at every backward, twice with overlap_comm; measured on CPU (RESULTS ``##
    deepspeed on CPU``) at 2,000,000,000 B in fp32. The import names it: 2 x 500,000,000 x 4 B = 3.73 GiB for HF's
    ZeRO-2 example file. "auto" is the Trainer's hidden_size^2: no row."""
    ds = import_configs([_write(tmp_path, "ds.json", f'{{"zero_optimization": {zero}}}')])
    rows = [r for r in ds.rows if r.field == "zero_optimization.reduce_bucket_size" and r.status == "NOT MODELLED"]
    if not copies:
        assert not rows
        return
    (row,) = rows
    assert row.value == elements and f"{copies} x {elements:,} elements" in row.note
    assert f"{copies * elements * 4 / 2**30:.2f} GiB" in row.note


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.mark.slow
@pytest.mark.parametrize("schema, cls_path", [("transformers", "transformers.TrainingArguments"),
                                              ("peft", "peft.LoraConfig")])
def test_generated_tables_match_the_installed_classes(schema: str, cls_path: str) -> None:
    """tools/config_schemas.py reads the source text; the installed dataclass is the oracle: same field names,
    same literal defaults."""
    import importlib

    module, name = cls_path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    table = load_schema(schema)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(table.fields) == set(fields)
    checked = 0
    for fname, spec in table.fields.items():
        f = fields[fname]
        if spec.has_default and not spec.computed_default and f.default is not dataclasses.MISSING:
            default = f.default.value if hasattr(f.default, "value") else f.default
            assert spec.default == default, fname
            checked += 1
    assert checked > 30
