"""`memfit fit`: exit codes and the key figures of --json, the table for people, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
GIB = 1024**3
MIB = 1024**2


def _reserved(spec: dict[str, object]) -> int:
    """The CUDA reserved figure of the run ``spec`` (JSON) as ``memfit estimate`` gives it (the caching-allocator
    replay + 512 MiB context, worked by hand in tests/estimate/test_reserved.py): fit judges what estimate says."""
    from memfit.estimate import RunSpec, estimate_memory, resolve_model

    return estimate_memory(resolve_model("llama-2-7b"), RunSpec.from_dict(spec)).reserved_bytes


def test_fit_json_lesson_scenario(capsys) -> None:
    code = main(["fit", "llama-2-7b", "--gpu", "24GiB", "--rank", "64", "--batch", "4", "--seq", "2048", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits_initially"] is False and d["fits"] is True
    assert [s["action"] for s in d["steps"]] == ["checkpointing"]
    budget = int(24 * GIB * 0.95)  # 24 GiB less the default 5% headroom
    assert d["budget_bytes"] == budget and d["gpu"]["bytes"] == 24 * GIB
    final = d["final"]
    assert final["reserved_bytes"] == _reserved(final["spec"]) <= budget < d["initial"]["reserved_bytes"]
    assert d["initial"]["reserved_bytes"] == _reserved(d["initial"]["spec"])
    cheapest = d["cheapest"]
    assert cheapest["fits"] is True and _reserved(cheapest["spec"]) == cheapest["reserved_bytes"] <= budget
    assert d["rank_reduction"]["from_rank"] == 64 and d["rank_reduction"]["fits_after"] is False
    assert d["steps"][0]["facts"] == {"from": "none", "to": "full"} and d["steps"][0]["gives_up"] == "time"


def test_fit_table_for_people(capsys) -> None:
    assert main(["fit", "llama-2-7b", "--gpu", "24GiB", "--rank", "64", "--batch", "4", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert "checkpointing" in out and "GiB" in out and "Why rank comes last" in out


def test_fit_with_data_uses_the_lengths(capsys, tmp_path) -> None:
    """GSM8K is short: the plan first cuts --seq to the longest example (truncating nothing)."""
    data = SHARED / "data" / "gsm8k" / "test.jsonl"
    tok = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
    code = main(["fit", "llama-3.1-8b", "--gpu", "16GiB", "--rank", "64", "--batch", "16", "--seq", "2048",
                 "--data", str(data), "--tokenizer", str(tok), "--prompt", "question", "--completion", "answer",
                 "--no-search", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    n_lines = sum(1 for line in data.read_text().splitlines() if line.strip())
    assert d["data"]["count"] == n_lines == 1319
    first = d["steps"][0]
    assert first["action"] == "longest_example" and first["spec"]["seq"] % 64 == 0
    assert first["spec"]["seq"] - 64 < d["data"]["max"] <= first["spec"]["seq"]


def test_fit_seq_len_step_uses_p95_and_counts_truncated(capsys, tmp_path) -> None:
    """A long tail: 190 examples of ~1,000 tokens and 10 of ~6,000. The p95 cut truncates exactly the 10."""
    tok = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
    data = tmp_path / "long_tail.jsonl"
    rows = [{"text": " ".join(["word"] * (1000 + i))} for i in range(190)]
    rows += [{"text": " ".join(["word"] * (6000 + i))} for i in range(10)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code = main(["fit", "llama-3.1-8b", "--gpu", "16GiB", "--rank", "16", "--batch", "4", "--seq", "8192",
                 "--data", str(data), "--tokenizer", str(tok), "--text", "text", "--no-search", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    seq_step = next(s for s in d["steps"] if s["action"] == "seq_len")
    assert seq_step["spec"]["seq"] >= d["data"]["recommended_seq_len"]
    assert 1000 < seq_step["spec"]["seq"] < 6000
    assert (seq_step["facts"]["truncated"], seq_step["facts"]["examples"]) == (10, 200)


def test_fit_errors_are_one_line(capsys) -> None:
    assert main(["fit", "llama-2-7b"]) == 1
    err = capsys.readouterr().err
    assert "--gpu" in err and "Traceback" not in err
    assert main(["fit", "llama-2-7b", "--gpu", "24GiB", "--data", "x.jsonl"]) == 1
    assert "--tokenizer" in capsys.readouterr().err
    assert main(["fit", "llama-2-7b", "--gpu", "24GiB", "--headroom", "lots"]) == 1
    assert "--headroom" in capsys.readouterr().err


def test_fit_uses_a_measured_checkpointing_factor(capsys, tmp_path) -> None:
    m = tmp_path / "measure.json"
    m.write_text(json.dumps({"model": "llama-2-7b", "device": "cuda", "runs": [
        {"batch": 2, "seq": 256, "checkpointing": "none", "step_seconds": 1.0},
        {"batch": 2, "seq": 256, "checkpointing": "full", "step_seconds": 1.27},
    ]}))
    code = main(["fit", "llama-2-7b", "--gpu", "24GiB", "--rank", "64", "--batch", "4", "--measurement", str(m),
                 "--no-search", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    step = d["steps"][0]
    assert step["action"] == "checkpointing" and step["time_factor"] == 1.27
    assert d["time_model"]["checkpoint_factor"] == 1.27 and "measured" in d["time_model"]["source"]
    from memfit.report.fit import step_cost

    assert step_cost("checkpointing", step["facts"], step["time_factor"], time_source=d["time_model"]["source"]) == (
        "time only: x1.27 step time (measured: median of 1 point(s) in measure.json); set model.config.use_cache = "
        "False")


@pytest.mark.slow
def test_packing_keeps_the_effective_batch_on_gsm8k(capsys) -> None:
    """Issue 21.4: on GSM8K train (llama2 tokenizer, 7,473 examples, max 572 tokens) at batch 8, the packing
    step said "6 packed rows carry the real tokens of 8": 6 rows of 576 tokens hold ~17 examples, so the
    examples per optimizer step grew ~2.2x. By hand: 8 examples of mean m tokens fill 8 m / (576 e) rows of
    576 at packing efficiency e; with m ~ 198 and e ~ 0.99 that is ~2.8 -> 3 rows, carrying ~8.7 examples."""
    data = SHARED / "data" / "gsm8k" / "train.jsonl"
    tok = SHARED / "tokenizers" / "llama2"
    code = main(["fit", "llama-3.1-8b", "--gpu", "24GiB", "--batch", "8", "--seq", "2048", "--data", str(data),
                 "--tokenizer", str(tok), "--prompt", "question", "--completion", "answer", "--no-search", "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["data"]["count"] == 7473 and d["data"]["max"] == 572 and d["data"]["p95"] == 337
    step = next(s for s in d["steps"] if s["action"] == "packing")
    spec = step["spec"]
    rows, seq = spec["batch"] * spec["grad_accum"], spec["seq"]
    assert seq == 576 and rows == 3
    facts = step["facts"]
    # independently: the mean of the real lengths, from memfit lengths (the data layer, not the advisor)
    from memfit.data.lengths import analyse_lengths

    lengths = analyse_lengths(str(data), str(tok), prompt="question", completion="answer", seq_len=2048, batch=8,
                              progress=False).lengths
    mean = sum(lengths) / len(lengths)  # every example is below 576: none truncated
    carried_at_most = rows * seq / mean  # examples 3 full rows could hold (efficiency <= 1)
    assert 8 <= carried_at_most < 8 + seq / mean  # within one row of the 8 examples per step
    assert facts["mean_tokens"] == pytest.approx(mean) and (facts["examples"], facts["rows"]) == (8, 3)
    from memfit.report.fit import step_cost

    text = step_cost("packing", facts, step["time_factor"])
    assert f"8 examples x mean {mean:,.1f} tokens" in text
    assert "-> 3 rows of 576" in text and "(was 8)" in text
