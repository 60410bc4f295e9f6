"""``--alloc-conf`` from ``PYTORCH_CUDA_ALLOC_CONF`` when the flag is not given (:mod:`memfit.cli._alloc_env`).

The oracle is the flag itself: the environment's value must give the figures ``--alloc-conf`` with the same text
gives (tests/estimate/test_reserved.py checks what the flag does to the allocator replay)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

Cli = Callable[[list[str]], tuple[int, str, str]]
BASE = ["estimate", "llama-3.2-1b", "--method", "lora", "--seq", "512", "--json"]


def _reserved(cli: Cli, argv: list[str]) -> tuple[int, str, str]:
    code, out, err = cli(argv)
    assert code == 0, err
    doc = json.loads(out)
    return doc["reserved_bytes"], doc["spec"]["alloc_conf"], err


def test_environment_setting_is_used_and_said(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the environment was not read, the replay ran torch's defaults (a different reserved figure)."""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    default, _, _ = _reserved(cli, BASE)
    flag, _, _ = _reserved(cli, [*BASE, "--alloc-conf", "expandable_segments:True"])
    assert flag != default  # guard: the setting changes the figure, so the test can tell the two apart
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    reserved, conf, err = _reserved(cli, BASE)
    assert (reserved, conf) == (flag, "expandable_segments:True")
    assert "PYTORCH_CUDA_ALLOC_CONF" in err and "environment" in err  # --json: said on stderr, stdout stays JSON
    code, out, _ = cli(BASE[:-1])
    assert code == 0 and "from the environment" in out
    # the flag wins, '' for torch's defaults; --device cpu has no caching allocator and ignores the variable
    assert _reserved(cli, [*BASE, "--alloc-conf", ""])[:2] == (default, "")
    cpu = _reserved(cli, [*BASE, "--device", "cpu"])
    assert cpu[1] == "" and "PYTORCH_CUDA_ALLOC_CONF" not in cpu[2]


def test_environment_options_not_modelled_are_refused_naming_the_variable(cli: Cli,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: ignored (exit 0 with torch's defaults). Now the flag's refusal, with the variable as its source."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.6")
    code, out, err = cli(BASE[:-1])
    assert code == 1 and "Traceback" not in err
    assert "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6 in this environment" in err
    assert "max_split_size_mb" in err  # the flag's own message: what memfit models
    code, out, _ = cli(BASE)  # --json keeps its JSON error
    assert code == 1 and "in this environment" in json.loads(out)["error"]
