"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"


@pytest.fixture(scope="module")
def gsm8k_200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 200 GSM8K train records (question, answer) as a JSONL file."""
    src = SHARED / "data" / "gsm8k" / "train.jsonl"
    path = tmp_path_factory.mktemp("data") / "gsm8k_200.jsonl"
    path.write_text("".join(src.read_text().splitlines(keepends=True)[:200]))
    return path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[[list[str]], tuple[int, str, str]]:
    """Run ``memfit ARGV`` in-process: ``(exit code, stdout, stderr)``."""
    from memfit.cli import main

    def run(argv: list[str]) -> tuple[int, str, str]:
        code = main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    return run
