"""Agreement rows with ``--offload`` (issue 14, part 5): the checkpoints' copies in host memory.

Each row runs the three engines with :mod:`memfit.runtime.offload`'s host accounting: the peaks compared are
device bytes; the host copies (one block input per checkpointed layer) are reported apart as ``host_bytes``.
LoRA rows (the first block input is then a leaf the graph keeps on the device) and a full fine-tune, on
Llama (GQA, rotary), Qwen 2.5 (biased q/k/v) and Phi-3 (fused projections); sdpa and eager.
:func:`memfit.validate.agreement.offload_matrix` makes them matrix rows (``full_matrix`` includes them).
"""

from __future__ import annotations

from memfit.estimate.spec import RunSpec


def _spec(**kw: object) -> RunSpec:
    return RunSpec(device="cpu", checkpointing="full", offload=True, **kw)  # type: ignore[arg-type]


OFFLOAD_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128)),
    ("qwen2.5-0.5b", _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128,
                           targets=("all-linear",))),
    ("phi-3-mini", _spec(method="lora", precision="fp32", attention="sdpa", batch=4, seq=128,
                         targets=("qkv_proj", "o_proj"))),
    ("llama-3.2-1b", _spec(method="full", precision="fp32", attention="eager", batch=2, seq=128)),
    ("qwen2.5-0.5b", _spec(method="lora", precision="fp32", attention="eager", batch=2, seq=96)),
)

# the fast subset for `make test`: one row on each of two architectures
FAST_OFFLOAD_ROWS: tuple[tuple[str, RunSpec], ...] = (
    ("llama-3.2-1b", _spec(method="lora", precision="fp32", attention="sdpa", batch=2, seq=64)),
    ("qwen2.5-0.5b", _spec(method="lora", precision="fp32", attention="eager", batch=1, seq=64)),
)

