"""Reps 1, 2, 4 and 5: real training steps (:mod:`memfit.measure`), composed: the batch sweep with its least-squares
line and the checkpointing trade (:func:`memfit.measure.sweep.run_sweep`), and single points
(:func:`memfit.measure.point.measure_point`) over depth and sequence length."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from memfit.estimate.category import Category
from memfit.estimate.constants import RULE_OF_THUMB_BYTES
from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec
from memfit.lab.setup import LabSetup
from memfit.lab.verdicts import (
    Rep,
    growth_exponent,
    judge_attention,
    judge_checkpointing,
    judge_depth,
    judge_linear_constant,
    quadratic_fit,
)
from memfit.measure.regression import least_squares
from memfit.measure.sweep import SweepResult, run_sweep
from memfit.units import BYTES_PER_MIB

Progress = Callable[[str], None]


def _mib(n: float) -> str:
    return f"{n / BYTES_PER_MIB:,.2f} MiB"


def _flags(setup: LabSetup, attention: str | None = None) -> str:
    s = setup.spec
    return (f"--method {s.method} --precision {s.precision} --attention {attention or s.attention} "
            f"--device {setup.device}")


def claimed_constant(spec: RunSpec) -> float:
    """The lesson's ~20 B (bf16 elements) scaled to ``spec``'s element size: 40 B in fp32.

    >>> claimed_constant(RunSpec(precision="fp32")), claimed_constant(RunSpec(precision="bf16"))
    (40.0, 20.0)
    """
    return RULE_OF_THUMB_BYTES * spec.weight_bytes / 2


def batch_sweep(setup: LabSetup) -> SweepResult:
    """Reps 1 and 2 share one sweep: batch 1, 2, 4 without and with per-layer checkpointing."""
    return run_sweep(setup.config, setup.spec, model=setup.model, batches=list(setup.batches),
                     seqs=[setup.spec.seq], checkpointing=["none", "full"], device=setup.device,
                     steps=setup.timed_steps, isolate=False)


def rep_batch(setup: LabSetup, sweep: SweepResult, seconds: float) -> Rep:
    """Rep 1: peak linear in batch (R^2, slope per sample); the constant in L*b*s*h*C from the activations
    alone (the tracker's ``activations`` category at the peak: the blocks' saved tensors, not the logits)."""
    shape = ModelShape.from_hf_config(setup.config)
    line = next(f for f in sweep.peak_vs_batch if f.checkpointing == "none")
    runs = sorted((r for r in sweep.runs if r.checkpointing == "none" and r.fits), key=lambda r: r.batch)
    acts = [int(r.by_category.get(Category.ACTIVATIONS, 0)) for r in runs]
    slope, _, r2_acts = least_squares([r.batch for r in runs], acts)
    constant = slope / (shape.n_layers * setup.spec.seq * shape.hidden)
    claimed = claimed_constant(setup.spec)
    verdict = judge_linear_constant(line.r2, constant, claimed)
    peaks = ", ".join(f"b{r.batch} {_mib(r.peak_bytes or 0)}" for r in runs)
    measured = (f"peak {peaks}: R^2 = {line.r2:.4f}, {_mib(line.slope_bytes_per_sample)} per sample; the blocks' "
                f"activations alone {constant:.1f} B per layer x token x hidden (R^2 {r2_acts:.4f}) for "
                f"{setup.spec.precision} {setup.spec.attention}, L={shape.n_layers}, s={setup.spec.seq}, "
                f"h={shape.hidden}")
    return Rep(number=1, title="peak memory is linear in batch", verdict=verdict, seconds=seconds,
               claim=f"activations ~ L*b*s*h*{RULE_OF_THUMB_BYTES} bytes: linear in batch, constant ~"
                     f"{RULE_OF_THUMB_BYTES} for a bf16 block (~{claimed:g} in {setup.spec.precision})",
               measured=measured,
               command=f"memfit measure {setup.model_arg} --batch {','.join(map(str, setup.batches))} "
                       f"--seq {setup.spec.seq} {_flags(setup)}",
               figures={"peaks": {r.batch: r.peak_bytes for r in runs}, "r2": line.r2,
                        "slope_bytes_per_sample": line.slope_bytes_per_sample,
                        "activations": {r.batch: a for r, a in zip(runs, acts, strict=True)},
                        "constant": constant, "constant_claimed": claimed,
                        "whole_peak_constant": line.bytes_per_layer_token_hidden})


def rep_checkpointing(setup: LabSetup, sweep: SweepResult, seconds: float) -> Rep:
    """Rep 2: bytes saved and seconds per step lost (the median of the timed steps, warm-up excluded) at the
    largest batch, the % slower against 20-40%, and measure's advice on the trade."""
    trade = max(sweep.trades, key=lambda t: t.batch)
    slower = trade.slowdown - 1
    verdict = judge_checkpointing(trade.fraction_saved, trade.slowdown)
    measured = (f"at batch {trade.batch}: saves {_mib(trade.saved_bytes)} ({trade.fraction_saved:.0%} of the peak) "
                f"for {trade.seconds_with - trade.seconds_without:+.3f} s per step ({trade.seconds_without:.3f} -> "
                f"{trade.seconds_with:.3f} s, median of {setup.timed_steps} steps after 1 warm-up): "
                f"{slower:.0%} slower; advice: {trade.advice}")
    return Rep(number=2, title="checkpointing trades time for memory", verdict=verdict, seconds=seconds,
               claim="per-layer checkpointing costs about one extra forward: commonly 20 to 40% slower per step, "
                     "and is almost always worth it",
               measured=measured,
               command=f"memfit measure {setup.model_arg} --batch {trade.batch} --seq {setup.spec.seq} "
                       f"--checkpointing both --steps {setup.timed_steps} {_flags(setup)}",
               figures={**trade.to_dict(), "slower": slower, "claimed_slower": [0.2, 0.4]})


