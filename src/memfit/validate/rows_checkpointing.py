"""Agreement rows for segment checkpointing (issue 18): ``--checkpointing sqrt`` (Chen et al.: segments of
ceil(sqrt(L)) consecutive blocks, one checkpoint each, :mod:`memfit.runtime.segments`) and ``every-k``
(transformers 5.24.0's ``every_n_layers``: blocks 0, k, 2k, ... checkpointed, the others keep all they save),
on two architectures (Llama's RMSNorm / SwiGLU / rotary, GPT-2's LayerNorm / GELU / learned positions and
dropout). Deeper than the grid's 2 layers, so that segments and plain blocks differ: 5 layers give sqrt
segments of 3 + 2, every-2 checkpoints blocks 0, 2, 4 (the last is one), every-3 blocks 0, 3 (the last is
plain); 9 layers give three segments of 3.
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.spec import RunSpec
from memfit.validate.agreement import MatrixRow, scaled_config

# (catalogue model, scaled hidden, layers, spec)
CHECKPOINTING_ROWS: tuple[tuple[str, int, int, RunSpec], ...] = (
    ("llama-3.2-1b", 256, 5, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2,
                                     seq=128, checkpointing="sqrt")),
    ("llama-3.2-1b", 256, 5, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2,
                                     seq=128, checkpointing="every-k", checkpoint_every=2)),
    ("llama-3.2-1b", 256, 5, RunSpec(device="cpu", method="full", precision="fp32", attention="eager", batch=1,
                                     seq=128, checkpointing="every-k", checkpoint_every=3)),
    ("llama-3.2-1b", 256, 9, RunSpec(device="cpu", method="lora", precision="fp32", attention="eager", batch=2,
                                     seq=64, checkpointing="sqrt", targets=("all-linear",))),
    ("gpt2", 256, 5, RunSpec(device="cpu", method="full", precision="fp32", attention="eager", batch=2, seq=128,
                             checkpointing="sqrt")),
    ("gpt2", 256, 5, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=128,
                             checkpointing="every-k", checkpoint_every=2)),
    ("gpt2", 256, 9, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=64,
                             checkpointing="sqrt")),
    ("gpt2", 256, 9, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=64,
                             checkpointing="every-k", checkpoint_every=4)),
)

# the fast subset `make test` runs (tests/validate/test_rows_checkpointing.py): one row of each mode
FAST_CHECKPOINTING_ROWS: tuple[tuple[str, int, int, RunSpec], ...] = (
    ("llama-3.2-1b", 256, 5, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=1,
                                     seq=64, checkpointing="sqrt")),
    ("gpt2", 256, 5, RunSpec(device="cpu", method="lora", precision="fp32", attention="eager", batch=1, seq=64,
                             checkpointing="every-k", checkpoint_every=3)),
)


def _rows(rows: tuple[tuple[str, int, int, RunSpec], ...]) -> list[MatrixRow]:
    out = []
    for model, hidden, layers, spec in rows:
        config: dict[str, Any] = scaled_config(model, hidden, layers)
        out.append(MatrixRow(model=model, config=config, spec=spec))
    return out


def checkpointing_matrix() -> list[MatrixRow]:
    return _rows(CHECKPOINTING_ROWS)


def fast_checkpointing_matrix() -> list[MatrixRow]:
    return _rows(FAST_CHECKPOINTING_ROWS)
