"""TRL's ``SFTTrainer`` loss (``--loss trl``): TRL 1.16.0's fused LM head, its default (``loss_type="nll"``; the
deprecated ``"chunked_nll"`` is an alias of it, ``trl/trainer/sft_config.py``).

``SFTTrainer.__init__`` patches the model with ``trl.trainer.utils.add_fused_lm_head`` and ``compute_loss`` calls
``model(**inputs, fused_lm_head=True)``: the backbone runs, then ``hidden_states[:, :-1]`` and ``labels[:, 1:]``
go through ``_ChunkedLogProbFunction`` (``trl/kernels/chunked_logprob.py``) in tiles of 4096 tokens x 32768
vocabulary columns, never holding the (b, s, V) logits; the loss is ``-log_probs.sum() / n_tokens``. Which
positions it scores depends on the device (``_use_triton``): on CUDA (Triton) only those whose label is not -100
(``hidden_states[mask]``, ``labels[mask]``), so with completion-only or assistant-only loss the head's memory
scales with the loss-carrying tokens, ``loss_token_share x b x (s-1)``; elsewhere (CPU) every position, the
masked ones clamped to 0 and zeroed after. Liger's fused linear cross-entropy is ``--loss chunked``
(:mod:`memfit.estimate.activations.head`). Pure Python.
"""

from __future__ import annotations

import math

from memfit.estimate.shape import ModelShape
from memfit.estimate.spec import RunSpec

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


def trl_scored_tokens(spec: RunSpec) -> int:
    """The positions TRL's fused head scores: ``ceil(loss_token_share x b x (s-1))`` on CUDA (only labels != -100),
    every one of the b x (s-1) elsewhere.

    >>> trl_scored_tokens(RunSpec(batch=2, seq=1025, loss="trl", loss_token_share=0.25))
    512
    >>> trl_scored_tokens(RunSpec(batch=2, seq=1025, loss="trl", loss_token_share=0.25, device="cpu"))
    2048
    """
    every = spec.batch * (spec.seq - 1)
    if spec.device != "cuda":
        return every
    return min(every, math.ceil(spec.loss_token_share * every))


def trl_loss_bytes(spec: RunSpec, shape: ModelShape, *, head_trained: bool) -> int:
    """:func:`trl_head_bytes` for ``spec`` on ``shape``: the tokens of :func:`trl_scored_tokens`, the last hidden state
    and the head's weight in the weights' dtype, the tiles in the compute dtype."""
    return trl_head_bytes(tokens=trl_scored_tokens(spec), vocab=shape.vocab, hidden=shape.embed_dim,
                          weight_itemsize=spec.weight_bytes, compute_itemsize=spec.compute_bytes,
                          head_trained=head_trained)


def trl_forward_bytes(spec: RunSpec, shape: ModelShape) -> int:
    """What TRL's fused head keeps after its forward (what the backward reads): the hidden-state copy ``N*h``, the
    targets ``N*8``, ``log_z`` and ``entropy`` ``2*N*4``, with N = :func:`trl_scored_tokens`."""
    n = trl_scored_tokens(spec)
    return n * shape.embed_dim * spec.weight_bytes + n * 8 + 2 * n * 4


def trl_offloaded_bytes(spec: RunSpec, shape: ModelShape, *, min_bytes: int) -> int:
    """Under ``--offload-activations`` (TRL's ``OffloadActivations``): what of :func:`trl_forward_bytes` goes to the
    host, each tensor ``_ChunkedLogProbFunction`` saves that is at least ``min_bytes`` (the hidden-state copy, the
    targets, ``log_z``, ``entropy``); the fused head reads ``lm_head.weight`` directly, outside the lm_head module that
    TRL keeps on the device, and the weight itself is a parameter (never moved).

    Measured (scaled Llama 3.2, h 256, LoRA fp32, checkpointing, b2 s64: N = 126 scored positions): the hidden copy
    126*256*4 = 129,024 B moves; the targets (126*8 = 1,008 B), ``log_z`` and ``entropy`` (504 B each) stay under
    1,024 B. The real step put 653,312 B on the host: the checkpoints' 524,288 B + 129,024 B.

    >>> from memfit.estimate.catalogue import lookup
    >>> s = RunSpec(batch=2, seq=64, loss="trl", device="cpu", precision="fp32", offload_activations=True)
    >>> trl_offloaded_bytes(s, lookup("llama-3.2-1b").shape, min_bytes=1024)  # h 2048: 126*2048*4
    1032192
    """
    n = trl_scored_tokens(spec)
    pieces = (n * shape.embed_dim * spec.weight_bytes, n * 8, n * 4, n * 4)
    return sum(p for p in pieces if p >= min_bytes)

