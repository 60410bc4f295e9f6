"""The packer, fuzzed: random lengths (empty, 1 token, exactly --seq-len, several times it), random loss masks
(all -100, none, mixed), every overflow policy. Every token and every label is accounted for against an
oracle written here from the docstring's rules one example at a time; the rows hold each kept piece exactly
once, in order, with positions restarting and only its first label masked; and the streamed packer (scratch
file, batches of any size) writes the same rows and the same accounting as the in-memory one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fuzzing import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memfit.data.pack import OVERFLOW_CHOICES, pack, pack_stream
from memfit.errors import MemfitError

IGNORE = -100


@st.composite
def packing_case(draw: st.DrawFn) -> tuple[list[dict[str, list[int]]], int, str]:
    max_len = draw(st.integers(2, 24))
    n = draw(st.integers(0, 14))
    exs = []
    for _ in range(n):
        length = draw(st.one_of(st.integers(0, max_len), st.integers(0, 3 * max_len + 1),
                                st.sampled_from([0, 1, max_len, max_len + 1])))
        ids = draw(st.lists(st.integers(0, 2**31 - 1), min_size=length, max_size=length))
        mask_kind = draw(st.sampled_from(["mixed", "none", "all", "prompt"]))
        if mask_kind == "mixed":
            carries = draw(st.lists(st.booleans(), min_size=length, max_size=length))
        elif mask_kind == "prompt":
            cut = draw(st.integers(0, length))
            carries = [i >= cut for i in range(length)]
        else:
            carries = [mask_kind == "all"] * length
        exs.append({"input_ids": ids, "labels": [t if c else IGNORE for t, c in zip(ids, carries, strict=True)]})
    return exs, max_len, draw(st.sampled_from(OVERFLOW_CHOICES))


def _live(labels: list[int], a: int, b: int) -> int:
    return sum(1 for t in labels[a + 1:b] if t != IGNORE)


def oracle(exs: list[dict[str, list[int]]], max_len: int, overflow: str) -> tuple[dict[str, int], list[tuple]]:
    """The accounting and the kept pieces (example, offset, length), one example at a time, from the rules in
    memfit.data.pack's docstrings."""
    acc = dict.fromkeys(["examples", "empty", "tokens_in", "loss_in", "loss_out", "truncated_examples",
                         "truncated_tokens", "truncated_loss", "dropped_examples", "dropped_tokens", "dropped_loss",
                         "split_examples", "split_pieces", "split_masked", "no_loss_examples", "no_loss_pieces",
                         "no_loss_tokens"], 0)
    pieces = []
    for i, e in enumerate(exs):
        labels, n = e["labels"], len(e["input_ids"])
        acc["examples"] += 1
        acc["tokens_in"] += n
        if n == 0:
            acc["empty"] += 1
            continue
        whole = _live(labels, 0, n)
        acc["loss_in"] += whole
        if n <= max_len or overflow == "truncate":
            keep = min(n, max_len)
            kept = _live(labels, 0, keep)
            if keep < n:
                acc["truncated_examples"] += 1
                acc["truncated_tokens"] += n - keep
                acc["truncated_loss"] += whole - kept
            if kept == 0:
                acc["no_loss_examples"] += 1
                acc["no_loss_tokens"] += keep
            else:
                pieces.append((i, 0, keep))
                acc["loss_out"] += kept
        elif overflow == "drop":
            acc["dropped_examples"] += 1
            acc["dropped_tokens"] += n
            acc["dropped_loss"] += whole
        elif overflow == "split":
            acc["split_examples"] += 1
            placed = 0
            for off in range(0, n, max_len):
                end = min(n, off + max_len)
                acc["split_pieces"] += 1
                if off and labels[off] != IGNORE:
                    acc["split_masked"] += 1
                if _live(labels, off, end) == 0:
                    acc["no_loss_pieces"] += 1
                    acc["no_loss_tokens"] += end - off
                    continue
                placed += 1
                pieces.append((i, off, end - off))
                acc["loss_out"] += _live(labels, off, end)
            if not placed:
                acc["no_loss_examples"] += 1
    return acc, pieces


