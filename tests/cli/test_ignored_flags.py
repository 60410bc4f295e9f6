"""Issue 21.13: a flag that would do nothing is refused with a message naming the fix (exit 1), never
silently ignored; the same flag where it acts is accepted."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import RunSpec, parse_targets

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TINY = ["--batch", "1", "--seq", "8", "--steps", "1"]  # if a refusal ever failed, the measurement stays small
DATA = [str(SHARED / "data" / "gsm8k" / "test.jsonl"), "--tokenizer", str(SHARED / "tokenizers" / "llama2")]


@pytest.mark.parametrize("argv, needle", [
    (["measure", "llama-3.2-1b", *TINY, "--gpu", "24GiB"], "--memory-limit"),
    (["lengths", *DATA, "--gpu", "24GiB"], "memfit fit"),
    (["lengths", *DATA, "--method", "full"], "--model"),
    (["estimate", "llama-3.2-1b", "--checkpoint-every", "3"], "--checkpointing every-k"),
    (["estimate", "llama-3.2-1b", "--checkpointing", "full", "--checkpoint-every", "3"], "--checkpointing every-k"),
    (["measure", "llama-3.2-1b", *TINY, "--checkpointing", "both", "--checkpoint-every", "3"],
     "--checkpointing every-k"),
    (["estimate", "llama-3.2-1b", "--method", "full", "--rank", "8"], "--rank"),
    (["estimate", "llama-3.2-1b", "--method", "full", "--alpha", "8"], "--alpha"),
    (["estimate", "llama-3.2-1b", "--method", "full", "--targets", "q_proj"], "--targets"),
    (["fit", "llama-3.2-1b", "--gpu", "24GiB", "--method", "full", "--rank", "8"], "--rank"),
    (["estimate", "llama-3.2-1b", "--method", "lora", "--no-double-quant"], "--method qlora"),
    (["estimate", "llama-3.2-1b", "--offload"], "--checkpointing"),
    (["estimate", "llama-3.2-1b", "--targets", ""], "names no module"),
    (["estimate", "llama-3.2-1b", "--targets", ",,,"], "names no module"),
    (["estimate", "llama-3.2-1b", "--targets", "q_proj,,v_proj"], "empty name"),
    (["trace", "llama-3.2-1b", "--top", "-1"], "--top"),
    (["estimate", "llama-3.2-1b", "--headroom", "10%"], "--gpu"),
    (["estimate", "--rule-of-thumb", "--layers", "2", "--hidden", "8", "--gpu", "24GiB"], "--gpu"),
    (["fit", "llama-3.2-1b", "--gpu", "24GiB", "--prompt", "question"], "--data"),
])
def test_an_ignored_flag_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(argv) == 1, argv
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [
    ["estimate", "llama-3.2-1b", "--rank", "8", "--json"],
    ["estimate", "llama-3.2-1b", "--method", "qlora", "--no-double-quant", "--json"],
    ["estimate", "llama-3.2-1b", "--checkpointing", "every-k", "--checkpoint-every", "4", "--json"],
    ["estimate", "llama-3.2-1b", "--checkpointing", "full", "--offload", "--json"],
    ["estimate", "llama-3.2-1b", "--method", "full", "--json"],
    ["estimate", "llama-3.2-1b", "--targets", "q_proj,v_proj", "--json"],
])
def test_the_same_flags_where_they_act(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()


def test_the_spec_refuses_what_it_can_tell() -> None:
    with pytest.raises(MemfitError, match="--offload"):
        RunSpec(offload=True)
    with pytest.raises(MemfitError, match="--targets"):
        RunSpec(method="full", targets=("q_proj",))
    with pytest.raises(MemfitError, match="--modules-to-save"):
        RunSpec(method="full", modules_to_save=("lm_head",))
    assert RunSpec(checkpointing="full", offload=True).offload
    assert parse_targets(None) == () and parse_targets("all-linear") == ("all-linear",)
    with pytest.raises(MemfitError, match="names no module"):
        parse_targets(" , ")
