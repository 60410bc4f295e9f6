"""Proving a packing correct: a real model gives the same logits and loss packed as alone, and labels survive.

:func:`verify_packing` runs a small real model (``memfit verify-pack`` uses :func:`tiny_llama`: a 2-layer Llama
with random, seeded weights and the tokenizer's vocabulary) twice:

* on the packed rows, collated as training would see them (:class:`memfit.data.torch.collator.PackedCollator`);
* on every packed example (or split piece) alone, as a batch of one with no mask.

It passes when

1. **logits**: for every token, ``|packed - alone| <= atol + rtol * |alone|`` (fp32: ``atol = rtol = 1e-4``;
   what we see on a correct packing is ~1e-6, from a different summation order; a leak across a boundary
   moves logits by ~1e-1);
2. **loss**: the token-weighted mean cross-entropy (transformers' causal-LM loss: ``sum(CE) / n_loss_tokens``
   over the shifted labels) of the rows equals that of the examples alone within ``loss_atol = 1e-4``, where
   the examples' loss uses their **own** labels, not the packed ones;
3. **label audit**: the loss-bearing tokens (``labels[1:] != -100``) of the rows equal those of the examples,
   every packed label equals the example's label, except the first of each example, which is -100. More
   loss tokens after packing is named as what it is: the completion-only-loss bug (prompt labels lost their
   -100, so completion-only loss quietly became full-sequence loss).

The ``mask`` says how the rows keep their examples apart: ``"position-ids"`` (positions restart, no mask),
``"block"`` (a 4D additive block mask) or ``"naive"`` (the CLI's ``--mask``; the collator calls the first two
``position_ids`` and ``block_mask``, also accepted here). The kernel is the model's ``attn_implementation``
(``--attention`` on the command line, as in every other command).

``mask="naive"`` is the classic mistake kept for demonstration: the examples concatenated with their
labels as they are, ``position_ids`` running on across examples, and a 2D all-ones ``attention_mask``. It
fails check 1 (examples see each other) and check 3 (first labels learnt from the previous example).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from memfit.data.pack import PackedRow, PackResult, Tokenized, example_fields, loss_tokens, pack
from memfit.data.torch.collator import PackedCollator
from memfit.errors import MemfitError
from memfit.estimate.constants import IGNORE_INDEX

VerifyMask = Literal["position-ids", "block", "naive"]
VERIFY_MASKS: tuple[str, ...] = ("position-ids", "block", "naive")
_COLLATOR_FORM = {"position-ids": "position_ids", "block": "block_mask", "naive": "naive"}
_MASK_ALIASES = {"position_ids": "position-ids", "block_mask": "block", "block-mask": "block"}
LOGITS_ATOL = 1e-4  # fp32; observed on correct packings: ~1e-6
LOGITS_RTOL = 1e-4
LOSS_ATOL = 1e-4  # nats, on a mean loss of ~ln(vocab) ~ 10 for random weights

__all__ = [
    "LOGITS_ATOL",
    "LOGITS_RTOL",
    "LOSS_ATOL",
    "VERIFY_MASKS",
    "VerifyResult",
    "mask_form",
    "tiny_llama",
    "verify_packing",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyResult:
    """What :func:`verify_packing` measured. ``passed`` is true only when ``failures`` is empty."""

    passed: bool
    mask: str
    attn_implementation: str
    rows: int
    examples: int
    tokens: int
    max_len: int
    max_abs_logit_diff: float
    examples_with_logit_diff: int
    atol: float
    rtol: float
    loss_packed: float
    loss_alone: float
    loss_abs_diff: float
    loss_atol: float
    loss_tokens_alone: int
    loss_tokens_packed: int
    label_mismatch_examples: int
    first_label_leaks: int
    token_mismatch_examples: int
    failures: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass": self.passed,
            "mask": self.mask,
            "attn_implementation": self.attn_implementation,
            "rows": self.rows,
            "examples": self.examples,
            "tokens": self.tokens,
            "max_len": self.max_len,
            "max_abs_logit_diff": self.max_abs_logit_diff,
            "examples_with_logit_diff": self.examples_with_logit_diff,
            "atol": self.atol,
            "rtol": self.rtol,
            "loss_packed": self.loss_packed,
            "loss_alone": self.loss_alone,
            "loss_abs_diff": self.loss_abs_diff,
            "loss_atol": self.loss_atol,
            "loss_tokens_alone": self.loss_tokens_alone,
            "loss_tokens_packed": self.loss_tokens_packed,
            "label_mismatch_examples": self.label_mismatch_examples,
            "first_label_leaks": self.first_label_leaks,
            "token_mismatch_examples": self.token_mismatch_examples,
            "failures": list(self.failures),
        }


def tiny_llama(vocab_size: int, *, max_positions: int = 4096, seed: int = 0,
               attn_implementation: str = "sdpa") -> torch.nn.Module:
    """A small Llama with random weights (seeded) and ``vocab_size`` tokens, fp32, in eval mode.

    2 layers, hidden 64, intermediate 128, 4 query heads and 2 key/value heads (grouped-query attention, as in
    Llama 3), RoPE: enough to show any leak across examples, cheap on a CPU.
    """
    from transformers import AutoModelForCausalLM

    from memfit.runtime.build import hf_config, tiny_config

    if vocab_size < 2:
        raise MemfitError(f"the model needs a vocabulary of at least 2 tokens, not {vocab_size}")
    config = hf_config(tiny_config("llama", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128,
                                   vocab=vocab_size, max_positions=max_positions))
    config.use_cache = False
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation, dtype=torch.float32)
    return model.eval()


def _naive_rows(packed: PackResult, examples: Sequence[Any]) -> list[PackedRow]:
    """The same rows concatenated naively: labels as they are, positions running on."""
    rows = []
    for row in packed.rows:
        labels: list[int] = []
        for e, off, n in zip(row.example_ids, row.example_offsets, row.seq_lens, strict=True):
            labels.extend(example_fields(examples[e])[1][off : off + n])
        rows.append(replace(row, labels=labels, position_ids=list(range(row.n_tokens))))
    return rows


def mask_form(name: str) -> str:
    """The mask form ``name`` names (``position-ids``, ``block`` or ``naive``; the collator's ``position_ids``
    and ``block_mask`` are accepted too), or a MemfitError listing the choices."""
    form = _MASK_ALIASES.get(name, name)
    if form not in VERIFY_MASKS:
        raise MemfitError(f"unknown --mask {name!r}: choose one of {' | '.join(VERIFY_MASKS)}")
    return form


def _batch(rows: Sequence[PackedRow], mask: str, pad_token_id: int, dtype: torch.dtype) -> dict[str, Any]:
    if mask != "naive":
        collator = PackedCollator(pad_token_id=pad_token_id, attention=_COLLATOR_FORM[mask],  # type: ignore[arg-type]
                                  mask_dtype=dtype)
        return collator(rows)
    t = max(r.n_tokens for r in rows)
    input_ids = torch.full((len(rows), t), pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), t), IGNORE_INDEX, dtype=torch.long)
    ones = torch.zeros((len(rows), t), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : r.n_tokens] = torch.tensor(r.input_ids)
        labels[i, : r.n_tokens] = torch.tensor(r.labels)
        ones[i, : r.n_tokens] = 1  # all ones over the real tokens: every example sees the ones before it
    return {"input_ids": input_ids, "labels": labels, "attention_mask": ones, "use_cache": False}


def _ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, int]:
    """Summed cross-entropy of ``logits[:-1]`` predicting ``labels[1:]`` (the causal-LM shift), and the count."""
    target = labels[1:]
    keep = target != IGNORE_INDEX
    if not bool(keep.any()):
        return 0.0, 0
    ce = torch.nn.functional.cross_entropy(logits[:-1].float(), target, ignore_index=IGNORE_INDEX, reduction="sum")
    return float(ce), int(keep.sum())


def verify_packing(
    model: torch.nn.Module,
    examples: Sequence[Tokenized] | Sequence[Any],
    max_len: int,
    *,
    overflow: str = "error",
    mask: VerifyMask | str = "position-ids",
    packed: PackResult | None = None,
    limit: int | None = None,
    batch_size: int = 1,
    pad_token_id: int = 0,
    atol: float = LOGITS_ATOL,
    rtol: float = LOGITS_RTOL,
    loss_atol: float = LOSS_ATOL,
    on_progress: Callable[[int, int], None] | None = None,
) -> VerifyResult:
    """Pack ``examples`` (or check the given ``packed`` result against them) and prove it with ``model``.

    The three checks and their tolerances are the module docstring's.

    Args:
        model: a causal LM (transformers) whose logits are compared, packed against alone.
        examples: the tokenized examples (objects or dicts with ``input_ids`` and ``labels``).
        max_len: the row length to pack to.
        overflow: :func:`memfit.data.pack.pack`'s policy for examples longer than ``max_len``.
        mask: how the rows keep examples apart: ``"position-ids"``, ``"block"`` or ``"naive"``
            (:func:`mask_form`).
        packed: check these rows instead of packing afresh.
        limit: keep the first ``limit`` examples (packing them afresh).
        batch_size: packed rows per forward pass.
        pad_token_id: the id that pads a batch's shorter rows.
        atol: absolute logits tolerance.
        rtol: relative logits tolerance.
        loss_atol: tolerance on the token-weighted mean loss, in nats.
        on_progress: called as ``on_progress(done, total)`` after each forward pass (the rows, then each
            example alone).

    Returns:
        What was measured, with ``passed`` and the failures named.

    Raises:
        MemfitError: an unknown ``mask``, ``limit < 1``, or nothing to verify (no example has tokens).
    """
    mask = mask_form(mask)
    if limit is not None:
        if limit < 1:
            raise MemfitError(f"--limit must be at least 1, not {limit}")
        examples = examples[:limit]
        packed = None
    if packed is None:
        packed = pack(examples, max_len, overflow=overflow)
    if not packed.rows:
        raise MemfitError("nothing to verify: no example has any tokens")
    rows = _naive_rows(packed, examples) if mask == "naive" else list(packed.rows)
    param = next(model.parameters())
    dtype = param.dtype
    device = param.device
    attn_impl = str(getattr(getattr(model, "config", None), "_attn_implementation", "unknown"))

    # Label and token audit, without the model.
    label_mismatch = first_leaks = token_mismatch = 0
    loss_alone_tokens = 0
    segments: list[tuple[int, int, int, int, int]] = []  # (row, start, example, offset, length)
    for ri, row in enumerate(rows):
        starts = row.cu_seqlens[:-1]
        for e, off, a, n in zip(row.example_ids, row.example_offsets, starts, row.seq_lens, strict=True):
            ids, labs = example_fields(examples[e])
            piece_labels = list(labs[off : off + n])
            loss_alone_tokens += loss_tokens(piece_labels)
            if list(row.input_ids[a : a + n]) != list(ids[off : off + n]):
                token_mismatch += 1
            if list(row.labels[a + 1 : a + n]) != piece_labels[1:]:
                label_mismatch += 1
            if a > 0 and row.labels[a] != IGNORE_INDEX:
                first_leaks += 1
            segments.append((ri, a, e, off, n))
    loss_packed_tokens = sum(loss_tokens(r.labels) for r in rows)

    total = -(-len(rows) // batch_size) + len(segments)
    done = 0
    max_diff = 0.0
    bad_examples = 0
    packed_sum = alone_sum = 0.0
    packed_count = alone_count = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            row_logits: dict[int, torch.Tensor] = {}
            for b0 in range(0, len(rows), batch_size):
                chunk = rows[b0 : b0 + batch_size]
                batch = _batch(chunk, mask, pad_token_id, dtype)
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                labels = batch.pop("labels")
                logits = model(**batch).logits.float()
                for i, r in enumerate(chunk):
                    n = r.n_tokens
                    s, c = _ce_sum(logits[i, :n], labels[i, :n])
                    packed_sum += s
                    packed_count += c
                    row_logits[b0 + i] = logits[i, :n].cpu()
                del logits
                done += 1
                if on_progress:
                    on_progress(done, total)
            for ri, a, e, off, n in segments:
                ids, labs = example_fields(examples[e])
                piece = torch.tensor([list(ids[off : off + n])], dtype=torch.long, device=device)
                alone = model(input_ids=piece, use_cache=False).logits[0].float().cpu()
                got = row_logits[ri][a : a + n]
                diff = (got - alone).abs()
                max_diff = max(max_diff, float(diff.max()))
                if bool((diff > atol + rtol * alone.abs()).any()):
                    bad_examples += 1
                s, c = _ce_sum(alone, torch.tensor(list(labs[off : off + n]), dtype=torch.long))
                alone_sum += s
                alone_count += c
                done += 1
                if on_progress:
                    on_progress(done, total)
    finally:
        model.train(was_training)

    loss_packed = packed_sum / packed_count if packed_count else 0.0
    loss_alone = alone_sum / alone_count if alone_count else 0.0
    loss_diff = abs(loss_packed - loss_alone)
    failures: list[str] = []
    if token_mismatch:
        failures.append(
            f"{token_mismatch:,} examples have tokens in the rows that differ from the data: tokens were lost"
        )
    if bad_examples:
        failures.append(
            f"{bad_examples:,} of {len(segments):,} examples give different logits packed than alone (max |diff| "
            f"{max_diff:.3g} > atol {atol:g} + rtol {rtol:g}): examples attend across their boundaries; use "
            "position_ids that restart at 0, no 2D attention_mask and use_cache=False, or a 4D block mask"
        )
    if loss_packed_tokens != loss_alone_tokens:
        more = loss_packed_tokens > loss_alone_tokens
        failures.append(
            f"completion-only-loss bug: the packed rows carry {loss_packed_tokens:,} loss-bearing tokens, the "
            f"examples {loss_alone_tokens:,}"
            + (": prompt labels lost their -100, so completion-only loss became full-sequence loss" if more else "")
        )
    elif label_mismatch:
        failures.append(f"{label_mismatch:,} examples have packed labels that differ from their own labels")
    if first_leaks:
        failures.append(
            f"{first_leaks:,} examples are trained to predict their first token from the previous example "
            "(their first label in the row is not -100)"
        )
    if loss_diff > loss_atol:
        failures.append(
            f"the token-weighted loss differs: packed {loss_packed:.6f}, alone {loss_alone:.6f} "
            f"(|diff| {loss_diff:.3g} > {loss_atol:g})"
        )
    return VerifyResult(
        passed=not failures,
        mask=mask,
        attn_implementation=attn_impl,
        rows=len(rows),
        examples=len(segments),
        tokens=sum(r.n_tokens for r in rows),
        max_len=packed.max_len,
        max_abs_logit_diff=max_diff,
        examples_with_logit_diff=bad_examples,
        atol=atol,
        rtol=rtol,
        loss_packed=loss_packed,
        loss_alone=loss_alone,
        loss_abs_diff=loss_diff,
        loss_atol=loss_atol,
        loss_tokens_alone=loss_alone_tokens,
        loss_tokens_packed=loss_packed_tokens,
        label_mismatch_examples=label_mismatch,
        first_label_leaks=first_leaks,
        token_mismatch_examples=token_mismatch,
        failures=tuple(failures),
    )
