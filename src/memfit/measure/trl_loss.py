"""TRL's SFTTrainer loss measured with TRL's own code (TRL 1.16.0): memfit's training loop on a model patched with
``trl.trainer.utils.add_fused_lm_head`` (as ``SFTTrainer.__init__`` does, on the PEFT model's base model, by
:func:`memfit.runtime.build.build_model` for ``loss="trl"``), called with ``fused_lm_head=True``; its ``loss`` is
``-log_probs.sum() / label_mask.sum()``, what ``SFTTrainer.compute_loss``
computes without ``num_items_in_batch``.

The labels are the ids with the first ``1 - loss_token_share`` of each row set to -100 (a prompt masked, as
completion-only loss does). ``compact=True`` makes TRL's fused forward take the branch it takes on Triton devices
(``trl.trainer.utils._use_triton``): only the positions whose label is not -100 are gathered (``hidden_states[mask]``)
and scored; the kernel itself still runs its torch path on the CPU. Without it (TRL's CPU behaviour) every position
is scored.
"""

from __future__ import annotations

from typing import Any

from memfit.errors import MemfitError, require_extra
from memfit.estimate.spec import RunSpec


def measure_trl_step(config: dict[str, Any], spec: RunSpec, *, compact: bool = False, steps: int = 2,
                     seed: int = 0) -> int:
    """The peak live bytes of ``steps`` training steps through TRL's fused LM head (module docstring); ``spec``'s
    ``loss_token_share`` masks the labels."""
    require_extra("trl", "integrations")
    import torch
    import trl.trainer.utils as trl_utils

    from memfit.runtime.build import build_model
    from memfit.runtime.step import StepInputs, make_optimizer, random_batch, run_step
    from memfit.runtime.tracker import LiveTensorTracker

    if spec.device != "cpu":
        raise MemfitError("measure_trl_step runs on the CPU: pass a spec with device='cpu'")
    vocab = int(config.get("vocab_size") or 0)
    torch.manual_seed(seed)
    model = build_model(config, spec.with_(loss="trl"), device="cpu")  # TRL's head (runtime.build._apply_trl_head)
    optimizer = make_optimizer(model, spec)
    tracker = LiveTensorTracker(vocab=vocab)
    tracker.track_model(model)
    tracker.track_optimizer(optimizer)
    masked = round((1 - spec.loss_token_share) * spec.seq)
    original = trl_utils._use_triton
    if compact:
        trl_utils._use_triton = lambda device: True
    try:
        with tracker:
            for step in range(steps):
                ids = random_batch(batch=spec.batch, seq=spec.seq, vocab=vocab, device="cpu", seed=step)
                labels = ids.clone()
                labels[:, :masked] = -100
                run_step(model, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq, vocab=vocab, device="cpu",
                         tracker=tracker, inputs=StepInputs(input_ids=ids, labels=labels))
                del ids, labels
    finally:
        trl_utils._use_triton = original
    return int(tracker.summary()["peak_bytes"])
