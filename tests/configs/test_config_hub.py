"""Hub ids from the local Hugging Face cache (a cache folder laid out as huggingface_hub 2.4.0 lays it out, built
here), the catalogue entry copied from the repo, and the config.json-only download when online."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import lookup, resolve_config, resolve_model
from memfit.estimate.hub import cached_config, hub_cache

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512,
        "torch_dtype": "bfloat16"}


def _cache(root: Path, repo: str, config: dict[str, object], commit: str = COMMIT) -> Path:
    """models--org--name/{refs/main, snapshots/<commit>/config.json}, as the hub client writes them."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    return snap / "config.json"


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_hub_id_from_the_cache(offline_cache: Path) -> None:
    path = _cache(offline_cache, "acme/tiny-llama", TINY)
    assert cached_config("acme/tiny-llama") == path
    shape = resolve_model("acme/tiny-llama")
    assert (shape.name, shape.n_layers, shape.hidden) == ("acme/tiny-llama", 3, 256)
    assert resolve_config("acme/tiny-llama")["vocab_size"] == 1000


def test_refs_main_picks_the_snapshot(offline_cache: Path) -> None:
    """Two snapshots: refs/main names the second; the first is an older revision."""
    _cache(offline_cache, "acme/m", TINY)
    newer = "f" * 40
    snap = offline_cache / "models--acme--m" / "snapshots" / newer
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({**TINY, "num_hidden_layers": 5}))
    (offline_cache / "models--acme--m" / "refs" / "main").write_text(newer)
    assert resolve_model("acme/m").n_layers == 5


def test_hf_home_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache() == tmp_path / "hf" / "hub"
    _cache(tmp_path / "hf" / "hub", "acme/tiny-llama", TINY)
    assert resolve_model("acme/tiny-llama").n_layers == 3


def test_catalogue_entry_of_the_repo_when_not_cached(offline_cache: Path) -> None:
    """meta-llama/Llama-3.1-8B is not in this empty cache; memfit's catalogue entry was copied from that repo."""
    assert resolve_model("meta-llama/Llama-3.1-8B").n_layers == lookup("llama-3.1-8b").shape.n_layers == 32


def test_offline_and_not_cached_names_the_cache(offline_cache: Path) -> None:
    with pytest.raises(MemfitError, match="not in the local Hugging Face cache .*HF_HUB_OFFLINE is set") as err:
        resolve_model("acme/absent")
    assert str(offline_cache) in str(err.value)


def test_online_downloads_config_json_only(offline_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not cached and HF_HUB_OFFLINE unset: one hf_hub_download call, for config.json (never weights)."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = []

    def fake_download(*, repo_id: str, filename: str) -> str:
        calls.append((repo_id, filename))
        return str(_cache(offline_cache, repo_id, TINY))

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    assert resolve_model("acme/fresh").n_layers == 3
    assert calls == [("acme/fresh", "config.json")]


def test_estimate_cli_takes_a_hub_id(offline_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _cache(offline_cache, "acme/tiny-llama", TINY)
    assert main(["estimate", "acme/tiny-llama", "--batch", "2", "--seq", "128", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "acme/tiny-llama" and d["peak_bytes"] > 0
    assert main(["estimate", "meta-llama/Llama-3.1-8B", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "meta-llama/Llama-3.1-8B"


def test_config_base_model_goes_through_the_same_resolution(offline_cache: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A config's base_model (a Hub id in the cache) is the MODEL; --model on the command line overrides it."""
    _cache(offline_cache, "acme/tiny-llama", TINY)
    cfg = tmp_path / "ax.yml"
    cfg.write_text("base_model: acme/tiny-llama\nadapter: lora\nlora_r: 8\nlora_alpha: 16\nsequence_len: 128\n")
    assert main(["estimate", "--config", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "acme/tiny-llama"
    assert main(["estimate", "llama-3.2-1b", "--config", str(cfg), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "llama-3.2-1b"
