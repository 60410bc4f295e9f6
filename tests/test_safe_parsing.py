"""No code runs from anything a user gives memfit: YAML only through safe loaders, no eval/exec, no pickle of
user files, no trust_remote_code; paths a data set names stay inside the folder the user named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memfit.errors import MemfitError

SRC = Path(__file__).resolve().parents[1] / "src" / "memfit"

# (what, pattern); each must match nowhere in src/memfit
FORBIDDEN = [
    ("pickle.load/loads", re.compile(r"\bpickle\.loads?\(|\bcPickle\b|\bdill\.loads?\(|\bjoblib\.load\(")),
    ("eval( / exec(", re.compile(r"(?<![.\w])(?:eval|exec)\(")),
    ("yaml.load( without a safe Loader", re.compile(r"\byaml\.load\((?![^)]*Loader=yaml\.(?:C?SafeLoader))")),
    ("yaml.unsafe_load / full_load / UnsafeLoader / FullLoader",
     re.compile(r"\byaml\.(?:unsafe_load|full_load|load_all)\(|\b(?:Unsafe|Full)Loader\b")),
    ("trust_remote_code=True", re.compile(r"trust_remote_code\s*=\s*True")),
    ("torch.load( without weights_only=True", re.compile(r"\btorch\.load\((?![^)]*weights_only\s*=\s*True)")),
    ("numpy load with pickles", re.compile(r"allow_pickle\s*=\s*True")),
]


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(SRC.rglob("*.py"))]


@pytest.mark.parametrize(("what", "pattern"), FORBIDDEN, ids=[w for w, _ in FORBIDDEN])
def test_no_code_execution_from_user_input_in_src(what: str, pattern: re.Pattern[str]) -> None:
    hits = [f"{p.relative_to(SRC)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for p, text in _sources() for m in pattern.finditer(text)]
    assert hits == [], f"{what} in src/memfit: {hits}"


def test_the_patterns_catch_what_they_name() -> None:
    """Guard against a pattern that matches nothing: each catches its bad line and spares the good one."""
    bad = {"pickle.load/loads": "x = pickle.load(f)", "eval( / exec(": "eval(text)",
           "yaml.load( without a safe Loader": "yaml.load(text)",
           "yaml.unsafe_load / full_load / UnsafeLoader / FullLoader": "yaml.full_load(text)",
           "trust_remote_code=True": "from_pretrained(p, trust_remote_code=True)",
           "torch.load( without weights_only=True": "torch.load(path)", "numpy load with pickles": "allow_pickle=True"}
    good = ["model.eval()", "yaml.load(text, Loader=yaml.SafeLoader)", "yaml.safe_load(text)",
            "trust_remote_code=False", "torch.load(path, weights_only=True)"]
    for what, pattern in FORBIDDEN:
        assert pattern.search(bad[what]), what
        assert not any(pattern.search(g) for g in good), what


def test_a_yaml_config_cannot_run_code(tmp_path: Path) -> None:
    """PyYAML's python tags would call os.system under yaml.load(Loader=UnsafeLoader); the safe loader refuses."""
    from memfit.configs import import_configs

    marker = tmp_path / "ran"
    cfg = tmp_path / "run.yml"
    cfg.write_text(f"base_model: gpt2\nmicro_batch_size: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(MemfitError):
        import_configs([str(cfg)])
    assert not marker.exists()


def test_a_pickled_training_args_is_refused(tmp_path: Path) -> None:
    import pickle

    from memfit.configs import import_configs

    path = tmp_path / "training_args.bin"
    path.write_bytes(pickle.dumps({"per_device_train_batch_size": 4}))
    with pytest.raises(MemfitError, match="pickle"):
        import_configs([str(path)])


def test_a_save_to_disk_state_cannot_point_outside_its_folder(tmp_path: Path) -> None:
    """state.json names the Arrow shards; a name that climbs out of the directory the user passed is refused
    (before: opened wherever it pointed)."""
    from memfit.data.formats import load_records

    (tmp_path / "secret.arrow").write_bytes(b"not yours")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../secret.arrow"}]}))
    with pytest.raises(MemfitError, match="outside"):
        load_records(saved, text="text")


def test_a_missing_referenced_config_names_the_file_and_line(tmp_path: Path) -> None:
    from memfit.configs import import_configs

    cfg = tmp_path / "run.yml"
    cfg.write_text("base_model: gpt2\nmicro_batch_size: 2\ndeepspeed: zero3.json\n")
    with pytest.raises(MemfitError, match=r"run.yml:3: deepspeed: zero3.json not found"):
        import_configs([str(cfg)])
