"""pack(): the row layout and labels by hand, overflow and the in/out accounting worked by hand, bad input, and
the property that every token and label of every example appears exactly once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfit.data.pack import pack
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX


def _examples(lengths: list[int], seed: int = 0, prompt_share: float = 0.5) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(lengths):
        ids = (rng.integers(5, 1000, size=n) + 1000 * i).tolist()  # distinct per example
        n_prompt = int(n * prompt_share)
        out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * n_prompt + ids[n_prompt:]})
    return out


def test_row_layout_by_hand() -> None:
    ex = [
        {"input_ids": [11, 12, 13], "labels": [-100, -100, 13]},  # prompt 11 12, completion 13
        {"input_ids": [21, 22], "labels": [21, 22]},
        {"input_ids": [31, 32, 33, 34, 35], "labels": [-100, 32, 33, 34, 35]},
    ]
    res = pack(ex, 8)
    assert res.n_rows == 2
    a, b = res.rows
    # Row A: room 8, no 8; shortest 2, so the longest s <= 6 with a fillable leftover: 5 (leftover 3, one item);
    # room 3: exact fit, the 3. Row B: the 2.
    assert a.example_ids == [2, 0] and b.example_ids == [1]
    assert a.input_ids == [31, 32, 33, 34, 35, 11, 12, 13]
    assert a.labels == [-100, 32, 33, 34, 35, -100, -100, 13]
    assert a.position_ids == [0, 1, 2, 3, 4, 0, 1, 2]
    assert a.seq_lens == [5, 3] and a.cu_seqlens == [0, 5, 8]
    assert b.labels == [-100, 22]  # 21 would be learnt from token 13 of another example
    assert res.tokens == 10 and res.lower_bound_rows == 2 and res.efficiency == 10 / 16
    # Loss tokens as a causal LM counts them alone (labels[1:] != -100): 1 + 1 + 4 = 6, same packed.
    assert res.loss_tokens_in == res.loss_tokens_out == 6


def test_too_long_is_an_error_naming_example_length_and_flags() -> None:
    ex = _examples([3, 12, 4, 20])
    with pytest.raises(MemfitError) as info:
        pack(ex, 10)
    msg = str(info.value)
    assert "example 1 has 12 tokens" in msg and "--seq-len 10" in msg and "--overflow" in msg
    assert "2 examples are longer" in msg


def test_overflow_counts() -> None:
    # _examples: prompt = the first int(n / 2) tokens (labels -100), so lengths 3, 12, 4, 25 have prompts 1, 6, 2, 12
    # and loss tokens (labels[1:] != -100) 2, 6, 2, 13: 23 in all, 44 tokens.
    ex = _examples([3, 12, 4, 25])
    trunc = pack(ex, 10, overflow="truncate")
    assert (trunc.truncated_examples, trunc.truncated_tokens) == (2, 2 + 15)
    # 12 -> its first 10 (prompt 6: loss 4, tokens 10-11 cut carried loss: 2). 25 -> its first 10 are all prompt:
    # no loss token left, so it is left out (10 tokens), and its 13 loss tokens were all in the cut tail.
    assert (trunc.no_loss_examples, trunc.no_loss_tokens) == (1, 10)
    assert trunc.tokens == 3 + 10 + 4 and trunc.truncated_loss_tokens == 2 + 13
    assert (trunc.loss_tokens_in, trunc.loss_tokens_out) == (23, 2 + 4 + 2)
    assert sorted(e for r in trunc.rows for e in r.example_ids) == [0, 1, 2]
    drop = pack(ex, 10, overflow="drop")
    assert (drop.dropped_examples, drop.dropped_tokens, drop.tokens) == (2, 37, 7)
    assert (drop.dropped_loss_tokens, drop.loss_tokens_out) == (6 + 13, 2 + 2)
    assert sorted(e for r in drop.rows for e in r.example_ids) == [0, 2]
    split = pack(ex, 10, overflow="split")
    # 12 -> 10 + 2, 25 -> 10 + 10 + 5; the 25's first piece is all prompt: left out (1 piece, 10 tokens).
    assert (split.split_examples, split.split_pieces, split.no_loss_pieces, split.tokens) == (2, 5, 1, 34)
    assert split.no_loss_examples == 0  # the 25 still has two pieces in the rows
    # Every piece after the first loses its first label. Example 1 (prompt = first 6 tokens): token 10 carried
    # loss. Example 3 (prompt = first 12): token 10 is prompt (already -100), token 20 carried loss. So 2.
    assert split.split_labels_masked == 2
    assert split.loss_tokens_in - split.loss_tokens_out == 2
    for res in (trunc, drop, split):
        b = res.breakdown()
        assert b["tokens/packed"] + b["tokens/truncated"] + b["tokens/dropped"] + b["tokens/no_loss"] == 44
        assert res.tokens_in == 44 and res.loss_tokens_in == 23 and res.examples == 4


def test_accounting_worked_by_hand_prompt_longer_than_seq_len() -> None:
    """The pack docstring's example. max_len 4, --overflow truncate.

    A: 6 tokens, labels [-, -, -, -, 5, 6] (a 4-token prompt): 2 loss tokens (labels[1:]).
    B: 3 tokens, labels [-, 2, 3]: 2 loss tokens.
    In: 2 examples, 9 tokens, 4 loss tokens. Truncation keeps A[:4] (2 tokens cut, both carrying loss), which
    has no loss token left: A is left out, not packed as a row that trains nothing. Out: 1 example (B),
    3 tokens, 2 loss tokens. Tokens 9 = 3 + 2 truncated + 4 no-loss; loss 4 = 2 + 2 truncated.
    """
    a = {"input_ids": [1, 2, 3, 4, 5, 6], "labels": [-100, -100, -100, -100, 5, 6]}
    b = {"input_ids": [7, 2, 3], "labels": [-100, 2, 3]}
    res = pack([a, b], 4, overflow="truncate")
    assert [r.example_ids for r in res.rows] == [[1]]
    assert res.accounting() == {
        "examples": {"in": 2, "out": 1, "empty": 0, "dropped_too_long": 0, "no_loss_token": 1},
        "tokens": {"in": 9, "out": 3, "truncated": 2, "dropped_too_long": 0, "no_loss_token": 4},
        "loss_tokens": {"in": 4, "out": 2, "truncated": 2, "dropped_too_long": 0, "split_first_label_masked": 0},
    }
    # The same data with --overflow drop and split: A is dropped as too long; split cuts A into [1-4] (no loss
    # token: left out) and [5, 6] (first label 5 masked, 6 kept).
    drop = pack([a, b], 4, overflow="drop").accounting()
    assert drop["examples"] == {"in": 2, "out": 1, "empty": 0, "dropped_too_long": 1, "no_loss_token": 0}
    assert drop["loss_tokens"]["dropped_too_long"] == 2 and drop["loss_tokens"]["out"] == 2
    split = pack([a, b], 4, overflow="split")
    assert split.accounting()["tokens"] == {"in": 9, "out": 5, "truncated": 0, "dropped_too_long": 0,
                                            "no_loss_token": 4}
    assert split.accounting()["loss_tokens"]["split_first_label_masked"] == 1 and split.loss_tokens_out == 3
    # An example with no loss token at all is left out under every policy, and counted.
    res = pack([{"input_ids": [1, 2], "labels": [-100, -100]}, b], 8)
    assert res.no_loss_examples == 1 and res.packed_examples == 1 and res.tokens == 3


def test_bad_input_messages() -> None:
    with pytest.raises(MemfitError, match="example 0 has 3 input_ids but 2 labels"):
        pack([{"input_ids": [1, 2, 3], "labels": [1, 2]}], 8)
    with pytest.raises(MemfitError, match="unknown --overflow"):
        pack(_examples([3]), 8, overflow="wrap")
    res = pack([{"input_ids": [], "labels": []}, *_examples([2])], 8)
    assert res.empty_examples == 1 and res.packed_examples == 1


example_st = st.lists(
    st.tuples(st.integers(1, 40), st.floats(0.0, 1.0), st.booleans()), min_size=1, max_size=40
)


def test_every_token_and_label_appears_exactly_once() -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)  # fixed examples: the guards below
    # count what they held (a random draw had 67 multi-example rows once, under the guard of 100)
    @given(spec=example_st, max_len=st.integers(2, 48), overflow=st.sampled_from(["truncate", "drop", "split"]))
    def check(spec: list[tuple[int, float, bool]], max_len: int, overflow: str) -> None:
        examples = []
        for i, (n, share, random_mask) in enumerate(spec):
            ids = [100 * i + j for j in range(n)]
            if random_mask:  # -100 anywhere, as a chat template with several assistant turns gives
                labels = [t if (t * 2654435761) % 7 > 2 else IGNORE_INDEX for t in ids]
            else:
                k = int(n * share)
                labels = [IGNORE_INDEX] * k + ids[k:]
            examples.append({"input_ids": ids, "labels": labels})
        res = pack(examples, max_len, overflow=overflow)

        # Rebuild every example from the rows.
        pieces: dict[int, list[tuple[int, list[int], list[int], list[int]]]] = {}
        for row in res.rows:
            assert 1 <= row.n_tokens <= max_len
            assert len(row.labels) == len(row.position_ids) == row.n_tokens
            assert row.cu_seqlens[0] == 0 and row.cu_seqlens[-1] == row.n_tokens
            assert [b - a for a, b in zip(row.cu_seqlens[:-1], row.cu_seqlens[1:], strict=True)] == row.seq_lens
            segments = zip(row.example_ids, row.example_offsets, row.cu_seqlens[:-1], row.seq_lens, strict=True)
            for e, off, a, n in segments:
                assert row.position_ids[a : a + n] == list(range(n))  # reset at each example
                pieces.setdefault(e, []).append(
                    (off, row.input_ids[a : a + n], row.labels[a : a + n], row.position_ids[a : a + n])
                )
            seen["rows"] += 1
            seen["multi"] += len(row.example_ids) > 1
        kept = loss_in = loss_out = 0
        for i, ex in enumerate(examples):
            n = len(ex["input_ids"])
            labels = ex["labels"]
            loss_in += sum(1 for t in labels[1:] if t != IGNORE_INDEX)
            if n > max_len and overflow == "drop":
                assert i not in pieces
                continue
            end = min(n, max_len) if overflow == "truncate" else n
            want = [(off, min(end, off + max_len)) for off in range(0, end, max_len)]
            # a piece (or example) with no loss token in labels[1:] trains nothing: it is left out
            want = [(a, b) for a, b in want if any(t != IGNORE_INDEX for t in labels[a + 1 : b])]
            got = sorted(pieces.get(i, []))
            assert [(off, off + len(p)) for off, p, _, _ in got] == want
            for off, p_ids, p_lab, _ in got:
                assert p_ids == ex["input_ids"][off : off + len(p_ids)]  # every token once, in order
                assert p_lab[0] == IGNORE_INDEX  # the documented first-label rule
                assert p_lab[1:] == labels[off + 1 : off + len(p_ids)]  # every other label intact
                loss_out += sum(1 for t in p_lab[1:] if t != IGNORE_INDEX)
                kept += len(p_ids)
            seen["examples"] += bool(got)
            seen["no_loss"] += len(want) < len(range(0, end, max_len))
        assert kept == res.tokens
        assert (res.loss_tokens_in, res.loss_tokens_out) == (loss_in, loss_out)
        total = sum(len(e["input_ids"]) for e in examples)
        assert res.tokens_in == total
        assert res.tokens + res.truncated_tokens + res.dropped_tokens + res.no_loss_tokens == total
        assert res.loss_tokens_out + res.truncated_loss_tokens + res.dropped_loss_tokens + res.split_labels_masked \
            == res.loss_tokens_in
        assert res.packed_examples + res.empty_examples + res.dropped_examples + res.no_loss_examples == res.examples

    check()
    # Guard against passing vacuously: many rows really held several examples.
    assert seen["multi"] >= 100, seen
    assert seen["examples"] >= 500, seen
    assert seen["no_loss"] >= 20, seen  # examples or pieces left out for having no loss token really occurred
