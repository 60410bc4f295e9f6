"""Every format memfit reads, on real-shaped files written from the framework's documented schema (the
torchtune ones are torchtune 0.6.1's own recipe configs), imported to the RunSpec a reader works out by hand
from the file and the framework's defaults (the defaults with their source lines: tests/configs/test_defaults.py).

Precision by hand: axolotl ``bf16: true|auto`` loads the model in bf16 (utils/config/__init__.py:194) -> bf16;
TRL with ``dtype: bfloat16`` -> bf16; a full fine-tune under DeepSpeed bf16 keeps fp32 masters of bf16 weights
-> memfit's mixed-bf16 (16 B/param of weights + gradients + AdamW states); LLaMA-Factory loads bf16 and
upcasts trainable weights to fp32 -> LoRA bf16, full mixed-bf16.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from memfit.configs import import_configs, to_spec
from memfit.estimate import RunSpec

FILES = Path(__file__).parent / "files"
QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")
TT_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # q, v, output_proj + MLP w1,w3,w2

CASES: list[tuple[str, str | None, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    # file, model, RunSpec fields, settings not applied (NOT MODELLED: RunSpec lacks them, or a ZeRO stage with no
    # world size to shard over), explicit flags
    ("axolotl_qlora.yml", "meta-llama/Llama-3.1-8B",
     {"method": "qlora", "rank": 32, "alpha": 16, "lora_dropout": 0.05, "targets": ("all-linear",),
      "double_quant": True,
      "precision": "bf16", "optimizer": "paged-adamw-32bit", "batch": 2, "seq": 4096, "grad_accum": 4,
      "checkpointing": "full", "attention": "flash"},
     {"packing": True, "optimizer_impl": "paged_adamw_32bit"}, {}),
    ("axolotl_lora_fsdp.yml", "meta-llama/Llama-3.1-8B",
     {"method": "lora", "rank": 16, "alpha": 32, "lora_dropout": 0.05, "targets": QKVO, "precision": "bf16",
      "batch": 4, "seq": 2048,
      "grad_accum": 2, "checkpointing": "full", "attention": "sdpa"},
     {"sharding": "zero3", "optimizer_impl": "adamw_torch_fused"}, {}),
    ("axolotl_full_deepspeed.yml", "Qwen/Qwen2.5-1.5B",
     {"method": "full", "precision": "mixed-bf16", "batch": 8, "seq": 1024, "grad_accum": 1, "checkpointing": "none",
      "loss": "chunked", "adamw_impl": "foreach"},
     {"sharding": "zero2", "optimizer_impl": "adamw_torch"}, {}),
    ("trl_lora.yaml", "Qwen/Qwen2.5-1.5B",
     {"method": "lora", "rank": 32, "alpha": 16, "lora_dropout": 0.05, "targets": ("all-linear",),
      "precision": "bf16",
      "batch": 2, "seq": 2048, "grad_accum": 8, "checkpointing": "full", "attention": "sdpa",
      # eval_strategy steps: the Trainer evaluates with per_device_eval_batch_size's default, 8; TRL's fused head
      "eval_batch": 8, "loss": "trl"},
     {"packing": True, "optimizer_impl": "adamw_torch_fused"}, {}),
    ("trl_full_deepspeed.yaml", "meta-llama/Llama-3.1-8B",
     {"method": "full", "precision": "mixed-bf16", "batch": 1, "seq": 4096, "grad_accum": 16,
      "checkpointing": "full", "loss": "trl"},
     {"sharding": "zero3", "offload_optimizer": "cpu", "offload_params": "cpu",
      "optimizer_impl": "adamw_torch_fused"}, {}),
    ("hf-trainer:training_args_fsdp.json", None,
     {"precision": "bf16", "batch": 4, "grad_accum": 4, "checkpointing": "full", "adamw_impl": "foreach"},
     {"sharding": "zero2", "optimizer_impl": "adamw_torch"}, {}),
    ("llamafactory_lora_sft.yaml", "meta-llama/Llama-3.1-8B",
     {"method": "lora", "rank": 8, "alpha": 16, "lora_dropout": 0.0, "targets": ("all-linear",),
      "precision": "bf16", "batch": 1,
      "seq": 2048, "grad_accum": 8, "checkpointing": "full", "attention": "sdpa"},
     {"packing": False, "optimizer_impl": "adamw_torch_fused"}, {}),
    ("llamafactory_full_ds3.yaml", "meta-llama/Llama-3.1-8B",
     {"method": "full", "precision": "mixed-bf16", "batch": 2, "seq": 2048, "grad_accum": 4, "checkpointing": "full"},
     {"sharding": "zero3", "offload_optimizer": "cpu", "offload_params": "cpu", "packing": False}, {}),
    ("llamafactory_qlora.yaml", "meta-llama/Llama-3.1-8B",
     {"method": "qlora", "rank": 16, "alpha": 32, "targets": ("q_proj", "v_proj"), "double_quant": False,
      "precision": "bf16",
      "batch": 4, "seq": 1024, "grad_accum": 2, "checkpointing": "full", "attention": "flash", "loss": "chunked"},
     {"packing": False}, {}),
    ("torchtune_qlora_single_device.yaml", "llama-3.1-8b",
     {"method": "qlora", "rank": 8, "alpha": 16, "lora_dropout": 0.0, "targets": TT_TARGETS, "double_quant": True,
      "precision": "bf16", "batch": 2, "seq": 1024, "grad_accum": 8, "checkpointing": "full", "device": "cuda"},
     {"optimizer_impl": "torch.optim.AdamW (fused)"}, {"seq": 1024}),
    ("torchtune_lora_distributed.yaml", "llama-3.1-8b",
     {"method": "lora", "rank": 8, "alpha": 16, "targets": TT_TARGETS, "precision": "bf16", "batch": 2,
      "seq": 512, "grad_accum": 8,
      "checkpointing": "none"},
     {"optimizer_impl": "torch.optim.AdamW (fused)"}, {"seq": 512}),
    ("torchtune_full_single_device.yaml", "llama-3.2-1b",
     {"method": "full", "precision": "bf16", "optimizer": "paged-adamw-8bit", "batch": 4, "seq": 2048, "grad_accum": 1,
      "checkpointing": "none"},
     {"optimizer_impl": "bitsandbytes.optim.PagedAdamW8bit"}, {"seq": 2048}),
    ("adapter_config.json", "meta-llama/Llama-3.1-8B",
     {"method": "lora", "rank": 16, "alpha": 32, "lora_dropout": 0.05, "targets": ("v_proj", "q_proj",
      "k_proj", "o_proj")},
     {}, {}),
    ("adapter_all_linear/adapter_config.json", "Qwen/Qwen2.5-1.5B",
     {"method": "lora", "rank": 64, "alpha": 128, "targets": ("all-linear",), "modules_to_save": ("lm_head",
      "embed_tokens")},
     {}, {}),
    ("ds_zero3_offload.json", None,
     {"precision": "bf16", "batch": 2, "grad_accum": 4},
     {"sharding": "zero3", "offload_optimizer": "cpu", "offload_params": "cpu"}, {}),
    ("ds_zero2.json", None, {}, {"sharding": "zero2"}, {}),
    ("accelerate_zero3.yaml", None, {"precision": "mixed-bf16", "sharding": "zero3", "gpus": 8}, {}, {}),
    ("accelerate_fsdp.yaml", None, {"precision": "mixed-bf16", "sharding": "zero3", "gpus": 4,
                                    "fsdp_wrap": "accelerate"}, {}, {}),
    # a DeepSpeed file names the stage, the launcher the world size: --gpus gives it
    ("ds_zero2.json", None, {"sharding": "zero2", "gpus": 8}, {}, {"gpus": 8}),
]


def _path(name: str) -> str:
    kind, sep, rest = name.partition(":")
    return f"{kind}:{FILES / rest}" if sep else str(FILES / name)


@pytest.mark.parametrize(("name", "model", "spec", "unused", "flags"), CASES,
                         ids=[c[0] + ("+flags" if c[4] else "") for c in CASES])
def test_format_imports_to_the_expected_spec(name: str, model: str | None, spec: dict[str, Any],
                                             unused: dict[str, Any], flags: dict[str, Any]) -> None:
    si = to_spec(import_configs([_path(name)]), explicit=flags, model_dtype="bfloat16")
    assert si.spec == RunSpec(**spec)
    assert si.model == model
    assert {k: v for k, v in si.unused.items() if k in unused} == unused
    # every setting not applied is reported NOT MODELLED in the table, a held ZeRO stage with the fix
    for row in si.rows:
        if row.setting in unused:
            assert row.status == "NOT MODELLED", row
        if row.setting == "sharding" and "sharding" in unused:
            assert "--gpus N" in row.note, row


def test_each_format_has_two_real_shaped_files() -> None:
    kinds: dict[str, int] = {}
    for name, *_ in CASES:
        run = import_configs([_path(name)])
        kinds[run.files[0].kind] = kinds.get(run.files[0].kind, 0) + 1
    assert kinds.pop("hf-trainer") == 1  # and TRL's two: TrainingArguments fields are TRL's too
    assert all(n >= 2 for n in kinds.values()), kinds
    assert set(kinds) == {"axolotl", "trl", "llamafactory", "torchtune", "peft", "deepspeed", "accelerate"}


def test_a_peft_adapter_folder_reads_its_adapter_config() -> None:
    run = import_configs([FILES / "adapter_all_linear"])
    assert run.files[0].kind == "peft" and run.settings["rank"] == 64


def test_references_are_followed_and_reported() -> None:
    """axolotl's ``deepspeed: ds_zero2.json`` is read as DeepSpeed after it; the row names the file read."""
    run = import_configs([FILES / "axolotl_full_deepspeed.yml"])
    assert [(f.kind, Path(f.path).name) for f in run.files] == [("axolotl", "axolotl_full_deepspeed.yml"),
                                                                 ("deepspeed", "ds_zero2.json")]
    assert run.files[1].referenced_by.endswith("axolotl_full_deepspeed.yml:19 deepspeed")
    ref = next(r for r in run.rows if r.setting == "reference")
    assert ref.line == 19 and Path(ref.memfit_value) == FILES / "ds_zero2.json"


