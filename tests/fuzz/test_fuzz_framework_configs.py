"""The framework config readers (memfit.configs), fuzzed: the real axolotl / LLaMA-Factory / TRL / torchtune /
PEFT / DeepSpeed / accelerate / TrainingArguments files of tests/configs/files with fields set to values of
every type (each framework's own field names, from its schema), removed, or added; and YAML that is hostile
as text (deep nesting, an alias bomb, tabs, a BOM, a cut-off file, duplicate keys). Each file is read into a
run spec or refused with one MemfitError; `memfit estimate --config` keeps the CLI contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from fuzzing import assert_cli_contract, examples, run_cli
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memfit.errors import MemfitError

FILES = Path(__file__).resolve().parents[1] / "configs" / "files"
SCHEMAS = Path(__file__).resolve().parents[2] / "src" / "memfit" / "configs" / "schemas"
BASES = sorted(p.name for p in FILES.iterdir() if p.is_file())
KIND_OF = {"axolotl": "axolotl", "llamafactory": "llamafactory", "trl": "trl", "torchtune": "torchtune",
           "adapter": "peft", "ds_": "deepspeed", "accelerate": "accelerate", "training_args": "transformers",
           "fsdp": "transformers", "minimal": "axolotl", "same_run_axolotl": "axolotl", "same_run_trl": "trl"}


def _schema_fields(name: str) -> list[str]:
    kind = next(v for k, v in KIND_OF.items() if name.startswith(k))
    return sorted(json.loads((SCHEMAS / f"{kind}.json").read_text())["fields"])


scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=8),
                   st.sampled_from([0, 1, 2, -1, 16, 4096, "auto", "true", "bf16", "fp16", "lora", "qlora", "full",
                                    "none", "adamw_torch", "paged_adamw_8bit", "all-linear", "q_proj", 1e-4, [],
                                    {}, ["q_proj", "v_proj"], {"stage": 3}, "gpt2", "meta-llama/Llama-3.1-8B"]))
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=5)

HOSTILE = [
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, "
    "*b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\nbase_model: gpt2\n",
    "[" * 5000 + "]" * 5000,
    "base_model: gpt2\n\tmicro_batch_size: 2\n",
    "\ufeffbase_model: gpt2\nmicro_batch_size: 2\n",
    "base_model: gpt2\nmicro_batch_size: 2\nmicro_batch_size: 4\n",
    "base_model: gpt2\nmicro_batch_size: [1, 2\n",
    "--- !!python/name:os.system\n",
    "base_model: gpt2\nadapter: lora\nlora_r: 99999999999999999999999999999\n",
    "",
    "null\n",
    "- a\n- b\n",
]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str]:
    """(file name, text): a real config with some fields changed, dropped or added."""
    name = draw(st.sampled_from(BASES))
    text = (FILES / name).read_text()
    data = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    assert isinstance(data, dict)
    fields = _schema_fields(name)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["set", "set", "drop", "add"]))
        if action == "drop" and data:
            data.pop(draw(st.sampled_from(sorted(data))))
        elif action == "set" and data:
            data[draw(st.sampled_from(sorted(data)))] = draw(value)
        else:
            data[draw(st.sampled_from(fields))] = draw(value)
    out = json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    return name, out


def _read(path: Path) -> None:
    from memfit.configs import import_configs, to_spec

    try:
        to_spec(import_configs([str(path)]))
    except MemfitError as exc:
        assert str(exc) and "\n" not in str(exc)


@settings(max_examples=examples(60))
@given(case=mutated())
@example(case=("fsdp_config.json", '{"fsdp_version": null, "fsdp_reshard_after_forward": false}'))  # found: TypeError
@example(case=("accelerate_fsdp.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: [2]\nnum_processes: 2\n"))
def test_any_field_of_any_framework_config_is_read_or_one_error(tmp_path_factory: Any, case: tuple[str, str]) -> None:
    name, text = case
    folder: Path = tmp_path_factory.mktemp("cfg")
    for other in FILES.iterdir():  # the files a config names (deepspeed: ds_zero3_offload.json) sit beside it
        if other.is_file():
            shutil.copy(other, folder / other.name)
    path = folder / name
    path.write_text(text)
    _read(path)


@settings(max_examples=examples(22))
@given(text=st.sampled_from(HOSTILE), suffix=st.sampled_from([".yml", ".json"]))
def test_hostile_yaml_is_one_error_and_fast(tmp_path_factory: Any, text: str, suffix: str) -> None:
    path: Path = tmp_path_factory.mktemp("cfg") / f"run{suffix}"
    path.write_text(text)
    _read(path)


@settings(max_examples=examples(15))
@given(case=mutated(), as_json=st.booleans())
def test_estimate_with_any_config_keeps_the_contract(tmp_path_factory: Any, case: tuple[str, str],
                                                     as_json: bool) -> None:
    name, text = case
    folder: Path = tmp_path_factory.mktemp("cfg")
    for other in FILES.iterdir():
        if other.is_file():
            shutil.copy(other, folder / other.name)
    (folder / name).write_text(text)
    argv = ["estimate", "--config", str(folder / name), *(["--json"] if as_json else [])]
    if not any(k in text for k in ("base_model", "model_name", "_name_or_path", "pretrained_model")):
        argv.insert(1, "gpt2")  # files that name no model (DeepSpeed, PEFT, accelerate) need one
    code, out, err = run_cli(argv)
    assert_cli_contract(argv, code, out, err)
