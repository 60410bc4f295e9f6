"""Real CPU training steps with what the analytic estimate is checked against: the peak of live storage bytes
and the bytes autograd saves for backward, per module.

The runtime's own pieces (:mod:`memfit.runtime`): the builder, the Trainer-order step, the live-storage
tracker and the saved-tensor ledger. The batch is made before the steps, as a data loader makes it, and is
alive throughout: token ids, labels as a separate copy (what a collator hands the model, and what the
estimate's ``inputs`` counts: 2 x b x s x 8 B) and, with ``padding_mask``, a mask with the first quarter of
row 0 padded. Weights are seeded (``torch.manual_seed(0)``) and so are the ids, so a row measures the same
bytes on every run; the model trains with the dropout its config has (:func:`without_dropout` for none).

Used by ``tests/estimate`` and ``bench/bench_estimate.py``; the independent oracle for the tracker itself is
:mod:`memfit.validate.oracle`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memfit.estimate.spec import RunSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class RealSteps:
    """What ``steps`` real training steps held.

    ``saved_bytes``: what the last step's forward saved for backward (unique storages, weights excluded),
    ``saved_by_module`` the same by the innermost module saving it (PEFT's wrapper prefix dropped).
    """

    peak_bytes: int
    peak_phase: str
    saved_bytes: int
    saved_by_module: dict[str, int] = field(default_factory=dict)


def real_steps(config: dict[str, Any], spec: RunSpec, *, steps: int = 2) -> RealSteps:
    """Build ``config``'s model for ``spec`` on the CPU and run ``steps`` training steps (module docstring)."""
    import torch

    from memfit.runtime.build import build_model
    from memfit.runtime.scopes import ModuleScopes, SavedTensorLedger
    from memfit.runtime.step import StepInputs, make_optimizer, make_scaler, random_batch, run_step
    from memfit.runtime.tracker import LiveTensorTracker

    torch.manual_seed(0)
    model = build_model(config, spec, device="cpu")
    optimizer = make_optimizer(model, spec)
    scaler = make_scaler(spec, "cpu")
    vocab = int(config["vocab_size"])
    ids = random_batch(batch=spec.batch, seq=spec.seq, vocab=vocab, device="cpu")
    mask = None
    if spec.padding_mask:
        mask = torch.ones_like(ids)
        mask[0, : spec.seq // 4] = 0
    inputs = StepInputs(input_ids=ids, labels=ids.clone(), attention_mask=mask)
    tracker = LiveTensorTracker(vocab=vocab)
    tracker.track_model(model)
    tracker.track_optimizer(optimizer)
    tracker.track_tensors(t for t in (inputs.input_ids, inputs.labels, mask) if t is not None)
    saved: dict[str, int] = {}
    with tracker:
        for step in range(steps):
            if step < steps - 1:
                run_step(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab,
                         device="cpu", tracker=tracker, scaler=scaler, inputs=inputs)
                continue
            with ModuleScopes(model, tracker) as scopes, SavedTensorLedger.for_model(model, scopes) as ledger:
                run_step(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab,
                         device="cpu", tracker=tracker, scaler=scaler, inputs=inputs)
            saved = dict(ledger.by_module)
    return RealSteps(peak_bytes=tracker.peak_bytes, peak_phase=tracker.peak_phase, saved_bytes=sum(saved.values()),
                     saved_by_module=saved)


def without_dropout(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every dropout field its architecture trains with set to 0.0 explicitly
    (:data:`memfit.estimate.shape.DROPOUT_FIELDS`), so the real model and the estimate read the same values.

    >>> without_dropout({"model_type": "gpt2"})["attn_pdrop"]
    0.0
    """
    from memfit.estimate.shape import DROPOUT_FIELDS

    out = dict(config)
    for key, _default in DROPOUT_FIELDS.get(str(config.get("model_type")), {}).values():
        out[key] = 0.0
    return out