def test_later_files_win_and_written_values_beat_defaults() -> None:
    """accelerate's ``mixed_precision: bf16`` then a TRL file: TRL's batch 2 wins over nothing, the accelerate
    world size stays; a DeepSpeed file's written micro-batch beats axolotl's unwritten default of 1."""
    run = import_configs([FILES / "accelerate_zero3.yaml", FILES / "trl_lora.yaml"])
    assert run.settings["gpus"] == 8 and run.settings["batch"] == 2 and run.settings["sharding"] == "zero3"
    minimal = FILES / "minimal_axolotl.yml"  # no micro_batch_size: axolotl's default 1 is not written
    run = import_configs([FILES / "ds_zero3_offload.json", minimal])
    assert run.settings["batch"] == 2  # DeepSpeed's train_micro_batch_size_per_gpu: 2, written
    assert run.settings["seq"] == 512  # axolotl's default sequence_len: nobody wrote one


def test_explicit_flags_win_over_files() -> None:
    si = to_spec(import_configs([FILES / "trl_lora.yaml"]), explicit={"batch": 1, "checkpointing": "none"})
    assert si.spec.batch == 1 and si.spec.checkpointing == "none"
    assert si.file_spec.batch == 2 and si.file_spec.checkpointing == "full"
    row = next(r for r in si.rows if r.setting == "batch")
    assert "--batch on the command line wins" in row.note


def test_the_table_has_a_row_per_field_with_a_status() -> None:
    si = to_spec(import_configs([FILES / "llamafactory_lora_sft.yaml"]))
    fields = {r.field: r for r in si.rows if not r.default}
    written = set(yaml.safe_load((FILES / "llamafactory_lora_sft.yaml").read_text()))
    assert written <= set(fields)  # every written field has a row
    assert fields["learning_rate"].status == "ignored" and fields["lora_rank"].status == "setting"
    assert fields["cutoff_len"].line == 15 and fields["cutoff_len"].memfit_value == 2048
    assert {r.status for r in si.rows} <= {"setting", "ignored", "NOT MODELLED"}
    assert all(set(r.to_dict()) >= {"file", "field", "value", "setting", "status"} for r in si.rows)
