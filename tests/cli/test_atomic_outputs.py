"""Every file memfit writes appears whole or not at all: Ctrl-C (SIGINT) or SIGTERM mid-write ends with exit code
130 and one line, and leaves neither the file nor a temporary file; an existing file is replaced only with
--force. The interrupt tests signal a real ``memfit pack`` subprocess while it tokenises and while it writes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
GSM8K = SHARED / "data" / "gsm8k" / "train.jsonl"
LLAMA2 = SHARED / "tokenizers" / "llama2"
NEOX = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
Cli = Callable[[list[str]], tuple[int, str, str]]


@pytest.fixture(scope="module")
def gsm8k_60k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60,000 GSM8K train records drawn with replacement (seed 0): ~33 MB, some seconds to pack."""
    records = GSM8K.read_text().splitlines()
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("big") / "gsm8k_60k.jsonl"
    path.write_text("\n".join(rng.choice(records) for _ in range(60_000)) + "\n")
    return path


def _pack(data: Path, out: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true"}
    return subprocess.Popen([sys.executable, "-m", "memfit", "pack", str(data), "-t", str(LLAMA2), "--prompt",
                             "question", "--completion", "answer", "--seq-len", "1024", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(folder: Path, ready: Callable[[list[Path]], bool], proc: subprocess.Popen[str], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"memfit pack ended before the signal: {proc.communicate()}")
        if ready(list(folder.iterdir())):
            return
        time.sleep(0.02)
    proc.kill()
    pytest.fail("memfit pack never reached the phase to interrupt")


def _writing_rows(files: list[Path]) -> bool:
    """Pass 2: the temporary rows file has bytes in it (the target does not exist yet)."""
    return any(f.name.startswith(".rows.jsonl.") and f.stat().st_size > 0 for f in files)


def _tokenising(files: list[Path]) -> bool:
    """Pass 1: the scratch file of token ids grows, no row written yet."""
    return any(f.name.startswith(".memfit-pack-tokens-") and f.stat().st_size > 0 for f in files) \
        and not _writing_rows(files)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "phase"), [(signal.SIGTERM, _writing_rows), (signal.SIGINT, _tokenising)],
                         ids=["SIGTERM-while-writing", "SIGINT-while-tokenising"])
def test_a_signal_mid_pack_exits_130_with_one_line_and_no_file(gsm8k_60k: Path, tmp_path: Path, sig: int,
                                                               phase: Callable[[list[Path]], bool]) -> None:
    out = tmp_path / "rows.jsonl"
    proc = _pack(gsm8k_60k, out)
    _wait_for(tmp_path, phase, proc, timeout=240)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    name = signal.Signals(sig).name
    assert stderr.strip().splitlines() == [f"error: interrupted ({name}): nothing was written: run the command again"]
    assert stdout == ""
    assert list(tmp_path.iterdir()) == []  # no rows file, no temporary rows file, no scratch file


def test_pack_out_exists_needs_force(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "one two three"}\n{"text": "four five"}\n')
    out = tmp_path / "rows.jsonl"
    out.write_text("keep me\n")
    rc, _, err = cli(["pack", str(data), "-t", str(NEOX), "--seq-len", "16", "--out", str(out)])
    assert rc == 1 and "rows.jsonl exists: pass --force to replace it" in err
    assert out.read_text() == "keep me\n"
    rc, out_text, _ = cli(["pack", str(data), "-t", str(NEOX), "--seq-len", "16", "--out", str(out), "--force",
                           "--json"])
    assert rc == 0 and json.loads(out_text)["rows"] == 1
    assert [json.loads(line)["seq_lens"] for line in out.read_text().splitlines()] == [[3, 2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "rows.jsonl"]  # no temporary file left


def test_nothing_to_pack_leaves_no_empty_file(tmp_path: Path, cli: Cli) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "one two three four five six seven"}\n')
    rc, _, err = cli(["pack", str(data), "-t", str(NEOX), "--seq-len", "2", "--overflow", "drop",
                      "--out", str(tmp_path / "rows.jsonl")])
    assert rc == 1 and "nothing to pack" in err
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]


def test_lengths_plot_exists_needs_force(tmp_path: Path, cli: Cli) -> None:
    pytest.importorskip("matplotlib")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "one two three"}\n{"text": "four five"}\n')
    plot = tmp_path / "h.png"
    plot.write_bytes(b"old")
    rc, _, err = cli(["lengths", str(data), "-t", str(NEOX), "--plot", str(plot)])
    assert rc == 1 and "h.png exists: pass --force to replace it" in err and plot.read_bytes() == b"old"
    rc, _, _ = cli(["lengths", str(data), "-t", str(NEOX), "--plot", str(plot), "--force"])
    assert rc == 0 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "h.png"]


def test_measure_plot_is_checked_before_the_sweep(tmp_path: Path, cli: Cli) -> None:
    """Before: the sweep ran (seconds to hours), then savefig raised FileNotFoundError: a traceback, no plot."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("torch")
    from memfit.runtime.build import tiny_config

    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_config("llama", layers=1, hidden=32, heads=2, kv_heads=1, vocab=64)))
    plot = tmp_path / "missing" / "p.png"
    rc, _, err = cli(["measure", str(config), "--batch", "1", "--seq", "8", "--steps", "1", "--device", "cpu",
                      "--plot", str(plot)])
    assert rc == 1 and "the folder" in err and "does not exist" in err and "Traceback" not in err
    rc, _, err = cli(["measure", str(config), "--batch", "1", "--seq", "8", "--steps", "1", "--device", "cpu",
                      "--plot", str(tmp_path / "p.txt")])
    assert rc == 1 and "matplotlib cannot write .txt files" in err


def test_one_helper_writes_every_file() -> None:
    """pack --out, --plot, --html and fit --write all go through memfit.files: no other module renames a
    temporary file into place (data/pieces.py's mkstemp is its scratch file of token ids, never an output), and
    measure's plot is saved inside atomic_output."""
    src = Path(__file__).resolve().parents[2] / "src" / "memfit"
    offenders = []
    for path in src.rglob("*.py"):
        rel = str(path.relative_to(src))
        if rel in ("files.py", "data/pieces.py"):
            continue
        text = path.read_text()
        offenders += [f"{rel}: {n}" for n in ("os.replace(", "os.rename(", "mkstemp(", "NamedTemporaryFile(")
                      if n in text]
    assert offenders == []
    measure_cli = (src / "cli" / "measure.py").read_text()
    assert "with atomic_output(plot" in measure_cli and "measure_plot(result, str(tmp))" in measure_cli
