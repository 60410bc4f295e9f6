"""``memfit fit --loss trl --data FILE --tokenizer T``: the loss-token share TRL's fused head scores, from the data's
labels (issue 14): the worst example's labels != -100 at positions 1..min(len, seq)-1 (the causal shift drops
label 0) over seq - 1, stated in the output with where it came from. Before, the share stayed 1.0 (every position)
whatever the data said."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from memfit.data.formats import open_records
from memfit.data.tokenize import iter_tokenized
from memfit.data.tokenizer import load_tokenizer

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"

TOKENIZER = str(SHARED / "tokenizers" / "llama2")


def _expected(path: Path, seq: int) -> float:
    """The share by a plain loop over the tokenized examples' labels (no numpy running sums)."""
    stream = open_records(path, prompt="question", completion="answer")
    best = 0
    for tb in iter_tokenized(load_tokenizer(TOKENIZER), stream, stream.spec):
        for e in tb.examples:
            best = max(best, sum(1 for label in e.labels[1:min(len(e), seq)] if label != -100))
    return best / (seq - 1)


def test_share_from_data(gsm8k_200: Path, cli: Callable[[list[str]], tuple[int, str, str]]) -> None:
    args = ["fit", "llama-2-7b", "--gpu", "24GiB", "--loss", "trl", "--data", str(gsm8k_200), "--tokenizer",
            TOKENIZER, "--prompt", "question", "--completion", "answer", "--no-search", "--json"]
    for seq in (512, 128):  # GSM8K answers run to a few hundred tokens: at --seq 128 some are cut
        code, out, _ = cli([*args, "--seq", str(seq)])
        assert code == 0
        share = json.loads(out)["loss_token_share"]
        assert abs(share["value"] - _expected(gsm8k_200, seq)) < 1e-12
        assert 0.0 < share["value"] < 1.0 and str(gsm8k_200) in share["source"]
    code, out, _ = cli([*args, "--seq", "512", "--loss-token-share", "0.5"])
    assert json.loads(out)["loss_token_share"] == {"value": 0.5, "source": "--loss-token-share, as given (the "
                                                   "data's was not used)"}
    code, out, _ = cli(["fit", "llama-2-7b", "--gpu", "24GiB", "--no-search", "--json"])
    assert "loss_token_share" not in json.loads(out)  # not TRL's loss: nothing to say
