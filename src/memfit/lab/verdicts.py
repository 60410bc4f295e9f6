"""The lab's verdicts: each claim of the lesson beside what was measured, judged by one rule per claim. Pure
Python (no torch): the rules are tested on hand-worked inputs.

=====================================  ====================================================================
verdict                                when
=====================================  ====================================================================
``holds``                              the claim's shape holds and its constant is within the tolerance
``holds with a different constant``    the shape holds (linear, sublinear, a saving), the constant does not
``does not hold here``                 the shape itself fails on this machine, model and kernel
``not run``                            the rep needs what this run was not given (a data set, a tokenizer)
=====================================  ====================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    HOLDS = "holds"
    DIFFERENT_CONSTANT = "holds with a different constant"
    DOES_NOT_HOLD = "does not hold here"
    NOT_RUN = "not run"


@dataclass(frozen=True, kw_only=True, slots=True)
class Rep:
    """One rep: the lesson's claim, what was measured (a sentence and its figures), the verdict, the command
    that reproduces the measurement, and how long the rep took."""

    number: int
    title: str
    claim: str
    measured: str
    verdict: Verdict
    command: str
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    how: str = "measured"  # measured (real steps) | traced (real model code on fake tensors) | tokenised

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "title": self.title, "claim": self.claim, "measured": self.measured,
                "verdict": str(self.verdict), "command": self.command, "figures": self.figures,
                "seconds": self.seconds, "how": self.how}


def within(measured: float, claimed: float, rel_tol: float) -> bool:
    """``measured`` within ``rel_tol`` of ``claimed`` (relative to the claim).

    >>> within(24.0, 20.0, 0.25), within(26.0, 20.0, 0.25)
    (True, False)
    """
    return abs(measured - claimed) <= rel_tol * abs(claimed)


LINEAR_R2 = 0.99  # a line explains 99% of the variance: "linear"
CONSTANT_TOL = 0.25  # a constant within 25% of the lesson's: "holds"


def judge_linear_constant(r2: float, constant: float, claimed: float = 20.0) -> Verdict:
    """Rep 1: linear in batch (R^2 >= 0.99) with the lesson's ~20 B per layer x token x hidden (+-25%).

    >>> judge_linear_constant(0.9999, 22.0), judge_linear_constant(0.9999, 36.0), judge_linear_constant(0.8, 20.0)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DIFFERENT_CONSTANT: 'holds with a different constant'>, \
<Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    if r2 < LINEAR_R2:
        return Verdict.DOES_NOT_HOLD
    return Verdict.HOLDS if within(constant, claimed, CONSTANT_TOL) else Verdict.DIFFERENT_CONSTANT


def judge_checkpointing(saved_fraction: float, slowdown: float, low: float = 0.20, high: float = 0.40) -> Verdict:
    """Rep 2: checkpointing saves memory (at least 5% of the peak) for 20 to 40% more time per step.

    >>> judge_checkpointing(0.5, 1.3), judge_checkpointing(0.5, 1.6), judge_checkpointing(0.01, 1.3)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DIFFERENT_CONSTANT: 'holds with a different constant'>, \
<Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    if saved_fraction < 0.05 or not math.isfinite(slowdown):
        return Verdict.DOES_NOT_HOLD
    return Verdict.HOLDS if 1 + low <= slowdown <= 1 + high else Verdict.DIFFERENT_CONSTANT


def judge_p95(p95: int, longest: int, truncated_share: float) -> Verdict:
    """Rep 3: the 95th percentile, not the maximum, is the sequence length: it is shorter than the longest
    example and truncates at most 5% of the examples (nearest rank: at most 5% lie above it).

    >>> judge_p95(337, 572, 0.049), judge_p95(572, 572, 0.0), judge_p95(300, 572, 0.2)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DOES_NOT_HOLD: 'does not hold here'>, \
<Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    return Verdict.HOLDS if p95 < longest and truncated_share <= 0.05 else Verdict.DOES_NOT_HOLD


