"""Progress on long work: a rich bar with what is being done, how far and the time left (ETA) on a terminal;
nothing under --json or when stderr is not a terminal."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memfit.progress import interactive, progress_bar

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
NEOX = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def test_the_bar_says_what_how_far_and_the_time_left() -> None:
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with progress_bar("tokenising d.jsonl", total=1_000_000, unit="bytes", enabled=True, console=console) as bar:
        bar.update(250_000, 1_000_000)
        bar.describe("tokenising d.jsonl (batch 3)")
        console.file.flush()
    text = ANSI.sub("", buf.getvalue())
    assert "tokenising d.jsonl" in text and "ETA" in text and "0.2/1.0 MB" in text


def test_quiet_under_json_or_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not interactive(json_out=True)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not interactive()
    with progress_bar("x", total=10) as bar:  # disabled: its methods do nothing
        bar.update(5, 10)
        bar.advance(1)
        bar.describe("y")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a pseudo-terminal")
@pytest.mark.parametrize("command", ["lengths", "pack"])
def test_lengths_and_pack_show_the_bar_on_a_terminal_only(command: str, tmp_path: Path) -> None:
    """Run under `script` (a pseudo-terminal): the bar with ETA appears; with --json it does not."""
    data = tmp_path / "d.jsonl"
    src = (SHARED / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()
    data.write_text("\n".join(src * 2) + "\n")  # 14,946 records: a few seconds, several updates
    argv = [sys.executable, "-m", "memfit", command, str(data), "-t", str(NEOX), "--prompt", "question",
            "--completion", "answer"]
    if command == "pack":
        argv += ["--out", str(tmp_path / "rows.jsonl"), "--force"]
    env = {**os.environ, "COLUMNS": "160", "TOKENIZERS_PARALLELISM": "true"}

    def on_terminal(extra: list[str]) -> str:
        cmd = " ".join(f"'{a}'" for a in argv + extra)
        out = subprocess.run(["script", "-q", "-e", "-c", cmd, "/dev/null"], capture_output=True, env=env,
                             timeout=300, check=True).stdout
        return ANSI.sub("", out.decode("utf-8", "replace").replace("\r", "\n"))

    shown = on_terminal([])
    assert re.search(r"tokenising d\.jsonl .* \d+% .*MB.* ETA \d+:\d\d:\d\d", shown), shown[-2000:]
    if command == "pack":
        assert re.search(r"writing rows\.jsonl .* rows ETA", shown), shown[-2000:]
    quiet = on_terminal(["--json"])
    assert "ETA" not in quiet and "tokenising" not in quiet
