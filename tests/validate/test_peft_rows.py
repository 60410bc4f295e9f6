"""The --layers-to-transform agreement rows' fast subset (issue 14), measured on this CPU: estimate within 2% and
trace within 1% of the measured peak. Llama with four layers and vocab_size 1024: q_proj, v_proj on layer 2 only
(layers 0 and 1 save nothing), and seven linears on layers 0 and 2 under mixed-bf16 (frozen layers 1 and 3 save
what the input gradient needs). The estimate ignoring layers_to_transform was +23.6% and +10.3% on them. And
Pythia with ``bias="all"`` (its LayerNorm biases train: layer 0's norms save their input): -5.1% ignoring it. And
Pythia with one trainable token and checkpointing, where the merged table's dense (V, h) gradient at the end of
the backward is the peak: -20.0% ignoring it. And Qwen2.5 (tied embeddings) with two trainable tokens under
mixed-bf16: PEFT's tied lm_head keeps its own merged table, and the end of its forward (fp32 table beside its bf16
copy, the logits) is the peak; the estimate refused tied embeddings before."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from memfit.validate.agreement import full_matrix, peft_layer_matrix, run_row  # noqa: E402
from memfit.validate.rows_moe_peft import MOE_PEFT_ROWS  # noqa: E402
from memfit.validate.rows_peft import (  # noqa: E402
    BIAS_ROWS,
    FAST_BIAS_ROWS,
    FAST_LAYER_ROWS,
    FAST_TOKEN_ROWS,
    LAYER_ROWS,
    TOKEN_ROWS,
)


def test_layer_rows_in_the_matrix() -> None:
    labels = [r.label for r in full_matrix()]
    moe = [r.label for r in peft_layer_matrix(MOE_PEFT_ROWS)]  # rows_moe_peft's (tests/validate/test_moe_peft_rows)
    assert sum(" layers " in label for label in labels) == len(LAYER_ROWS) + 1 + sum(" layers " in m for m in moe)
    assert sum(" bias " in label for label in labels) == len(BIAS_ROWS) + sum(" bias " in m for m in moe)
    assert sum(" tokens " in label for label in labels) == len(TOKEN_ROWS)
    assert "llama-3.2-1b lora[q_proj,v_proj layers 2] fp32 sdpa - b2 s64 vocab 1024" in labels
    # tied embeddings (PEFT's tied TrainableTokensLayer on the lm_head): four rows, one in the fast subset
    tied = [label for label in labels if " tokens " in label and not label.startswith("pythia")
            and "llama-3.2-1b lora[default tokens 128000,128001]" not in label]
    assert len(tied) == 4 and "qwen2.5-0.5b lora[default tokens 5,7] mixed-bf16 sdpa - b1 s64 vocab 1024" in tied


@pytest.mark.slow
@pytest.mark.parametrize("row", peft_layer_matrix(FAST_LAYER_ROWS + FAST_BIAS_ROWS + FAST_TOKEN_ROWS),
                         ids=lambda r: r.label)
def test_layer_row(row) -> None:  # type: ignore[no-untyped-def]
    r = run_row(row)
    assert abs(r.estimate_error) <= 0.02, (r.estimate_bytes, r.measured_bytes)
    assert r.trace_error is not None and abs(r.trace_error) <= 0.01, (r.trace_bytes, r.measured_bytes)
