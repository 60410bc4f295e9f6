"""Agreement rows with ``--offload-activations`` (issue 14, part 5): TRL 1.16's ``activation_offloading``
(:mod:`memfit.runtime.act_offload`): every saved tensor of >= 1024 B but the parameters' and lm_head's in host memory.

The peaks compared are device bytes; the host copies are reported apart (``host_bytes``). Llama and Qwen 2.5,
LoRA and full, fp32 and mixed-bf16, with and without checkpointing, sdpa and eager; at the real vocabularies the
loss is the peak (its log-probabilities are on the device while it runs), so three rows set a 2,000-token vocabulary
to make a block's moments count. :func:`act_offload_matrix` makes them matrix rows (``bench/agreement.py`` adds
them to the full matrix; ``--act-offload-rows`` runs only them).
"""

from __future__ import annotations

from typing import Any

from memfit.estimate import lookup
from memfit.estimate.spec import RunSpec
from memfit.validate.agreement import SCALED_MODELS, MatrixRow, scaled_config


def _spec(**kw: Any) -> RunSpec:
    base: dict[str, Any] = {"device": "cpu", "offload_activations": True, "attention": "sdpa", "batch": 2, "seq": 64}
    return RunSpec(**{**base, **kw})


SMALL_VOCAB = {"vocab_size": 2000}

ACT_OFFLOAD_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("llama-3.2-1b", {}, _spec(method="lora", precision="fp32")),
    ("llama-3.2-1b", {}, _spec(method="lora", precision="fp32", checkpointing="full")),
    ("llama-3.2-1b", {}, _spec(method="lora", precision="mixed-bf16")),
    ("llama-3.2-1b", {}, _spec(method="full", precision="fp32", checkpointing="full")),
    ("llama-3.2-1b", {}, _spec(method="lora", precision="fp32", attention="eager", checkpointing="full")),
    ("qwen2.5-0.5b", {}, _spec(method="lora", precision="fp32")),
    ("qwen2.5-0.5b", {}, _spec(method="full", precision="mixed-bf16", checkpointing="full")),
    ("llama-3.2-1b", SMALL_VOCAB, _spec(method="lora", precision="fp32", batch=4, seq=128)),
    ("qwen2.5-0.5b", SMALL_VOCAB, _spec(method="full", precision="mixed-bf16", batch=4, seq=128)),
    ("llama-3.2-1b", SMALL_VOCAB, _spec(method="lora", precision="mixed-bf16", attention="eager", batch=4, seq=128,
                                        targets=("all-linear",))),
    # TRL's default loss (--loss trl, its fused head): the head's saved hidden-state copy goes to the host too
    ("llama-3.2-1b", {}, _spec(method="lora", precision="fp32", loss="trl")),
    ("llama-3.2-1b", {}, _spec(method="lora", precision="mixed-bf16", checkpointing="full", loss="trl")),
    ("llama-3.2-1b", SMALL_VOCAB, _spec(method="lora", precision="fp32", batch=4, seq=128, loss="trl")),
)

# the fast subset for `make test`
FAST_ACT_OFFLOAD_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = ACT_OFFLOAD_ROWS[:1]


def act_offload_matrix(rows: tuple[tuple[str, dict[str, Any], RunSpec], ...] = ACT_OFFLOAD_ROWS) -> list[MatrixRow]:
    """The rows as matrix rows: the models scaled as in the matrix (``SCALED_MODELS``), with the rows' fields."""
    sizes = {m: (h, n) for m, h, n in SCALED_MODELS}
    return [MatrixRow(model=m, config={**scaled_config(m, *sizes[m]), **fields},
                      spec=lookup(m).shape.arch.runnable_spec(s)) for m, fields, s in rows]
