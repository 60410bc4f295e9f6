"""`memfit fit` on architectures transformers builds without sdpa (Gemma 2's soft-capping, GPT-OSS's attention
sinks): the advisor neither proposes sdpa nor estimates it (the estimate refuses it), where it used to fail with
"has no sdpa path" on a run that was valid as given (--attention eager)."""

from __future__ import annotations

import pytest

from memfit.advise import fit
from memfit.estimate import RunSpec, Target, lookup


@pytest.mark.parametrize("model", ["gemma-2-2b", "gpt-oss-20b"])
def test_fit_keeps_to_the_kernels_the_architecture_has(model: str) -> None:
    shape = lookup(model).shape
    spec = RunSpec(method="lora", targets=("q_proj", "v_proj"), batch=4, seq=4096, attention="eager")
    report = fit(shape, spec, Target.resolve("A100-80GB"))
    assert report.fits
    assert report.cheapest.setup is not None
    assert report.cheapest.setup.spec.attention in shape.arch.attention_kernels
    assert all(s.setup.spec.attention != "sdpa" for s in report.steps)
