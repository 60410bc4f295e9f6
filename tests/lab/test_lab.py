"""memfit lab (:mod:`memfit.lab`): the verdict rules on hand-worked inputs, the lab's structure on a tiny model
(every rep run for real, seconds), and one slow end-to-end run of the command."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from memfit.estimate import RunSpec, lookup
from memfit.estimate.category import Category
from memfit.lab.reps_other import adapter_rank
from memfit.lab.setup import cpu_setup
from memfit.lab.verdicts import Verdict, growth_exponent, quadratic_fit
from memfit.measure.regression import checkpointing_trades, peak_vs_batch
from memfit.measure.result import PointResult
from memfit.measure.sweep import SweepResult


def _sweep(activations_per_sample: int, seconds: tuple[float, float], peaks_with: int) -> SweepResult:
    """Hand-made points on the CPU lab model (L=4, s=256, h=256): peak = 20,000,000 + 12,000,000 b without
    checkpointing (activations ``activations_per_sample`` x b), ``peaks_with`` at b4 with."""
    setup = cpu_setup()
    runs = [PointResult(batch=b, seq=256, checkpointing="none", device="cpu", fits=True,
                        peak_bytes=20_000_000 + 12_000_000 * b, step_seconds=seconds[0],
                        by_category={Category.ACTIVATIONS: activations_per_sample * b}) for b in (1, 2, 4)]
    runs.append(PointResult(batch=4, seq=256, checkpointing="full", device="cpu", fits=True, peak_bytes=peaks_with,
                            step_seconds=seconds[1]))
    from memfit.estimate import ModelShape

    shape = ModelShape.from_hf_config(setup.config)
    return SweepResult(model=setup.model, spec=setup.spec, device="cpu", runs=tuple(runs),
                       peak_vs_batch=tuple(peak_vs_batch(runs, shape)), trades=tuple(checkpointing_trades(runs)))


def test_rep1_and_rep2_verdicts_on_hand_worked_points() -> None:
    """Rep 1: activations 10,485,760 B per sample / (L 4 x s 256 x h 256 = 262,144) = 40.0 B, the lesson's 20 B
    in bf16 scaled to fp32's 4-byte elements: holds; 15,728,640 B per sample = 60.0 B: a different constant.
    Rep 2: 68,000,000 B -> 40,800,000 B saves 40%; 1.0 -> 1.3 s is 30% slower: holds; 1.0 -> 2.0 s: a different
    constant (the trade still saves, at twice the time)."""
    from memfit.lab.reps_memory import rep_batch, rep_checkpointing

    setup = cpu_setup()
    one = rep_batch(setup, _sweep(10_485_760, (1.0, 1.3), 40_800_000), 0.0)
    assert one.figures["constant"] == pytest.approx(40.0) and one.figures["constant_claimed"] == 40.0
    assert one.figures["r2"] == pytest.approx(1.0) and one.verdict is Verdict.HOLDS
    assert rep_batch(setup, _sweep(15_728_640, (1.0, 1.3), 40_800_000), 0.0).verdict is Verdict.DIFFERENT_CONSTANT
    two = rep_checkpointing(setup, _sweep(10_485_760, (1.0, 1.3), 40_800_000), 0.0)
    assert two.figures["fraction_saved"] == pytest.approx(0.4) and two.figures["slower"] == pytest.approx(0.3)
    assert two.verdict is Verdict.HOLDS and "--checkpointing both" in two.command
    slow = rep_checkpointing(setup, _sweep(10_485_760, (1.0, 2.0), 40_800_000), 0.0)
    assert slow.verdict is Verdict.DIFFERENT_CONSTANT


def test_depth_rule_on_hand_worked_growth() -> None:
    """Without checkpointing 24 blocks of A: A*L (exponent 1); sqrt segments keep ceil(L/k) inputs of x plus one
    segment of k blocks: with A = 20x, L = 4, 16 (k = 2, 4): 2x + 40x = 42x, 4x + 80x = 84x, exponent
    log(2)/log(4) = 0.5; the ratio at 16 layers 320x / 84x = 3.81 is within 30% of five: holds."""
    from memfit.lab.verdicts import judge_depth

    none, sqrt = [80, 320], [42, 84]
    assert growth_exponent([4, 16], none) == pytest.approx(1.0)
    assert growth_exponent([4, 16], sqrt) == pytest.approx(0.5)
    assert judge_depth(1.0, 0.5, 320 / 84) is Verdict.HOLDS


def test_quadratic_term_of_attention_scores() -> None:
    """peak = 3 s^2 + 100 s + 5,000 at s = 128, 256, 512: the fit gives a = 3 back; s^2's share at 512 is
    786,432 / 837,632 = 93.9%."""
    xs = [128, 256, 512]
    a, b, c = quadratic_fit(xs, [3 * s * s + 100 * s + 5_000 for s in xs])
    assert (a, b, c) == pytest.approx((3.0, 100.0, 5_000.0))


def test_adapter_rank_for_the_lesson_model() -> None:
    """lesson-24x2048, default targets q_proj, v_proj: per rank per layer 2048 + 2048 (q) + 2048 + 256 (v, 4 kv
    heads of 64) = 6,400; x 24 = 153,600; 4,000,000 / 153,600 = 26.04 -> rank 26 (3,993,600 parameters)."""
    shape = lookup("lesson-24x2048").shape
    assert adapter_rank(shape, RunSpec(method="lora")) == 26


def test_cpu_setup_scales_a_catalogue_model_and_refuses_a_path() -> None:
    from memfit.errors import MemfitError

    s = cpu_setup("Llama-3.2-1B")
    assert s.config["hidden_size"] == 256 and s.config["vocab_size"] == 2048 and s.model == "llama-3.2-1b"
    assert s.with_layers(12)["num_hidden_layers"] == 12 and s.config["num_hidden_layers"] == 4
    with pytest.raises(MemfitError, match="--device cuda"):
        cpu_setup("/tmp/config.json")


def _tiny_setup():  # type: ignore[no-untyped-def]
    from memfit.runtime.build import tiny_config

    s = cpu_setup()
    return replace(s, config=tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, vocab=128),
                   spec=s.spec.with_(seq=32), seqs=(32, 64, 128), depths=(2, 4), depth_seq=32, timed_steps=1)


@pytest.mark.slow
def test_the_lab_runs_each_measured_rep_on_a_tiny_model(tmp_path: Path, shared_dir: Path) -> None:
    """Reps 1, 2, 3, 4, 5 and 8 for real on a 2-layer Llama (hidden 64): each has its claim, a measured sentence, a
    verdict, a command; the report renders it (table, markdown, HTML). (Reps 6 and 7 trace the real 24 x 2048
    model: the slow end-to-end test.)"""
    pytest.importorskip("torch")
    from memfit.lab import run_lab
    from memfit.report.html import render_page
    from memfit.report.lab import lab_markdown, lab_table

    data, tok = shared_dir / "data" / "gsm8k" / "test.jsonl", shared_dir / "tokenizers" / "llama2"
    result = run_lab(_tiny_setup(), data=data, tokenizer=tok, fields={"prompt": "question", "completion": "answer"},
                     reps=(1, 2, 3, 4, 5, 8))
    d = json.loads(json.dumps(result.to_dict()))
    assert [r["number"] for r in d["reps"]] == [1, 2, 3, 4, 5, 8]
    for r in d["reps"]:
        assert r["claim"] and r["measured"] and r["command"].startswith(("memfit ", "python ")), r
        assert r["verdict"] in {v.value for v in Verdict}, r
    by = {r["number"]: r for r in d["reps"]}
    assert by[1]["figures"]["r2"] > 0.99  # activations are linear in batch, on any model
    assert set(by[4]["figures"]["activations"]) == {"none", "full", "sqrt"}
    assert by[3]["figures"]["p95"] < by[3]["figures"]["max"] and by[3]["verdict"] == "holds"
    assert by[8]["verdict"] == "holds" and by[8]["figures"]["held_with_checkpointing"] == 0
    assert by[8]["figures"]["held_without"] > 0  # without checkpointing the training step returns a real cache
    assert "| 4 |" in lab_markdown(d) and lab_table(d).row_count == 6
    html = render_page(d)
    assert html.count("<section") == 6 and "Rep 4: checkpointing" in html and "<svg" in html


@pytest.mark.slow
def test_memfit_lab_end_to_end(tmp_path: Path) -> None:
    """The command as a user runs it, on the bundled data, with the traced reps (6 and 7: the real 24 x 2048
    model) and one measured rep: one JSON object, an HTML page, the scaled model's config written."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from memfit.cli import app

    out = tmp_path / "lab.html"
    cfg = tmp_path / "lab-model.json"
    res = CliRunner().invoke(app, ["lab", "--reps", "3,6,7,8", "--json", "--html", str(out), "--model-out", str(cfg)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert [r["number"] for r in d["reps"]] == [3, 6, 7, 8] and d["scaled"] is True
    by = {r["number"]: r for r in d["reps"]}
    assert by[7]["figures"]["rule_bytes"] == 24 * 4 * 2048 * 2048 * 20  # 8,053,063,680 B = 8.05 GB
    assert by[6]["figures"]["rank"] == 26 and by[6]["figures"]["saved_bytes"] > 0
    # rep 7 compares one quantity, the activations at the step's peak, from two engines (the estimate's formulas,
    # the real model code on fake tensors): they agree to 1% (it printed the forward's total saved, 16.00 GB,
    # beside the trace's 14.95 GB at the peak)
    seven = by[7]["figures"]
    assert seven["estimate_activations"] == pytest.approx(seven["trace_activations"], rel=0.01)
    assert seven["estimate_saved_by_forward"] > seven["estimate_activations"]
    assert out.read_text().count("<section") == 4 and json.loads(cfg.read_text())["hidden_size"] == 256


def test_lab_structure_on_a_tiny_model(tmp_path: Path, shared_dir: Path) -> None:
    """The fast structure check: rep 3 on three hand-counted examples, rep 3 without data (not run, naming the
    flags), rep 8 for real on a 2-layer Llama; the JSON keys the page and the table read, and the page is chosen
    from them. Three GSM8K-like examples of 10, 20 and 400 words: p95 (nearest rank: the 3rd of 3) is the longest,
    so the p95 truncates nothing and is not shorter than the max: the claim does not hold on so few examples."""
    pytest.importorskip("torch")
    from memfit.lab import run_lab
    from memfit.report.html import detect_command, render_page
    from memfit.report.lab import lab_markdown

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"question": "q", "answer": " ".join(["word"] * n)}) + "\n"
                            for n in (10, 20, 400)))
    result = run_lab(_tiny_setup(), data=data, tokenizer=shared_dir / "tokenizers" / "llama2",
                     fields={"prompt": "question", "completion": "answer"}, reps=(3, 8))
    d = json.loads(json.dumps(result.to_dict()))
    assert d["lab"] is True and detect_command(d) == "lab" and set(d["verdicts"]) == {"3", "8"}
    three, eight = d["reps"]
    assert three["figures"]["count"] == 3 and three["figures"]["p95"] == three["figures"]["max"]
    assert three["verdict"] == "does not hold here" and three["figures"]["over_p95"] == 0
    assert eight["verdict"] == "holds" and "incompatible with gradient checkpointing" in eight["measured"]
    none = run_lab(_tiny_setup(), reps=(3,)).reps[0]
    assert none.verdict is Verdict.NOT_RUN and "--data" in none.measured
    assert lab_markdown(d).count("\n| ") == 3  # header + 2 reps
    assert render_page(d).count("<section") == 2
