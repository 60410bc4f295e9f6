"""`memfit models`, `memfit params`, and the one-line error contract of the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

from memfit.cli import main


def test_models_json_lists_catalogue(capsys) -> None:
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 18
    gpt2 = next(r for r in rows if r["name"] == "gpt2")
    assert gpt2["parameters"] == 124_439_808 and gpt2["layers"] == 12 and gpt2["vocab"] == 50257


def test_params_json_total(capsys) -> None:
    assert main(["params", "llama-2-7b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"] == 6_738_415_616
    assert data["by_kind"]["q_proj"] == 32 * 4096 * 4096


def test_params_table_for_people(capsys) -> None:
    assert main(["params", "qwen2.5-0.5b"]) == 0
    assert "494,032,768" in capsys.readouterr().out


def test_unknown_model_one_line_exit_1() -> None:
    out = subprocess.run([sys.executable, "-m", "memfit.cli", "params", "llama-9"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown model" in lines[0] and "memfit models" in lines[0]


def test_bad_config_file_one_line_exit_1(tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "t5", "d_model": 512}')
    out = subprocess.run([sys.executable, "-m", "memfit.cli", "params", str(bad)], capture_output=True, text=True)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "not supported" in out.stderr and "llama" in out.stderr


def test_unknown_option_is_a_usage_error_not_a_traceback() -> None:
    out = subprocess.run([sys.executable, "-m", "memfit.cli", "params", "gpt2", "-x"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "No such option" in out.stderr


def test_error_text_with_brackets_survives(capsys) -> None:
    """Messages such as pip install 'memfit[torch]' must not lose their brackets to rich markup."""
    from memfit.cli._app import app
    from memfit.errors import MemfitError

    @app.command("_raise_for_test", hidden=True)
    def _raise() -> None:
        raise MemfitError("this needs torch: pip install 'memfit[torch]'")

    assert main(["_raise_for_test"]) == 1
    assert "memfit[torch]" in capsys.readouterr().err


def test_demo_shows_the_lesson_budget_and_the_plan(capsys) -> None:
    """make demo: the lesson's rule-of-thumb figure (24 x 4 x 2048 x 2048 x 20 B) and the advisor's plan."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"{24 * 4 * 2048 * 2048 * 20:,}" in out
    assert "memfit fit" in out and "checkpointing" in out
