"""trace refuses QLoRA + DoRA with one clear message (it crashed inside PEFT's weight norm on the fake 4-bit weight:
"Attempting to broadcast a dimension of length 256 ... [32768, 256]" on a hidden-256 Llama), exit 1, no traceback."""

from __future__ import annotations

import pytest

from memfit.cli import main
from memfit.errors import MemfitError
from memfit.estimate import RunSpec
from memfit.trace.engine import check_trace_spec


def test_trace_refuses_qlora_with_dora(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(MemfitError, match="memfit measure"):
        check_trace_spec(RunSpec(method="qlora", use_dora=True, device="cpu"))
    check_trace_spec(RunSpec(method="qlora", device="cpu"))  # QLoRA alone and DoRA alone still trace
    check_trace_spec(RunSpec(method="lora", use_dora=True, device="cpu"))
    assert main(["trace", "llama-3.2-1b", "--method", "qlora", "--dora", "--seq", "16"]) == 1
    err = capsys.readouterr().err
    assert "--dora" in err and "Traceback" not in err
