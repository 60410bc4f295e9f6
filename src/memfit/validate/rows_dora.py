"""Agreement rows with DoRA (``--dora``, PEFT 0.21.2 ``use_dora``; issue 14 part 3).

DoRA adds per adapted linear a trained fp32 magnitude (out elements), saves the base output and lora_B's output
(b*s*out each) for the backward, and in every training forward builds ``lora_B(lora_A(eye(in)))`` and
``W + scaling * B@A`` for the weight norm (:func:`memfit.estimate.activations.ops.dora_weight_norm`). With the
real vocabularies the logits stay the peak, so the first rows check the magnitudes and the saved outputs: Llama
(GQA, no biases) and Qwen 2.5 (biased q/k/v: ``base_result - bias`` is a new tensor), PEFT's default targets
and all-linear, fp32 and mixed-bf16. The ``vocab_size`` 1024 rows make the weight-norm transient (eye(1024) of
down_proj: 4 MiB) the peak: in the forward, and with checkpointing in block 0's recompute.
:func:`memfit.validate.agreement.dora_matrix` makes them matrix rows (``full_matrix`` includes them).

Not a row yet: GPT-2 (Conv1D, ``fan_in_fan_out``) LoRA fp32 sdpa b2 s64 with DoRA: the estimate is within 0.01% of
the CPU step, but the trace is +1.08% (1,572,864 B: one 256 x 768 fp32 tensor per layer, the size of B@A on
c_attn, alive at the backward in the fake-tensor run and not in the real one; unexplained).
The last row also leaves modules out with ``--exclude-modules`` (the estimate without the exclusion: +0.50%).
``PEFT_OPTION_ROWS``: ``--rank-pattern`` without DoRA (the estimate without the pattern: +0.05% and -0.13%, small
at these sizes; the trainable counts are tested against PEFT on the meta device in tests/estimate/test_rank_pattern.py).
"""

from __future__ import annotations

from typing import Any

from memfit.estimate.spec import RunSpec


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(device="cpu", method="lora", use_dora=True, **kw)


_SMALL_VOCAB = {"vocab_size": 1024}

DORA_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("llama-3.2-1b", {}, _spec(precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("llama-3.2-1b", {}, _spec(precision="fp32", attention="eager", batch=2, seq=96, targets=("all-linear",))),
    ("llama-3.2-1b", {}, _spec(precision="mixed-bf16", attention="eager", batch=1, seq=32, targets=("all-linear",))),
    ("qwen2.5-0.5b", {}, _spec(precision="fp32", attention="sdpa", batch=2, seq=128)),
    ("qwen2.5-0.5b", {}, _spec(precision="fp32", attention="eager", batch=2, seq=96, targets=("all-linear",))),
    ("qwen2.5-0.5b", {}, _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=32)),
    ("llama-3.2-1b", _SMALL_VOCAB, _spec(precision="fp32", attention="sdpa", batch=1, seq=16,
                                         targets=("all-linear",))),
    ("llama-3.2-1b", _SMALL_VOCAB, _spec(precision="mixed-bf16", attention="sdpa", batch=1, seq=16,
                                         targets=("all-linear",))),
    ("qwen2.5-0.5b", _SMALL_VOCAB, _spec(precision="fp32", attention="sdpa", batch=1, seq=16,
                                         targets=("all-linear",), checkpointing="full")),
    # PEFT's exclude_modules with DoRA: all-linear less k_proj and mlp.down_proj
    ("llama-3.2-1b", {}, _spec(precision="fp32", attention="sdpa", batch=2, seq=64, targets=("all-linear",),
                               exclude_modules=("k_proj", "mlp.down_proj"))),
)

# PEFT's rank_pattern (issue 14 part 3): per-module ranks, the same in every layer (what the estimate models)
PEFT_OPTION_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("llama-3.2-1b", {}, RunSpec(device="cpu", method="lora", precision="fp32", attention="sdpa", batch=2, seq=64,
                                 targets=("all-linear",), rank_pattern=(("q_proj", 32), ("mlp.down_proj", 4)))),
    ("qwen2.5-0.5b", {}, RunSpec(device="cpu", method="lora", precision="mixed-bf16", attention="sdpa", batch=1,
                                 seq=32, targets=("all-linear",), rank_pattern=(("v_proj", 64),))),
)

# the fast subset for `make test`: the saved outputs on Llama's default targets, the transient in a recompute
FAST_DORA_ROWS: tuple[tuple[str, dict[str, Any], RunSpec], ...] = (
    ("llama-3.2-1b", {}, _spec(precision="fp32", attention="sdpa", batch=1, seq=64)),
    ("llama-3.2-1b", _SMALL_VOCAB, _spec(precision="fp32", attention="sdpa", batch=1, seq=16,
                                         targets=("all-linear",), checkpointing="full")),
)
