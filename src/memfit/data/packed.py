"""What packing produces and takes: :class:`PackedRow` (one row, lists), :class:`RowArrays` (the same row as
numpy arrays, what the writers take), :class:`PackResult` (the rows and the accounting of every example, token
and loss token, in and out), and the example protocol. The packing itself is :mod:`memfit.data.pack`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from memfit.estimate.constants import IGNORE_INDEX

Overflow = Literal["error", "truncate", "drop", "split"]
OVERFLOW_CHOICES: tuple[str, ...] = ("error", "truncate", "drop", "split")

__all__ = ["OVERFLOW_CHOICES", "Overflow", "PackResult", "PackedRow", "RowArrays", "Tokenized", "example_fields",
           "loss_tokens"]


class Tokenized(Protocol):
    """Anything with ``input_ids`` and ``labels`` (memfit's ``TokenizedExample``; a dict works too)."""

    input_ids: Sequence[int]
    labels: Sequence[int]


@dataclass(frozen=True, kw_only=True, slots=True)
class PackedRow:
    """One packed row. All per-token lists have the same length (the row's real tokens, no padding).

    ``seq_lens[j]`` tokens of example ``example_ids[j]``, starting at its token ``example_offsets[j]`` (0 unless
    the example was split), sit at ``cu_seqlens[j]:cu_seqlens[j + 1]``; ``position_ids`` restart at 0 there and
    ``labels[cu_seqlens[j]]`` is -100.
    """

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int]
    seq_lens: list[int]
    cu_seqlens: list[int]
    example_ids: list[int]
    example_offsets: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    def to_dict(self) -> dict[str, list[int]]:
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "seq_lens": self.seq_lens,
            "cu_seqlens": self.cu_seqlens,
            "example_ids": self.example_ids,
            "example_offsets": self.example_offsets,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PackResult:
    """Packed rows and the accounting of every example, token and loss token, in and out.

    ``tokens`` are the real tokens in the rows. ``efficiency = tokens / (rows * max_len)``; the lower bound on
    rows is ``ceil(tokens / max_len)`` and ``bound_ratio = lower_bound_rows / rows`` (1.0 = optimal).

    Loss tokens are the tokens a causal LM trains on (``labels[1:] != -100``: the shift drops label 0).
    ``loss_tokens_in`` counts them in the whole examples as given, alone; ``loss_tokens_out`` in the rows.
    Nothing goes missing between them: every example, token and loss token that is not in the rows is counted
    under the reason it left (:meth:`accounting`)::

        examples     = packed_examples + empty_examples + dropped_examples + no_loss_examples
        tokens_in    = tokens + truncated_tokens + dropped_tokens + no_loss_tokens
        loss_tokens_in = loss_tokens_out + truncated_loss_tokens + dropped_loss_tokens + split_labels_masked

    ``truncated_*``: ``--overflow truncate`` cut the tail past ``max_len``; ``dropped_*``: ``--overflow drop``
    left out an example longer than ``max_len``; ``split_labels_masked``: a split piece's first label, which
    the whole example trained on and the piece cannot (its first label becomes -100); ``no_loss_*``: an
    example (or split piece) with no loss token left (a prompt longer than ``max_len`` that truncation
    leaves without its completion, a piece of a split prompt, an example whose labels are all -100) trains
    nothing and is left out rather than packed as dead weight. ``no_loss_examples`` counts examples left with
    nothing in the rows for that reason, ``no_loss_pieces`` the split pieces left out.

    ``rows`` holds the rows of :func:`pack`; :func:`pack_stream` writes them out as it builds them and leaves
    ``rows`` empty (``n_rows`` counts them either way).
    """

    rows: tuple[PackedRow, ...]
    n_rows: int
    max_len: int
    overflow: str
    examples: int
    empty_examples: int
    packed_examples: int
    tokens_in: int
    tokens: int
    truncated_examples: int
    truncated_tokens: int
    truncated_loss_tokens: int
    dropped_examples: int
    dropped_tokens: int
    dropped_loss_tokens: int
    split_examples: int
    split_pieces: int
    split_labels_masked: int
    no_loss_examples: int
    no_loss_pieces: int
    no_loss_tokens: int
    loss_tokens_in: int
    loss_tokens_out: int

    @property
    def lower_bound_rows(self) -> int:
        return math.ceil(self.tokens / self.max_len)

    @property
    def efficiency(self) -> float:
        return self.tokens / (self.n_rows * self.max_len) if self.n_rows else 0.0

    @property
    def bound_ratio(self) -> float:
        return self.lower_bound_rows / self.n_rows if self.n_rows else 1.0

    @property
    def padding_tokens(self) -> int:
        """Padding if every row were padded to ``max_len``."""
        return self.n_rows * self.max_len - self.tokens

    @property
    def examples_per_row(self) -> float:
        return self.packed_examples / self.n_rows if self.n_rows else 0.0

    def accounting(self) -> dict[str, dict[str, int]]:
        """Examples, tokens and loss tokens in, out, and each reason for the difference (class docstring).

        ``in == out + the sum of the other entries`` for each of the three.
        """
        return {
            "examples": {"in": self.examples, "out": self.packed_examples, "empty": self.empty_examples,
                         "dropped_too_long": self.dropped_examples, "no_loss_token": self.no_loss_examples},
            "tokens": {"in": self.tokens_in, "out": self.tokens, "truncated": self.truncated_tokens,
                       "dropped_too_long": self.dropped_tokens, "no_loss_token": self.no_loss_tokens},
            "loss_tokens": {"in": self.loss_tokens_in, "out": self.loss_tokens_out,
                            "truncated": self.truncated_loss_tokens, "dropped_too_long": self.dropped_loss_tokens,
                            "split_first_label_masked": self.split_labels_masked},
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.n_rows,
            "max_len": self.max_len,
            "overflow": self.overflow,
            "examples": self.examples,
            "empty_examples": self.empty_examples,
            "packed_examples": self.packed_examples,
            "examples_per_row": self.examples_per_row,
            "tokens_in": self.tokens_in,
            "tokens": self.tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "lower_bound_rows": self.lower_bound_rows,
            "bound_ratio": self.bound_ratio,
            "truncated_examples": self.truncated_examples,
            "truncated_tokens": self.truncated_tokens,
            "truncated_loss_tokens": self.truncated_loss_tokens,
            "dropped_examples": self.dropped_examples,
            "dropped_tokens": self.dropped_tokens,
            "dropped_loss_tokens": self.dropped_loss_tokens,
            "split_examples": self.split_examples,
            "split_pieces": self.split_pieces,
            "split_labels_masked": self.split_labels_masked,
            "no_loss_examples": self.no_loss_examples,
            "no_loss_pieces": self.no_loss_pieces,
            "no_loss_tokens": self.no_loss_tokens,
            "loss_tokens_in": self.loss_tokens_in,
            "loss_tokens_out": self.loss_tokens_out,
            "accounting": self.accounting(),
        }

    def breakdown(self) -> dict[str, int]:
        """Where every input token went: ``packed + truncated + dropped + no_loss == input``."""
        return {
            "tokens/input": self.tokens_in,
            "tokens/packed": self.tokens,
            "tokens/truncated": self.truncated_tokens,
            "tokens/dropped": self.dropped_tokens,
            "tokens/no_loss": self.no_loss_tokens,
            "loss_tokens/input": self.loss_tokens_in,
            "loss_tokens/packed": self.loss_tokens_out,
            "loss_tokens/truncated": self.truncated_loss_tokens,
            "loss_tokens/dropped": self.dropped_loss_tokens,
            "loss_tokens/split_first_label_masked": self.split_labels_masked,
            "slots/rows_x_max_len": self.n_rows * self.max_len,
            "slots/padding": self.padding_tokens,
        }


def example_fields(example: Tokenized | Mapping[str, Sequence[int]]) -> tuple[Sequence[int], Sequence[int]]:
    """``(input_ids, labels)`` of a tokenized example object or dict."""
    if isinstance(example, Mapping):
        return example["input_ids"], example["labels"]
    return example.input_ids, example.labels


def loss_tokens(labels: Sequence[int]) -> int:
    """Tokens a causal LM trains on for one sequence: ``labels[1:] != -100`` (the shift drops label 0)."""
    return sum(1 for t in labels[1:] if t != IGNORE_INDEX)


@dataclass(frozen=True, slots=True)
class RowArrays:
    """One packed row as numpy arrays (what a writer turns into a line or a record); the same fields as
    :class:`PackedRow`."""

    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    seq_lens: np.ndarray
    cu_seqlens: np.ndarray
    example_ids: np.ndarray
    example_offsets: np.ndarray

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in PackedRow.__slots__}

    def to_packed_row(self) -> PackedRow:
        return PackedRow(**{name: values.tolist() for name, values in self.columns().items()})
