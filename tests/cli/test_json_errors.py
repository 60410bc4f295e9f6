"""Under ``--json`` every error is ONE JSON object on stdout, ``{"error", "hint", "exit_code"}``, with the same
exit code as without it (1 bad input, 2 usage); without ``--json`` the red line is unchanged. Every command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from memfit.errors import MemfitError, split_hint

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOK = str(SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json")
Cli = Callable[[list[str]], tuple[int, str, str]]


def _data(tmp_path: Path) -> str:
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "one two", "answer": "three"}\n')
    return str(p)


# (argv with {data} / {tmp}, a word the error must contain); each is bad input: exit code 1
BAD_INPUT = [
    (["params", "no-such-model"], "unknown model"),
    (["estimate", "gpt2", "--gpu", "24"], "has no unit"),
    (["estimate", "gpt2", "--batch", "0"], "--batch"),
    (["fit", "gpt2"], "--gpu"),
    (["trace", "gpt2", "--top", "-1"], "--top"),
    (["measure", "gpt2", "--batch", "1,x"], "--batch"),
    (["lengths", "{tmp}/missing.jsonl", "-t", TOK], "no such file"),
    (["pack", "{data}", "-t", TOK, "--out", "{tmp}/rows.csv"], ".jsonl or .parquet"),
    (["verify-pack", "{data}", "-t", TOK, "--limit", "0"], "--limit"),
]
# usage errors come from click before the command runs: exit code 2
USAGE = [
    (["estimate", "gpt2", "--bach", "4"], "No such option: --bach", "--batch"),
    (["params"], "Missing argument", "memfit params -h"),
    (["estimate", "gpt2", "--batch", "four"], "Invalid value for '--batch'", "memfit estimate -h"),
    (["models", "--wide"], "No such option", "memfit models -h"),
    (["gpus", "extra"], "unexpected extra argument", "memfit gpus -h"),
    (["demo"], "No such option: --json", "memfit demo -h"),  # demo has no --json: still one JSON object
    (["report", "r.json", "--html", "x.html"], "No such option: --json", "memfit report -h"),
    (["no-such-command"], "No such command", "memfit -h"),
]


def _fill(argv: list[str], tmp_path: Path) -> list[str]:
    data = _data(tmp_path)
    return [a.replace("{data}", data).replace("{tmp}", str(tmp_path)) for a in argv]


def _one_object(out: str) -> dict[str, object]:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # ONE object, on one line
    obj = json.loads(lines[0])
    assert set(obj) == {"error", "hint", "exit_code"}
    assert isinstance(obj["error"], str) and obj["error"]
    assert obj["hint"] is None or (isinstance(obj["hint"], str) and obj["hint"])
    return obj


@pytest.mark.parametrize(("argv", "word"), BAD_INPUT, ids=[a[0][0] for a in BAD_INPUT])
def test_bad_input_under_json_is_one_json_object_with_exit_1(tmp_path: Path, cli: Cli, argv: list[str],
                                                             word: str) -> None:
    args = _fill(argv, tmp_path)
    rc, out, err = cli([*args, "--json"])
    obj = _one_object(out)
    assert rc == obj["exit_code"] == 1
    assert word in f"{obj['error']}: {obj['hint']}" and "Traceback" not in err and "error:" not in err
    rc, out, err = cli(args)  # without --json: the red line on stderr, as before
    assert rc == 1 and out == "" and err.startswith("error: ") and word in err.replace("\n", " ")


@pytest.mark.parametrize(("argv", "message", "hint"), USAGE, ids=[a[0][0] for a in USAGE])
def test_usage_errors_under_json_are_one_json_object_with_exit_2(cli: Cli, argv: list[str], message: str,
                                                                 hint: str) -> None:
    rc, out, err = cli([*argv, "--json"])
    obj = _one_object(out)
    assert rc == obj["exit_code"] == 2
    assert message in str(obj["error"]) and hint in str(obj["hint"]) and "Traceback" not in err


def test_a_wrong_option_names_the_right_one_in_the_hint(cli: Cli) -> None:
    rc, out, _ = cli(["estimate", "gpt2", "--json", "--bach", "4"])
    obj = _one_object(out)
    assert obj["error"] == "No such option: --bach" and "--batch" in str(obj["hint"])


def test_does_not_fit_under_check_is_an_answer_not_an_error(cli: Cli) -> None:
    """--check exits 3 when the run does not fit; under --json stdout is the estimate itself, not an error."""
    rc, out, _ = cli(["estimate", "llama-3.1-8b", "--gpu", "8GiB", "--check", "--json"])
    assert rc == 3
    d = json.loads(out)
    assert "error" not in d and d["fits"] is False


def test_json_after_double_dash_is_not_the_flag(cli: Cli) -> None:
    from memfit.cli import json_requested

    assert json_requested(["estimate", "--json"]) and not json_requested(["lengths", "--", "--json"])


def test_hint_is_split_from_the_message() -> None:
    """The fix a message names after ': ' or '; ' (an imperative) is the hint; a given hint is kept apart."""
    assert split_hint("example 3 (line 4) has 99 tokens, more than --seq-len 64: raise --seq-len or pass "
                      "--overflow truncate|drop|split") == (
        "example 3 (line 4) has 99 tokens, more than --seq-len 64",
        "raise --seq-len or pass --overflow truncate|drop|split")
    assert split_hint("no such file or directory: data.jsonl") == ("no such file or directory: data.jsonl", None)
    e = MemfitError("the folder out does not exist", hint="create it or choose another --out")
    assert str(e) == "the folder out does not exist: create it or choose another --out"
    assert (e.error, e.hint) == ("the folder out does not exist", "create it or choose another --out")
