"""Where the Hugging Face Trainer's step differs from memfit's loop, on top of :func:`estimate_memory`.

- The Trainer's default ``optim="adamw_torch_fused"`` (transformers 5.24.0 on torch >= 2.8): the fused kernel
  allocates no temporaries at the optimizer step (the estimate's optimizer moment has torch's for-each /
  for-loop AdamW's).
- TRL 1.16's ``SFTTrainer`` computes its loss through a fused LM head (``trl.trainer.utils.add_fused_lm_head``:
  a chunked log-probability kernel that never holds the (b, s, V) logits); a run with ``loss="chunked"`` has
  Liger's head at its ``backward: loss`` moment, replaced here by TRL's (:func:`trl_head_bytes`).

Pure Python, like the rest of the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimate.budget import MemoryEstimate
from memfit.estimate.category import Category
from memfit.estimate.trl_loss import TRL_TILE_BYTES, TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK, trl_head_bytes, trl_loss_bytes

__all__ = ["TRL_TILE_BYTES", "TRL_TOKEN_CHUNK", "TRL_VOCAB_CHUNK", "TrainerPeak", "trainer_peak", "trl_head_bytes"]

@dataclass(frozen=True, kw_only=True, slots=True)
class TrainerPeak:
    """The peak of the Trainer's step: its bytes, the moment, and every booked category alive then."""

    peak_bytes: int
    moment: str
    components: dict[Category, int]


def trainer_peak(est: MemoryEstimate, *, fused_optimizer: bool = False, trl_head: bool = False) -> TrainerPeak:
    """The peak of ``est``'s step as the Trainer runs it: with ``fused_optimizer`` the optimizer step's
    temporaries are dropped; with ``trl_head`` (and ``loss="chunked"``) the ``backward: loss`` moment holds TRL's
    fused head instead of Liger's."""
    run, shape = est.spec, est.shape
    best: tuple[int, str, dict[Category, int]] | None = None
    for m in est.moments:
        parts = dict(m.parts)
        if fused_optimizer and m.phase == "optimizer" and run.optimizer == "adamw":
            parts.pop(Category.TEMPORARIES, None)
        if trl_head and run.loss == "chunked" and m.label == "backward: loss":
            parts[Category.LOGITS] = trl_loss_bytes(run, shape, head_trained=est.model_states.grads_head > 0)
        total = sum(parts.values())
        if best is None or total > best[0]:
            best = (total, m.label, parts)
    assert best is not None, "an estimate has moments"
    peak, label, parts = best
    return TrainerPeak(peak_bytes=peak, moment=label, components={c: parts.get(c, 0) for c in est.components})
