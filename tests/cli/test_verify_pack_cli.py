"""``memfit verify-pack`` end to end: a correct packing passes and the naive one fails, packed rows given as the
source are named, and --mask / --attention mean what they mean everywhere else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
TOKENIZER = SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"


def test_verify_pack_pass_and_naive_fail(gsm8k_200: Path, cli) -> None:
    base = ["verify-pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question", "--completion", "answer",
            "--seq-len", "512", "--limit", "6", "--json"]
    code, out, _ = cli(base)
    ok = json.loads(out)
    assert code == 0 and ok["pass"] is True and ok["examples"] == 6 and ok["rows"] < 6
    code, out, _ = cli([*base, "--mask", "naive"])
    bad = json.loads(out)
    assert code == 1 and bad["pass"] is False
    assert bad["max_abs_logit_diff"] > 1e-2


def test_verify_pack_on_pack_output_says_to_pass_the_source(gsm8k_200: Path, tmp_path: Path, cli) -> None:
    rows = tmp_path / "rows.jsonl"
    code, _, _ = cli(["pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question",
                     "--completion", "answer", "--seq-len", "1024", "--out", str(rows)])
    assert code == 0
    for extra in ([], ["--prompt", "question", "--completion", "answer"]):
        code, out, err = cli(["verify-pack", str(rows), "-t", str(TOKENIZER), *extra])
        assert code == 1 and out == "" and "Traceback" not in err
        assert "looks like the output of memfit pack" in err and "pass the file you packed" in err


def test_verify_pack_mask_flag_and_old_attention_values(gsm8k_200: Path, cli) -> None:
    """--attention means the attention kernel in every command; verify-pack's mask form is --mask. The old
    spelling (--attention position_ids | block_mask | naive) is one line naming the new flag."""
    base = ["verify-pack", str(gsm8k_200), "-t", str(TOKENIZER), "--prompt", "question", "--completion", "answer",
            "--seq-len", "512", "--limit", "3"]
    for old, new in (("position_ids", "--mask position-ids"), ("block_mask", "--mask block"),
                     ("naive", "--mask naive")):
        code, out, err = cli([*base, "--attention", old])
        assert code == 1 and out == "" and new in err and "attention kernel" in err and "Traceback" not in err
    code, out, _ = cli([*base, "--mask", "block", "--attention", "eager", "--json"])
    d = json.loads(out)
    assert code == 0 and d["pass"] is True and d["mask"] == "block" and d["attn_implementation"] == "eager"
    code, _, err = cli([*base, "--mask", "flex"])
    assert code == 1 and "unknown --mask 'flex'" in err
