"""``use_dora`` read from each framework's config as the ``use_dora`` setting (it was NOT MODELLED before issue 14
part 3): PEFT adapter_config.json ``use_dora``, axolotl ``peft_use_dora``, TRL ``use_dora``, LLaMA-Factory
``use_dora``; false stays ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.configs import import_configs, to_spec

FILES = Path(__file__).parent / "files"


def _with(tmp_path: Path, name: str, field: str, value: bool) -> Path:
    out = tmp_path / name
    if name.endswith(".json"):
        data = json.loads((FILES / name).read_text())
        data[field] = value
        out.write_text(json.dumps(data))
    else:
        out.write_text((FILES / name).read_text() + f"\n{field}: {'true' if value else 'false'}\n")
    return out


@pytest.mark.parametrize("name,field", [("adapter_config.json", "use_dora"), ("axolotl_lora_fsdp.yml", "peft_use_dora"),
                                        ("trl_lora.yaml", "use_dora"), ("llamafactory_lora_sft.yaml", "use_dora")])
def test_use_dora_is_a_setting(tmp_path: Path, name: str, field: str) -> None:
    si = to_spec(import_configs([str(_with(tmp_path, name, field, True))]), model_dtype="bfloat16")
    assert si.spec.use_dora is True
    row = next(r for r in si.rows if r.field == field)
    assert row.status == "setting" and row.setting == "use_dora", row
    off = to_spec(import_configs([str(_with(tmp_path, name, field, False))]), model_dtype="bfloat16")
    assert off.spec.use_dora is False
    assert next(r for r in off.rows if r.field == field).status == "ignored"