def _check_rows(rows: Any, exs: list[dict[str, list[int]]], max_len: int, pieces: list[tuple]) -> int:
    seen = []
    loss = 0
    for row in rows:
        assert 0 < row.n_tokens <= max_len
        assert row.cu_seqlens[0] == 0 and row.cu_seqlens[-1] == row.n_tokens
        assert len(row.labels) == len(row.position_ids) == row.n_tokens
        for j, (e, off) in enumerate(zip(row.example_ids, row.example_offsets, strict=True)):
            a, b = row.cu_seqlens[j], row.cu_seqlens[j + 1]
            n = b - a
            assert row.seq_lens[j] == n
            ids, labels = exs[e]["input_ids"], exs[e]["labels"]
            assert row.input_ids[a:b] == ids[off:off + n]
            assert row.labels[a] == IGNORE and row.labels[a + 1:b] == labels[off + 1:off + n]
            assert row.position_ids[a:b] == list(range(n))
            seen.append((e, off, n))
        loss += sum(1 for t in row.labels[1:] if t != IGNORE)
    assert sorted(seen) == sorted(pieces)  # each kept piece exactly once, nothing else
    return loss


@settings(max_examples=examples(150))
@given(packing_case())
@example(([{"input_ids": [5, 6, 7], "labels": [IGNORE, IGNORE, 7]}, {"input_ids": [8], "labels": [8]}], 2,
          "split"))
def test_every_token_and_label_is_accounted_for(case: tuple[list[dict[str, list[int]]], int, str]) -> None:
    exs, max_len, overflow = case
    want, pieces = oracle(exs, max_len, overflow)
    too_long = [i for i, e in enumerate(exs) if len(e["input_ids"]) > max_len]
    try:
        res = pack(exs, max_len, overflow=overflow)
    except MemfitError as exc:
        assert overflow == "error" and too_long and f"example {too_long[0]} " in str(exc)
        return
    assert overflow != "error" or not too_long
    got = {"examples": res.examples, "empty": res.empty_examples, "tokens_in": res.tokens_in,
           "loss_in": res.loss_tokens_in, "loss_out": res.loss_tokens_out,
           "truncated_examples": res.truncated_examples, "truncated_tokens": res.truncated_tokens,
           "truncated_loss": res.truncated_loss_tokens, "dropped_examples": res.dropped_examples,
           "dropped_tokens": res.dropped_tokens, "dropped_loss": res.dropped_loss_tokens,
           "split_examples": res.split_examples, "split_pieces": res.split_pieces,
           "split_masked": res.split_labels_masked, "no_loss_examples": res.no_loss_examples,
           "no_loss_pieces": res.no_loss_pieces, "no_loss_tokens": res.no_loss_tokens}
    assert got == want
    for name, row in res.accounting().items():  # in == out + every reason, for each of the three
        assert row["in"] == sum(v for k, v in row.items() if k != "in"), name
    assert res.tokens == sum(n for _, _, n in pieces) and res.n_rows == len(res.rows)
    assert res.packed_examples == len({e for e, _, _ in pieces})
    assert _check_rows(res.rows, exs, max_len, pieces) == res.loss_tokens_out
    assert res.n_rows >= res.lower_bound_rows


class _Batch:
    def __init__(self, lines: list[int], examples: list[Any]) -> None:
        self.lines, self.examples = lines, examples


@settings(max_examples=examples(60))
@given(case=packing_case(), cuts=st.lists(st.integers(1, 6), max_size=6))
def test_streamed_packing_writes_the_same_rows(tmp_path_factory: Any, case: tuple[list[dict[str, list[int]]], int, str],
                                               cuts: list[int]) -> None:
    exs, max_len, overflow = case
    batches, at = [], 0
    for size in [*cuts, len(exs)]:
        if at >= len(exs):
            break
        batches.append(_Batch(list(range(at + 1, at + size + 1)), exs[at:at + size]))
        at += size
    folder: Path = tmp_path_factory.mktemp("scratch")
    try:
        want = pack(exs, max_len, overflow=overflow)
    except MemfitError as exc:
        try:
            pack_stream(iter(batches), max_len, overflow=overflow, write_row=lambda r: None, scratch=folder)
        except MemfitError as streamed:
            first = re.compile(r"^example (\d+) ")
            assert first.match(str(exc))[1] == first.match(str(streamed))[1]  # type: ignore[index]  # same one named
        else:
            raise AssertionError("the streamed packer accepted what pack refused") from None
        return
    rows: list[Any] = []
    got = pack_stream(iter(batches), max_len, overflow=overflow, write_row=rows.append, scratch=folder)
    assert [r.to_packed_row() for r in rows] == list(want.rows)
    assert got.to_dict() == want.to_dict()
    assert list(folder.iterdir()) == []  # the scratch file is gone