def growth_exponent(depths: list[int], values: list[int]) -> float:
    """The least-squares slope of log(value) against log(depth): 1 for linear growth, 0.5 for a square root.

    >>> round(growth_exponent([2, 8, 32], [4, 16, 64]), 3), round(growth_exponent([4, 16, 64], [2, 4, 8]), 3)
    (1.0, 0.5)
    """
    xs = [math.log(d) for d in depths]
    ys = [math.log(v) for v in values]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def judge_depth(none_exponent: float, sqrt_exponent: float, ratio: float, claimed: float = 5.0) -> Verdict:
    """Rep 4: without checkpointing activation memory grows linearly with depth (exponent >= 0.8), with sqrt
    segments sublinearly (exponent <= 0.75), and the gap at 24 layers is "about five times" (+-30%).

    >>> judge_depth(0.98, 0.55, 4.6), judge_depth(0.98, 0.55, 9.0), judge_depth(0.98, 0.95, 1.2)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DIFFERENT_CONSTANT: 'holds with a different constant'>, \
<Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    if none_exponent < 0.8 or sqrt_exponent > 0.75 or ratio <= 1:
        return Verdict.DOES_NOT_HOLD
    return Verdict.HOLDS if within(ratio, claimed, 0.30) else Verdict.DIFFERENT_CONSTANT


def quadratic_fit(xs: list[int], ys: list[int]) -> tuple[float, float, float]:
    """Least squares ``y = a x^2 + b x + c``: ``(a, b, c)`` (the normal equations, solved by Cramer's rule).

    >>> [round(v, 6) for v in quadratic_fit([1, 2, 3, 4], [6, 11, 18, 27])]
    [1.0, 2.0, 3.0]
    """
    s = [sum(x ** k for x in xs) for k in range(5)]
    t = [sum(y * x ** k for x, y in zip(xs, ys, strict=True)) for k in range(3)]
    m = [[s[4], s[3], s[2]], [s[3], s[2], s[1]], [s[2], s[1], s[0]]]
    rhs = [t[2], t[1], t[0]]

    def det(a: list[list[float]]) -> float:
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))

    d = det(m)
    out = []
    for col in range(3):
        mc = [[rhs[r] if c == col else m[r][c] for c in range(3)] for r in range(3)]
        out.append(det(mc) / d)
    return out[0], out[1], out[2]


def judge_attention(eager_share: float, sdpa_share: float) -> Verdict:
    """Rep 5: the quadratic term's share of the peak at the longest sequence: eager materialises the scores
    (share >= 5%), a memory-efficient kernel does not (share < 1%).

    >>> judge_attention(0.3, 0.001), judge_attention(0.3, 0.2), judge_attention(0.01, 0.0)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DOES_NOT_HOLD: 'does not hold here'>, \
<Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    return Verdict.HOLDS if eager_share >= 0.05 and abs(sdpa_share) < 0.01 else Verdict.DOES_NOT_HOLD


def judge_rank(saved_bytes: int, claimed_bytes: int, activation_bytes: int) -> Verdict:
    """Rep 6: halving rank saves ``claimed_bytes`` (32 MB for 4M parameters, +-25%), and that is small beside
    the activations (less than a tenth of them): "nearly the least effective knob".

    >>> judge_rank(32_000_000, 32_000_000, 8_000_000_000), judge_rank(48_000_000, 32_000_000, 8_000_000_000)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DIFFERENT_CONSTANT: 'holds with a different constant'>)
    >>> judge_rank(32_000_000, 32_000_000, 100_000_000)
    <Verdict.DOES_NOT_HOLD: 'does not hold here'>
    """
    if saved_bytes <= 0 or saved_bytes * 10 > activation_bytes:
        return Verdict.DOES_NOT_HOLD
    return Verdict.HOLDS if within(saved_bytes, claimed_bytes, CONSTANT_TOL) else Verdict.DIFFERENT_CONSTANT


def judge_worked_example(rule_bytes: int, activation_bytes: int, weights_bytes: int, claimed_weights: int,
                         adapter_state_bytes: int) -> Verdict:
    """Rep 7: the activations dominate (more than the frozen weights, the adapter state tens of MB: under
    100 MB); ``holds`` when the rule's 8.0 GB and the weights' 2.2 GB are each within 25% of what the engines
    give, else a different constant.

    >>> judge_worked_example(8_053_063_680, 8_500_000_000, 2_200_000_000, 2_200_000_000, 40_000_000)
    <Verdict.HOLDS: 'holds'>
    >>> judge_worked_example(8_053_063_680, 20_000_000_000, 2_200_000_000, 2_200_000_000, 40_000_000)
    <Verdict.DIFFERENT_CONSTANT: 'holds with a different constant'>
    """
    if activation_bytes <= weights_bytes or adapter_state_bytes >= 100_000_000:
        return Verdict.DOES_NOT_HOLD
    if within(activation_bytes, rule_bytes, CONSTANT_TOL) and within(weights_bytes, claimed_weights, CONSTANT_TOL):
        return Verdict.HOLDS
    return Verdict.DIFFERENT_CONSTANT


def judge_use_cache(warned: bool, held_with_checkpointing: int) -> Verdict:
    """Rep 8: leaving use_cache on with checkpointing "produces warnings at best and wasted memory at worst":
    holds when transformers warns (or the cache holds bytes); does not hold when neither happens.

    >>> judge_use_cache(True, 0), judge_use_cache(False, 0)
    (<Verdict.HOLDS: 'holds'>, <Verdict.DOES_NOT_HOLD: 'does not hold here'>)
    """
    return Verdict.HOLDS if warned or held_with_checkpointing > 0 else Verdict.DOES_NOT_HOLD
