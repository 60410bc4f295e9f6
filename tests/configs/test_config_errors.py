"""Bad config files: one clear MemfitError naming the file and line and the fix, never a traceback."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.configs import import_configs, to_spec
from memfit.errors import MemfitError

FILES = Path(__file__).parent / "files"

UNKNOWN = [  # (file name, text, the line of the bad key, its name)
    ("ax.yml", "base_model: x/y\nmicro_batch_sise: 4\nsequence_len: 512\n", 2, "micro_batch_sise"),
    ("lf.yaml", "model_name_or_path: x/y\nstage: sft\nfinetuning_type: lora\nlora_rnak: 8\n", 4, "lora_rnak"),
    ("sft.yaml", "model_name_or_path: x/y\nuse_peft: true\nlora_r: 8\nmax_lenght: 2048\n", 4, "max_lenght"),
    ("ds.json", '{\n  "zero_optimization": {\n    "stage": 3,\n    "stage3_prefetch_bucket": 5\n  }\n}\n', 4,
     "zero_optimization.stage3_prefetch_bucket"),
    ("adapter_config.json", '{\n  "peft_type": "LORA",\n  "r": 8,\n  "lora_alhpa": 16\n}\n', 4, "lora_alhpa"),
    ("acc.yaml", "distributed_type: MULTI_GPU\nnum_process: 2\n", 2, "num_process"),
    ("tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_attn_modules: [q_proj]\n"
     "  lora_rnak: 8\nbatch_size: 2\n", 4, "lora_rnak"),
]


@pytest.mark.parametrize(("name", "text", "line", "key"), UNKNOWN, ids=[u[0] for u in UNKNOWN])
def test_unknown_field_names_file_and_line(tmp_path: Path, name: str, text: str, line: int, key: str) -> None:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(MemfitError) as err:
        import_configs([p])
    msg = str(err.value)
    assert f"{p}:{line}" in msg and key in msg and "unknown" in msg, msg


WRONG = [
    ("ax.yml", "base_model: x/y\nmicro_batch_size: four\n", 2, "micro_batch_size"),
    ("lf.yaml", "model_name_or_path: x/y\nstage: sft\ncutoff_len: [2048]\n", 3, "cutoff_len"),
    ("sft.yaml", "model_name_or_path: x/y\nmax_length: 2k\nuse_peft: true\n", 2, "max_length"),
    ("ds.json", '{\n  "zero_optimization": {\n    "stage": "three"\n  }\n}\n', 3, "zero_optimization.stage"),
    ("adapter_config.json", '{\n  "peft_type": "LORA",\n  "r": "sixteen"\n}\n', 3, "r"),
    ("tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\nbatch_size: two\n", 3, "batch_size"),
]


@pytest.mark.parametrize(("name", "text", "line", "key"), WRONG, ids=[w[0] for w in WRONG])
def test_wrong_type_names_file_and_line(tmp_path: Path, name: str, text: str, line: int, key: str) -> None:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(MemfitError) as err:
        import_configs([p])
    msg = str(err.value)
    assert f"{p}:{line}: {key}" in msg and "must be" in msg, msg


def test_lax_values_the_frameworks_accept(tmp_path: Path) -> None:
    """PyYAML reads 2e-4 as a string (YAML 1.1 floats need a dot); pydantic and argparse take it, and "4"."""
    p = tmp_path / "ax.yml"
    p.write_text("base_model: x/y\nlearning_rate: 2e-4\nmicro_batch_size: '4'\nbf16: 'true'\n", encoding="utf-8")
    assert import_configs([p]).settings["batch"] == 4


def test_unknown_kind_lists_what_memfit_reads(tmp_path: Path) -> None:
    p = tmp_path / "docker-compose.yml"
    p.write_text("services:\n  web:\n    image: nginx\n", encoding="utf-8")
    with pytest.raises(MemfitError, match="memfit reads: axolotl YAML, LLaMA-Factory YAML, TRL") as err:
        import_configs([p])
    assert "--config KIND:" in str(err.value)


def test_training_args_bin_is_refused_unread(tmp_path: Path) -> None:
    """A pickle that would run code when loaded: memfit refuses it by name and magic bytes, never unpickles."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (Path.touch, (marker,))

    p = tmp_path / "training_args.bin"
    p.write_bytes(pickle.dumps(Evil(), protocol=4))
    with pytest.raises(MemfitError, match="pickle"):
        import_configs([p])
    q = tmp_path / "args.json"
    q.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(MemfitError, match="pickle"):
        import_configs([q])
    assert not marker.exists()


def test_missing_reference_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: x/y\nuse_peft: true\ndeepspeed: configs/ds_z3.json\n", encoding="utf-8")
    with pytest.raises(MemfitError, match=rf"{p}:3: deepspeed: configs/ds_z3.json not found"):
        import_configs([p])


def test_reference_outside_the_folder_is_said(tmp_path: Path) -> None:
    """Followed (the framework would read it too) but the row says it lies outside the named file's folder."""
    sub = tmp_path / "run"
    sub.mkdir()
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}}', encoding="utf-8")
    p = sub / "sft.yaml"
    p.write_text("model_name_or_path: x/y\ndeepspeed: ../ds.json\n", encoding="utf-8")
    run = import_configs([p])
    row = next(r for r in run.rows if r.setting == "reference")
    assert "outside" in row.note and run.settings["sharding"] == "zero2"


def test_deepspeed_removed_key_uses_deepspeeds_message(tmp_path: Path) -> None:
    p = tmp_path / "ds.json"
    p.write_text('{\n  "amp": {"enabled": true},\n  "zero_optimization": {"stage": 1}\n}\n', encoding="utf-8")
    with pytest.raises(MemfitError, match=rf"{p}:2: amp: deepspeed 0.19.8 rejects this key"):
        import_configs([p])


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "ax.yml"
    p.write_text("base_model: x/y\nlora_r: [8\nsequence_len: 512\n", encoding="utf-8")
    with pytest.raises(MemfitError, match=rf"{p}:\d+: not valid YAML"):
        import_configs([p])


def test_no_sequence_length_asks_for_seq() -> None:
    """torchtune's max_seq_len: null: the longest example sets the peak, which memfit cannot know."""
    run = import_configs([FILES / "torchtune_qlora_single_device.yaml"])
    with pytest.raises(MemfitError, match=r"torchtune_qlora_single_device.yaml:34: tokenizer.max_seq_len: no sequence"):
        to_spec(run)
    assert to_spec(run, explicit={"seq": 700}).spec.seq == 700


def test_bad_value_for_runspec_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "lf.yaml"
    p.write_text("model_name_or_path: x/y\nstage: sft\nlora_rank: 0\n", encoding="utf-8")
    with pytest.raises(MemfitError, match=rf"{p}:3: lora_rank: --rank must be a positive integer"):
        to_spec(import_configs([p]))


def test_cli_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "ax.yml"
    p.write_text("base_model: x/y\nmicro_batch_sise: 4\n", encoding="utf-8")
    assert main(["estimate", "llama-3.2-1b", "--config", str(p)]) == 1
    err = capsys.readouterr().err
    assert "micro_batch_sise" in err and "Traceback" not in err and f"{p}:2" in err.replace("\n", "")
