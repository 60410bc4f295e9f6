"""One definition of "fits" for estimate, trace and fit (issue 21.5), printed with the verdict, and --check.

The rule, worked by hand from its stated figures (``memfit.estimate.fits``): on CUDA a step of peak P
reserves R = P + int(0.05 P) + 256 MiB + 512 MiB; it fits a GPU of G bytes with headroom H (default
5% of G) when R + H <= G.
"""

from __future__ import annotations

import json

import pytest

from memfit.advise import fit
from memfit.cli import main
from memfit.estimate import RunSpec, estimate_memory, resolve_model

GIB = 1024**3
MIB = 1024**2


def _reserved_by_hand(peak: int) -> int:
    return peak + int(peak * 0.05) + 256 * MIB + 512 * MIB


def test_estimate_and_fit_agree_on_the_issue_example() -> None:
    """llama-3.2-1b, batch 2 x seq 3520 on 24 GiB: estimate said "fits, 0.04 GiB spare" (reserved 23.96 GiB
    against the whole card) while fit said "the start does not fit" (peak 22.11 GiB against 90%)."""
    shape, spec = resolve_model("llama-3.2-1b"), RunSpec(batch=2, seq=3520, gpu="24GiB")
    est = estimate_memory(shape, spec)
    reserved = _reserved_by_hand(est.peak_bytes)
    assert est.reserved_bytes == reserved
    headroom = 24 * GIB - int(24 * GIB * 0.95)
    assert reserved <= 24 * GIB < reserved + headroom  # fits the bare card, not with the 5% kept free
    report = fit(shape, spec, search=False)
    assert est.fits is False and report.fits_initially is False
    assert est.verdict is not None and est.verdict.rule() == report.rule(report.initial_peak_bytes)


@pytest.mark.parametrize("seq", range(2048, 4097, 128))
def test_estimate_and_fit_agree_on_every_sequence_near_the_limit(seq: int) -> None:
    shape, spec = resolve_model("llama-3.2-1b"), RunSpec(batch=2, seq=seq, gpu="24GiB")
    est = estimate_memory(shape, spec)
    report = fit(shape, spec, search=False)
    by_hand = _reserved_by_hand(est.peak_bytes) + (24 * GIB - int(24 * GIB * 0.95)) <= 24 * GIB
    assert est.fits is report.fits_initially is by_hand


def test_cpu_judges_the_peak_and_headroom_is_a_flag() -> None:
    shape = resolve_model("llama-3.2-1b")
    spec = RunSpec(batch=1, seq=512, device="cpu", gpu="8GiB")
    est = estimate_memory(shape, spec)
    assert est.reserved_bytes == est.peak_bytes  # nothing reserved beyond the live tensors on CPU
    from memfit.estimate.fits import Headroom

    tight = estimate_memory(shape, spec, headroom=Headroom.parse(f"{8 * GIB - est.peak_bytes}B"))
    assert tight.fits is True and tight.spare_bytes == 0
    over = estimate_memory(shape, spec, headroom=Headroom.parse(f"{8 * GIB - est.peak_bytes + 1}B"))
    assert over.fits is False and over.spare_bytes == -1


def test_both_commands_print_the_rule_and_agree(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["llama-3.2-1b", "--gpu", "24GiB", "--batch", "2", "--seq", "3520"]
    assert main(["estimate", *args]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "does not fit: reserved 23.96 GiB + headroom 1.20 GiB (5% of the GPU) = 25.16 GiB > 24.00 GiB" in out
    assert main(["fit", *args, "--no-search"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "The start does not fit: reserved 23.96 GiB + headroom 1.20 GiB (5% of the GPU) = 25.16 GiB > 24.00" in out
    assert main(["estimate", *args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and d["verdict"]["need_bytes"] == d["reserved_bytes"] + d["verdict"]["headroom_bytes"]
    assert main(["fit", *args, "--no-search", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["fits_initially"] is False and f["initial"]["reserved_bytes"] == d["reserved_bytes"]
    assert f["initial"]["rule"] == d["verdict"]["rule"]
    # --headroom 0 judges reserved against the whole card, in both commands alike
    assert main(["estimate", *args, "--headroom", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    assert main(["fit", *args, "--headroom", "0", "--no-search", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits_initially"] is True


def test_check_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 21.8: 0 for an answer, 3 under --check when the run does not fit, 1 bad input, 2 usage."""
    tight = ["llama-3.2-1b", "--gpu", "24GiB", "--batch", "2", "--seq", "3520"]
    roomy = ["llama-3.2-1b", "--gpu", "80GB", "--batch", "1", "--seq", "512"]
    assert main(["estimate", *tight]) == 0  # an answer, even "does not fit"
    assert main(["estimate", *tight, "--check"]) == 3
    assert main(["estimate", *roomy, "--check"]) == 0
    capsys.readouterr()
    assert main(["estimate", *tight, "--check", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["fits"] is False  # the JSON answer is still given
    assert main(["fit", *tight, "--no-search", "--check"]) == 3
    assert main(["fit", *roomy, "--no-search", "--check"]) == 0
    capsys.readouterr()
    assert main(["estimate", "llama-3.2-1b", "--check"]) == 1  # --check needs --gpu
    assert "--gpu" in capsys.readouterr().err
    assert main(["estimate", "llama-3.2-1b", "--no-such-flag"]) == 2
