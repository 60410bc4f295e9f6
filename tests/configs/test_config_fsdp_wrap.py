"""A training config that runs FSDP2 through accelerate (an accelerate YAML with ``fsdp_version: 2``, a Trainer's
``fsdp_config``, version 2 by default in transformers 5.24.0) gets accelerate 1.15.0's FSDP2 units
(``fsdp2_prepare_model``; ``--fsdp-wrap accelerate``), which the Trainer runs whatever memfit's flag default."""

from __future__ import annotations

from pathlib import Path

from memfit.estimate import RunSpec

FILES = Path(__file__).parent / "files"


def test_accelerate_fsdp2_yaml_sets_accelerates_units(tmp_path: Path) -> None:
    assert RunSpec.from_config(FILES / "accelerate_fsdp.yaml", method="full").fsdp_wrap == "accelerate"
    v1 = tmp_path / "fsdp1.yaml"
    v1.write_text((FILES / "accelerate_fsdp.yaml").read_text().replace("fsdp_version: 2", "fsdp_version: 1")
                  .replace("fsdp_reshard_after_forward: true", "fsdp_reshard_after_forward: FULL_SHARD"))
    assert RunSpec.from_config(v1, method="full").fsdp_wrap == "layers"  # FSDP1 wraps as its own policy says


def test_trainer_fsdp2_config_sets_accelerates_units(tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text('{"output_dir": "o", "fsdp": "full_shard auto_wrap", "fsdp_config": {"version": 2}}')
    assert RunSpec.from_config(f"hf-trainer:{args}", method="full").fsdp_wrap == "accelerate"
