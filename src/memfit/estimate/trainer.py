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

TRL_TOKEN_CHUNK = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE (TRL 1.16.0)
TRL_VOCAB_CHUNK = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE (TRL 1.16.0)
TRL_TILE_BYTES = 29  # bytes per (token, vocabulary) element alive at the widest line of _backward_tile


def trl_head_bytes(*, tokens: int, vocab: int, hidden: int, weight_itemsize: int, compute_itemsize: int,
                   head_trained: bool = False) -> int:
    """What TRL 1.16's fused LM head (``_ChunkedLogProbFunction``, torch path) holds at its widest moment, the
    backward of one tile, for ``tokens`` scored positions (b*(s-1): the torch path scores every position); the
    last hidden state and the head's weight are in the weights' dtype (fp32 under mixed precision), the tiles
    in the compute dtype:

    - saved by the forward: the hidden states ``N*h`` (a copy: ``hidden_states[:, :-1]`` is reshaped), the
      clamped targets ``N*8``, ``log_z`` and ``entropy`` ``2*N*4``; the incoming gradient ``N*4``;
    - the fp32 accumulators ``grad_hidden`` ``N*h*4`` and, when the head trains, ``grad_weight`` ``V*h*4``;
    - under mixed precision the casts ``hidden[chunk].to(compute)`` (``n*h``) and ``weight[tile].to(compute)``
      (``cols*h``), in the compute dtype;
    - ``mm_buf``: ``min(N, 4096) x 32768`` in the compute dtype (the full vocabulary tile, whatever V);
    - in ``_backward_tile`` on a ``n x cols`` tile (``n = min(N, 4096)``, ``cols = min(V, 32768)``): the locals
      ``y``, ``z``, ``log_p``, ``p``, ``grad`` (5 x fp32), ``is_target`` (bool) and, inside
      ``grad += grad_logprobs.unsqueeze(-1) * (is_target.float() - p)``, two fp32 temporaries at a time
      (``.float()`` dies once the difference exists): 5 x 4 + 1 + 2 x 4 = 29 bytes per element. The entropy
      output is only logged, detached: no entropy gradient.
    """
    n = min(tokens, TRL_TOKEN_CHUNK)
    cols = min(vocab, TRL_VOCAB_CHUNK)
    saved = tokens * hidden * weight_itemsize + tokens * 8 + 2 * tokens * 4 + tokens * 4
    accumulators = tokens * hidden * 4 + (vocab * hidden * 4 if head_trained else 0)
    casts = (n + cols) * hidden * compute_itemsize if weight_itemsize != compute_itemsize else 0
    tile = n * TRL_VOCAB_CHUNK * compute_itemsize + TRL_TILE_BYTES * n * cols
    return saved + accumulators + casts + tile


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
            parts[Category.LOGITS] = trl_head_bytes(
                tokens=run.batch * (run.seq - 1), vocab=shape.vocab, hidden=shape.embed_dim,
                weight_itemsize=run.weight_bytes, compute_itemsize=run.compute_bytes,
                head_trained=est.model_states.grads_head > 0)
        total = sum(parts.values())
        if best is None or total > best[0]:
            best = (total, m.label, parts)
    assert best is not None, "an estimate has moments"
    peak, label, parts = best
    return TrainerPeak(peak_bytes=peak, moment=label, components={c: parts.get(c, 0) for c in est.components})
