"""``fit --write``: a copy of the user's file with only the changed fields edited (YAML as text: comments, blank
lines and order kept; a ``# memfit:`` line naming the reason), written atomically, never over an existing file
without --force; the written file re-imports to the planned spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memfit.cli import main
from memfit.configs import import_configs, to_spec, write_fixed
from memfit.errors import MemfitError
from memfit.estimate import RunSpec

FILES = Path(__file__).parent / "files"


def _write(name: str, kind: str, planned: RunSpec, out: Path, **kw: Any) -> tuple[Any, RunSpec]:
    """Write ``planned`` into a copy of ``name`` and re-import the copy."""
    run = import_configs([FILES / name])
    before = to_spec(run, model_dtype="bfloat16", **kw).file_spec  # what the file says, as fit --write diffs it
    changes = {k: (getattr(before, k), getattr(planned, k)) for k in planned.to_dict()
               if getattr(before, k) != getattr(planned, k)}
    if run.settings.get("seq_unbounded"):
        changes["seq"] = (None, planned.seq)
    result = write_fixed(FILES / name, kind, changes, {k: f"test: {k}" for k in changes}, planned.to_dict(), run, out)
    return result, to_spec(import_configs([out]), model_dtype="bfloat16").spec

def _d(**fields: Any) -> dict[str, Any]:
    """A table row's mapping, written as keywords."""
    return fields


PLANS = [
    ("axolotl_lora_fsdp.yml", "axolotl", {}, {"batch": 1, "grad_accum": 8, "checkpointing": "full", "loss": "chunked",
                                                  "method": "qlora", "rank": 8, "seq": 1024}),
    ("axolotl_qlora.yml", "axolotl", {}, {"batch": 1, "grad_accum": 8, "attention": "sdpa", "checkpointing": "none"}),
    # TRL's loss is its own fused head already (loss trl): a plan never switches it to Liger's
    ("trl_lora.yaml", "trl", {}, {"batch": 1, "grad_accum": 16, "method": "qlora", "seq": 1024,
                                      "checkpointing": "every-k", "checkpoint_every": 4}),
    ("llamafactory_lora_sft.yaml", "llamafactory", {}, {"batch": 1, "seq": 1024, "rank": 4, "method": "qlora",
                                                            "loss": "chunked", "attention": "eager"}),
    ("torchtune_qlora_single_device.yaml", "torchtune", {"explicit": {"seq": 2048}},
     {"batch": 1, "grad_accum": 16, "seq": 1024, "rank": 4, "offload": True}),
    ("torchtune_lora_distributed.yaml", "torchtune", {"explicit": {"seq": 2048}},
     {"method": "qlora", "checkpointing": "full", "seq": 2048}),
]


@pytest.mark.parametrize(("name", "kind", "kw", "plan"), PLANS, ids=[p[0] for p in PLANS])
def test_write_round_trip(tmp_path: Path, name: str, kind: str, kw: dict[str, Any], plan: dict[str, Any]) -> None:
    start = to_spec(import_configs([FILES / name]), model_dtype="bfloat16", **kw).spec
    planned = start.with_(**plan)
    out = tmp_path / name.replace("/", "_")
    result, again = _write(name, kind, planned, out, **kw)
    assert not result.not_written, result.not_written
    assert again == planned
    original = (FILES / name).read_text().splitlines()
    written = out.read_text().splitlines()
    # only the edited lines change: every original line that is not an edited field is still there, in order
    edited = {e.field.split(".")[-1] for e in result.edits}
    kept = [ln for ln in original if not any(ln.strip().startswith(f"{k}:") for k in edited)]
    it = iter(written)
    assert all(any(ln == w for w in it) for ln in kept), "comments, blank lines and order are kept"
    assert sum(ln.strip().startswith("# memfit: test:") for ln in written) == len(result.edits)


def test_json_is_rewritten_in_order(tmp_path: Path) -> None:
    out = tmp_path / "ds.json"
    planned = to_spec(import_configs([FILES / "ds_zero3_offload.json"])).spec.with_(batch=1, grad_accum=8)
    result, again = _write("ds_zero3_offload.json", "deepspeed", planned, out)
    assert again == planned
    assert list(json.loads(out.read_text())) == list(json.loads((FILES / "ds_zero3_offload.json").read_text()))


def test_changes_held_by_another_file_are_listed_not_written(tmp_path: Path) -> None:
    """The DeepSpeed stage lives in ds_zero2.json: --write edits the axolotl file only and says so."""
    run = import_configs([FILES / "axolotl_full_deepspeed.yml"])
    result = write_fixed(FILES / "axolotl_full_deepspeed.yml", "axolotl", {"sharding": ("zero2", "zero3")},
                         {}, {"sharding": "zero3"}, run, tmp_path / "out.yml")
    assert result.edits == ()
    assert result.not_written == ("sharding zero2 -> zero3: change zero_optimization in "
                                  f"{FILES / 'ds_zero2.json'}",)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "fixed.yml"
    out.write_text("keep me\n")
    run = import_configs([FILES / "axolotl_qlora.yml"])
    with pytest.raises(MemfitError, match="exists: pass --force"):
        write_fixed(FILES / "axolotl_qlora.yml", "axolotl", {"batch": (2, 1)}, {}, {}, run, out)
    assert out.read_text() == "keep me\n"
    write_fixed(FILES / "axolotl_qlora.yml", "axolotl", {"batch": (2, 1)}, {}, {}, run, out, force=True)
    assert "micro_batch_size: 1" in out.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.yml"]  # no temporary file left behind


def test_fit_write_cli_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """memfit fit --config FILE --write FIXED: FIXED re-imports to the plan's final spec (the file's run plus
    the plan's steps plus the flags given)."""
    src = tmp_path / "qlora.yml"
    src.write_text((FILES / "axolotl_qlora.yml").read_text())
    fixed = tmp_path / "fixed.yml"
    code = main(["fit", "--config", str(src), "--gpu", "16GiB", "--batch", "8", "--no-search", "--write", str(fixed),
                 "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is True and d["steps"], "the file's run does not fit 16 GiB: the plan has steps"
    final = RunSpec.from_dict(d["final"]["spec"])
    assert RunSpec.from_config(fixed) == final
    assert d["written"]["edits"] and {e["field"] for e in d["written"]["edits"]} >= {"micro_batch_size"}
    assert "# memfit: batch" in fixed.read_text()
    assert main(["fit", "--config", str(src), "--gpu", "16GiB", "--batch", "8", "--no-search", "--write",
                 str(fixed)]) == 1
    assert "exists: pass --force" in capsys.readouterr().err