def _activations(setup: LabSetup, layers: int, checkpointing: str) -> int:
    from memfit.measure.point import measure_point

    spec = setup.spec.with_(batch=setup.depth_batch, seq=setup.depth_seq, checkpointing=checkpointing)
    p = measure_point(setup.with_layers(layers), spec, device=setup.device, steps=0, warmup=0)
    # the most activation bytes alive at once over the recorded steps (the timeline, by category): with
    # checkpointing the step's peak comes late in the backward, when most checkpoints are already freed, so the
    # activations at the step's peak understate what checkpointing stores
    over_step = [int(t.by_category.get(Category.ACTIVATIONS, 0)) for t in p.timeline]
    return max([*over_step, int(p.by_category.get(Category.ACTIVATIONS, 0))])


def rep_depth(setup: LabSetup, progress: Progress | None = None) -> Rep:
    """Rep 4: the most activation bytes alive at once (the tracker's category over the step's timeline) against
    depth, without checkpointing, per layer and with sqrt(L) segments; the growth exponents and the ratio none /
    sqrt at the deepest point."""
    t0 = time.perf_counter()
    modes = ("none", "full", "sqrt")
    table: dict[str, dict[int, int]] = {m: {} for m in modes}
    for layers in setup.depths:
        for m in modes:
            if progress:
                progress(f"rep 4: {layers} layers, checkpointing {m}")
            table[m][layers] = _activations(setup, layers, m)
    deepest = max(setup.depths)
    ex = {m: growth_exponent(list(setup.depths), [table[m][d] for d in setup.depths]) for m in modes}
    ratio_sqrt = table["none"][deepest] / table["sqrt"][deepest]
    ratio_full = table["none"][deepest] / table["full"][deepest]
    verdict = judge_depth(ex["none"], ex["sqrt"], ratio_sqrt)
    measured = (f"peak activations grow as depth^{ex['none']:.2f} without checkpointing, depth^"
                f"{ex['sqrt']:.2f} with sqrt(L) segments, depth^{ex['full']:.2f} per layer; at {deepest} layers "
                f"none / sqrt = {ratio_sqrt:.1f}x ({_mib(table['none'][deepest])} / {_mib(table['sqrt'][deepest])}), "
                f"none / per-layer = {ratio_full:.1f}x")
    return Rep(number=4, title="checkpointing: linear in depth becomes square root", verdict=verdict,
               seconds=time.perf_counter() - t0,
               claim="storage drops from linear in depth to roughly its square root (Chen et al.); the gap is "
                     "about five times at 24 layers",
               measured=measured,
               command=" && ".join(f"memfit measure {setup.model_arg} --batch {setup.depth_batch} --seq "
                                   f"{setup.depth_seq} --checkpointing {m} {_flags(setup)}" for m in ("none", "sqrt"))
               + f"  (at each depth: num_hidden_layers {', '.join(map(str, setup.depths))})",
               figures={"depths": list(setup.depths), "activations": table, "exponents": ex,
                        "ratio_sqrt": ratio_sqrt, "ratio_full": ratio_full, "claimed_ratio": 5.0,
                        "sqrt_of_depth": math.sqrt(deepest)})


def rep_attention(setup: LabSetup, progress: Progress | None = None) -> Rep:
    """Rep 5: peak over a sequence sweep with eager and sdpa attention; the least-squares quadratic of each and
    its s^2 term's share of the peak at the longest sequence."""
    from memfit.measure.point import measure_point

    t0 = time.perf_counter()
    peaks: dict[str, dict[int, int]] = {}
    fits: dict[str, dict[str, float]] = {}
    longest = max(setup.seqs)
    for kernel in ("eager", "sdpa"):
        peaks[kernel] = {}
        for s in setup.seqs:
            if progress:
                progress(f"rep 5: {kernel} attention, seq {s}")
            spec = setup.spec.with_(attention=kernel, seq=s, batch=1)
            p = measure_point(setup.config, spec, device=setup.device, steps=0, warmup=0)
            peaks[kernel][s] = int(p.peak_bytes or 0)
        a, b, c = quadratic_fit(list(setup.seqs), [peaks[kernel][s] for s in setup.seqs])
        fits[kernel] = {"a": a, "b": b, "c": c, "share": a * longest ** 2 / peaks[kernel][longest]}
    verdict = judge_attention(fits["eager"]["share"], fits["sdpa"]["share"])
    measured = (f"peak = a*s^2 + b*s + c over s = {', '.join(map(str, setup.seqs))}: eager a = "
                f"{fits['eager']['a']:,.1f} B/token^2 ({fits['eager']['share']:.0%} of the peak at s={longest}), "
                f"sdpa a = {fits['sdpa']['a']:,.1f} B/token^2 ({fits['sdpa']['share']:.1%})")
    return Rep(number=5, title="attention scores are quadratic unless the kernel is memory-efficient",
               verdict=verdict, seconds=time.perf_counter() - t0,
               claim="linear in sequence length for the stored activations, quadratic for the attention scores "
                     "unless a memory-efficient kernel is used",
               measured=measured,
               command=" && ".join(f"memfit measure {setup.model_arg} --batch 1 --seq "
                                   f"{','.join(map(str, setup.seqs))} {_flags(setup, attention=k)}"
                                   for k in ("eager", "sdpa")),
               figures={"seqs": list(setup.seqs), "peaks": peaks, "fits": fits})
