"""Collating packed rows into batches a transformers 5 model treats as separate sequences.

Two forms, chosen with ``attention=``:

``"position_ids"`` (default; eager, sdpa and flash attention)
    ``input_ids``, ``labels`` and ``position_ids`` of shape ``(B, T)``, **no** ``attention_mask``, and
    ``use_cache=False``. Rows shorter than ``T`` are padded at the end with ``pad_token_id``, labels -100 and
    positions that restart at 0 (so the padding is one more sequence of its own). How transformers 5.24 keeps
    the examples apart:

    * eager and sdpa: ``masking_utils.create_causal_mask`` calls ``find_packed_sequence_indices`` when
      ``attention_mask is None and cache is None`` and ANDs the causal mask with "same sequence", a sequence
      starting wherever ``position_ids`` does not step by +1. **Trap:** if the model builds a cache (it does
      whenever ``use_cache`` is true, and ``config.use_cache`` defaults to true for most models, even in
      ``train()`` mode), the detection is skipped and examples attend across their boundaries, silently. The
      Trainer sets ``config.use_cache = args.use_cache`` (False by default); a plain PyTorch loop does not,
      so every batch carries ``use_cache=False``.
    * flash attention (``modeling_flash_attention_utils._flash_attention_forward``): without an attention mask
      it infers ``cu_seqlens`` from ``position_ids`` only when the batch has **one** row
      (``_is_packed_sequence`` requires ``batch_size == 1``); for ``B > 1`` it would attend across examples.
      So the batch also carries ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32, cumulative over the flattened
      ``B * T`` tokens, padding segments included) and ``max_length_q``/``max_length_k``, which flash uses
      directly (varlen path); eager and sdpa ignore them.

``"block_mask"`` (eager and sdpa only)
    The same plus a 4D additive float ``attention_mask`` of shape ``(B, 1, T, T)``: 0 where query and key are
    in the same example and the key is not later, the dtype's most negative value elsewhere.
    transformers passes a 4D mask through unchanged, so this works where the model does **not** derive
    boundaries from ``position_ids`` (custom or older modeling code, or a forward that keeps a cache). It
    costs ``B * T * T * dtype_bytes`` (:func:`memfit.estimate.attention_mask.block_mask_bytes`; 256 MiB at
    B=4, T=4096, fp32), and ``mask_dtype`` must match the model's dtype for sdpa. Flash attention cannot take it.

Both forms are checked against each example run alone in ``tests/data/with_torch/test_collator.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, Dataset

from memfit.data.pack import PackedRow, PackResult
from memfit.errors import MemfitError
from memfit.estimate.attention_mask import block_mask_bytes
from memfit.estimate.constants import IGNORE_INDEX

AttentionForm = Literal["position_ids", "block_mask"]
ATTENTION_FORMS: tuple[str, ...] = ("position_ids", "block_mask")

__all__ = ["ATTENTION_FORMS", "PackedCollator", "PackedDataset", "block_mask", "packed_dataloader"]


def _row_fields(row: PackedRow | Mapping[str, Any]) -> tuple[list[int], list[int], list[int]]:
    """``(input_ids, labels, seq_lens)`` of a row. The Trainer drops dataset columns its model's forward does
    not name (``remove_unused_columns``), so ``seq_lens`` may be gone: then the example boundaries are read
    from ``position_ids`` (a new example wherever the position is 0)."""
    if isinstance(row, PackedRow):
        return row.input_ids, row.labels, row.seq_lens
    if "input_ids" not in row or "labels" not in row or ("seq_lens" not in row and "position_ids" not in row):
        raise MemfitError(
            f"a packed row needs input_ids, labels and seq_lens or position_ids; this one has {sorted(row)}: "
            "pack it with memfit pack"
        )
    ids, labels = list(row["input_ids"]), list(row["labels"])
    if "seq_lens" in row:
        return ids, labels, list(row["seq_lens"])
    starts = [i for i, p in enumerate(row["position_ids"]) if p == 0] + [len(ids)]
    if not ids or starts[0] != 0:
        raise MemfitError("a packed row's position_ids must start at 0 for its first example")
    return ids, labels, [b - a for a, b in zip(starts[:-1], starts[1:], strict=True)]


def block_mask(segment_ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive causal block-diagonal mask ``(B, 1, T, T)`` from per-token segment ids ``(B, T)``.

    ``mask[b, 0, q, k] = 0`` if ``segment_ids[b, q] == segment_ids[b, k]`` and ``k <= q``, else
    ``torch.finfo(dtype).min``. Segments ``[0, 0, 1]`` give rows ``[0, min, min]``, ``[0, 0, min]``,
    ``[min, min, 0]``.
    """
    t = segment_ids.shape[1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = torch.ones(t, t, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = same & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None, :, :]


@dataclass(frozen=True, kw_only=True, slots=True)
class PackedCollator:
    """Turn a list of packed rows (``PackedRow`` or dicts with ``input_ids``, ``labels``, ``seq_lens``) into
    a batch; see the module docstring for the two ``attention`` forms and which attention kernels need which.

    ``pad_to`` fixes ``T`` (e.g. the packing ``max_len``, for static shapes); otherwise ``T`` is the longest row
    in the batch, rounded up to ``pad_to_multiple_of`` when given.
    """

    pad_token_id: int = 0
    attention: AttentionForm = "position_ids"
    pad_to: int | None = None
    pad_to_multiple_of: int | None = None
    mask_dtype: torch.dtype = torch.float32
    flash_kwargs: bool = True

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_FORMS:
            raise MemfitError(f"unknown attention form {self.attention!r}: choose one of {', '.join(ATTENTION_FORMS)}")

    def seq_len(self, longest: int) -> int:
        t = longest
        if self.pad_to is not None:
            if longest > self.pad_to:
                raise MemfitError(f"a packed row has {longest:,} tokens, more than pad_to={self.pad_to:,}")
            t = self.pad_to
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            t = -(-t // m) * m
        return t

    def mask_bytes(self, batch: int, seq_len: int) -> int:
        """Bytes of the 4D mask this collator materialises per batch (0 in the position_ids form)."""
        if self.attention != "block_mask":
            return 0
        return block_mask_bytes(batch, seq_len, torch.finfo(self.mask_dtype).bits // 8)

    def __call__(self, features: Sequence[PackedRow | Mapping[str, Any]]) -> dict[str, Any]:
        if not features:
            raise MemfitError("cannot collate an empty batch")
        rows = [_row_fields(f) for f in features]
        b = len(rows)
        t = self.seq_len(max(len(ids) for ids, _, _ in rows))
        input_ids = torch.full((b, t), self.pad_token_id, dtype=torch.long)
        labels = torch.full((b, t), IGNORE_INDEX, dtype=torch.long)
        position_ids = torch.zeros((b, t), dtype=torch.long)
        segment_ids = torch.zeros((b, t), dtype=torch.long)
        cu = [0]
        max_seg = 0
        for r, (ids, labs, seq_lens) in enumerate(rows):
            n = len(ids)
            if sum(seq_lens) != n or len(labs) != n:
                raise MemfitError(f"packed row {r}: seq_lens sum to {sum(seq_lens)} but it has {n} input_ids")
            input_ids[r, :n] = torch.tensor(ids, dtype=torch.long)
            labels[r, :n] = torch.tensor(labs, dtype=torch.long)
            start = 0
            segs = list(seq_lens) + ([t - n] if t > n else [])  # the padding tail is a sequence of its own
            for j, length in enumerate(segs):
                position_ids[r, start : start + length] = torch.arange(length)
                segment_ids[r, start : start + length] = j
                cu.append(cu[-1] + length)
                max_seg = max(max_seg, length)
                start += length
        batch: dict[str, Any] = {
            "input_ids": input_ids,
            "labels": labels,
            "position_ids": position_ids,
            "use_cache": False,
        }
        if self.attention == "block_mask":
            batch["attention_mask"] = block_mask(segment_ids, self.mask_dtype)
        elif self.flash_kwargs:
            cu_t = torch.tensor(cu, dtype=torch.int32)
            batch["cu_seq_lens_q"] = batch["cu_seq_lens_k"] = cu_t
            batch["max_length_q"] = batch["max_length_k"] = max_seg
        return batch


class PackedDataset(Dataset[dict[str, list[int]]]):
    """The rows of a :class:`PackResult` as a map-style dataset of dicts (what the Trainer expects)."""

    def __init__(self, result: PackResult | Sequence[PackedRow]) -> None:
        self.rows = tuple(result.rows) if isinstance(result, PackResult) else tuple(result)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return self.rows[i].to_dict()


def packed_dataloader(
    result: PackResult | Sequence[PackedRow],
    batch_size: int,
    *,
    collator: PackedCollator | None = None,
    shuffle: bool = True,
    seed: int = 0,
) -> DataLoader[dict[str, list[int]]]:
    """A DataLoader over packed rows yielding collated batches.

    Args:
        result: the packed rows (a :class:`PackResult` or its rows).
        batch_size: rows per batch.
        collator: how rows become a batch; the position_ids form (:class:`PackedCollator`) when None.
        shuffle: draw the rows in a random order each epoch.
        seed: seed of that order.

    Returns:
        A ``torch.utils.data.DataLoader`` yielding the collator's batch dicts.
    """
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        PackedDataset(result),
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=collator or PackedCollator(),
    )
