"""TRL's ``activation_offloading`` is memfit's ``--offload-activations`` (TRL 1.16 OffloadActivations: every saved
tensor of >= 1024 B but lm_head's to the host), not ``--offload`` (transformers' checkpoint offload)."""

from __future__ import annotations

from pathlib import Path

from memfit.configs import import_configs, to_spec


def _converted(tmp_path: Path, text: str) -> object:
    p = tmp_path / "sft.yaml"
    p.write_text("model_name_or_path: x/y\nuse_peft: true\n" + text, encoding="utf-8")
    return to_spec(import_configs([str(p)]))


def test_activation_offloading_maps_to_offload_activations(tmp_path: Path) -> None:
    """With TRL's default checkpointing (gradient_checkpointing True): offload_activations, not offload. (Before:
    offload True, transformers' save_on_cpu of the checkpoints only.)"""
    spec = _converted(tmp_path, "activation_offloading: true\n").spec  # type: ignore[attr-defined]
    assert (spec.offload_activations, spec.offload, spec.checkpointing) == (True, False, "full")


def test_activation_offloading_without_checkpointing_is_modelled(tmp_path: Path) -> None:
    """TRL offloads with gradient_checkpointing off too: the row is a setting, not NOT MODELLED (before: NOT
    MODELLED, "memfit offloads checkpoints")."""
    run = _converted(tmp_path, "activation_offloading: true\ngradient_checkpointing: false\n")
    spec = run.spec  # type: ignore[attr-defined]
    assert (spec.offload_activations, spec.checkpointing) == (True, "none")
    rows = [r for r in run.rows if r.field == "activation_offloading"]  # type: ignore[attr-defined]
    assert [r.status for r in rows] == ["setting"]
