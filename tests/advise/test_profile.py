"""The data profile the advisor reads: truncation, the sequence that cuts nothing, packed rows by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from memfit.advise import DataProfile


def _profile() -> DataProfile:
    lengths = [100] * 90 + [900] * 10
    return DataProfile(source="x", lengths=tuple(lengths), p95=900, recommended_seq_len=960, batch=4, seq_len=1024,
                       waste_random=0.5, waste_packed=0.1, peak_len=900)


def test_truncation_and_the_sequence_that_cuts_nothing() -> None:
    prof = _profile()
    assert prof.truncated(512) == 10
    assert prof.truncated_share(512) == pytest.approx(0.1)
    assert prof.truncated(900) == 0  # an example of exactly seq tokens is not cut
    assert prof.no_cut_seq_len() == 960  # 900 rounded up to a multiple of 64
    assert math.isclose(prof.to_dict()["padding_waste"]["packed"], 0.1)


def test_packed_rows_by_hand() -> None:
    """At seq 1024 the mean is (90 x 100 + 10 x 900) / 100 = 180 tokens; packed rows are 90% full. 16 examples:
    16 x 180 / (1024 x 0.9) = 3.125 rows -> 3, which carry 3 x 1024 x 0.9 / 180 = 15.36 examples. Truncated at
    512 the mean is (9,000 + 5,120) / 100 = 141.2. A random micro-batch's padded row holds 180 / (1 - 0.5) = 360
    tokens per example."""
    prof = _profile()
    assert prof.mean_tokens(1024) == 180.0 and prof.mean_tokens(512) == pytest.approx(141.2)
    assert prof.packing_efficiency(1024) == pytest.approx(0.9)
    assert prof.packed_rows_exact(16, 1024) == pytest.approx(3.125) and prof.packed_rows(16, 1024) == 3
    assert prof.examples_in_rows(3, 1024) == pytest.approx(15.36)
    assert prof.padded_tokens_per_example(4, 1024) == pytest.approx(360.0)
    assert prof.packed_rows(1, 1024) == 1  # at least one row


@dataclass(frozen=True)
class _Waste:
    waste: float
    peak_len: int


@dataclass(frozen=True)
class _Padding:
    batch: int
    random: _Waste
    packed: _Waste


@dataclass(frozen=True)
class _Report:
    source: str
    lengths: list[int]
    p95: int
    recommended_seq_len: int
    seq_len: int
    padding: _Padding


def test_from_any_length_stats() -> None:
    """Any object with a lengths report's fields (the LengthStats protocol), lengths sorted on the way in."""
    report = _Report(source="d.jsonl", lengths=[300, 100, 200], p95=300, recommended_seq_len=320, seq_len=512,
                     padding=_Padding(batch=2, random=_Waste(0.25, 300), packed=_Waste(0.05, 512)))
    prof = DataProfile.from_length_report(report)
    assert prof.lengths == (100, 200, 300) and (prof.batch, prof.peak_len) == (2, 300)
    assert (prof.waste_random, prof.waste_packed) == (0.25, 0.05)
