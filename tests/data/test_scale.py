"""Bounded memory, the small version of bench/bench_scale.py (2,000,000 examples): lengths and pack keep the
lengths and a few integers per example, never the records or their token lists. Measured as the peak of
Python's own allocations (tracemalloc) at 2,000 and at 16,000 records: the growth per extra record must stay
under 200 bytes. Before streaming, lengths held every record and every tokenised example: 16.7 MiB at 2,000
whole GSM8K records and 164.8 MiB at 20,000 (~8,600 bytes each); on this test's cut records, 6,265 bytes each."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
NEOX = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
PER_RECORD_LIMIT = 200  # bytes of Python heap per extra record (8-byte lengths, ~40 B of pack bookkeeping)


def _data(folder: Path, n: int) -> Path:
    """``n`` GSM8K train records drawn with replacement (seed 0), questions and answers cut to 200 characters
    (the property is about records, not their length; short texts keep the tokenising quick)."""
    import json

    rows = [json.loads(line) for line in (SHARED / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    path = folder / f"d{n}.jsonl"
    with open(path, "w") as f:
        for _ in range(n):
            r = rng.choice(rows)
            f.write(json.dumps({"question": r["question"][:200], "answer": r["answer"][:200]}) + "\n")
    return path


def _peak(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_lengths_and_pack_python_memory_does_not_grow_with_the_data(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    import memfit.data.io

    # the Parquet writer buffers one row group (1,024 rows, a constant ~30 MB at 512 tokens); 2,000 records fill
    # ~600 rows and 16,000 ~4,700, so with the default the small run would not fill a group and the buffer
    # would read as growth. 64-row groups: both runs hold a full group.
    monkeypatch.setattr(memfit.data.io, "PARQUET_ROWS_PER_GROUP", 64)
    from memfit.cli import main
    from memfit.data.lengths import analyse_lengths
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(NEOX)
    small, big = _data(tmp_path, 2_000), _data(tmp_path, 16_000)
    # one warm-up run, so that lazy imports and first-call caches are not charged to the first measurement
    analyse_lengths(small, tok, prompt="question", completion="answer")
    lengths = [_peak(lambda p=p: analyse_lengths(p, tok, prompt="question", completion="answer"))
               for p in (small, big)]
    growth = (lengths[1] - lengths[0]) / 14_000
    assert growth < PER_RECORD_LIMIT, f"lengths: {lengths} B peak at 2,000 / 16,000 records ({growth:.0f} B each)"

    def pack(p: Path) -> Callable[[], object]:
        return lambda: main(["pack", str(p), "-t", str(NEOX), "--prompt", "question", "--completion", "answer",
                             "--seq-len", "512", "--out", str(tmp_path / "rows.parquet"), "--force", "--json"])

    packs = [_peak(pack(p)) for p in (small, big)]
    growth = (packs[1] - packs[0]) / 14_000
    assert growth < PER_RECORD_LIMIT, f"pack: {packs} B peak at 2,000 / 16,000 records ({growth:.0f} B each)"
