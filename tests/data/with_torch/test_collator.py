"""The collator's batches keep examples apart in a real transformers 5 model: packed logits == alone logits."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from memfit.data.pack import PackResult, pack  # noqa: E402
from memfit.data.torch.collator import PackedCollator, PackedDataset, block_mask, packed_dataloader  # noqa: E402
from memfit.data.torch.verify import tiny_llama  # noqa: E402
from memfit.estimate.constants import IGNORE_INDEX  # noqa: E402

VOCAB = 300


def _examples(n: int = 14, seed: int = 0) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(2, 30))
        ids = rng.integers(0, VOCAB, length).tolist()
        k = length // 3
        out.append({"input_ids": ids, "labels": [IGNORE_INDEX] * k + ids[k:]})
    return out


def _packed() -> tuple[list[dict[str, list[int]]], PackResult]:
    ex = _examples()
    res = pack(ex, 64)
    # Guards: several examples share a row, and rows differ in length (so the batch has padding).
    assert max(len(r.example_ids) for r in res.rows) >= 3
    assert len({r.n_tokens for r in res.rows}) > 1
    return ex, res


def _assert_packed_equals_alone(model: object, batch: dict, res: PackResult, ex: list, atol: float) -> None:
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        checked = 0
        for r, row in enumerate(res.rows):
            for e, a, n in zip(row.example_ids, row.cu_seqlens[:-1], row.seq_lens, strict=True):
                alone = model(input_ids=torch.tensor([ex[e]["input_ids"]]), use_cache=False).logits[0]
                torch.testing.assert_close(logits[r, a : a + n], alone, atol=atol, rtol=1e-4)
                checked += 1
    assert checked == len(ex)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("form", ["position_ids", "block_mask"])
def test_packed_rows_give_the_logits_of_each_example_alone(attn: str, form: str) -> None:
    ex, res = _packed()
    model = tiny_llama(VOCAB, attn_implementation=attn)
    batch = PackedCollator(attention=form)(list(res.rows))  # type: ignore[arg-type]
    assert batch["input_ids"].shape == (res.n_rows, max(r.n_tokens for r in res.rows))
    assert ("attention_mask" in batch) == (form == "block_mask")
    _assert_packed_equals_alone(model, batch, res, ex, atol=1e-4)


def test_the_use_cache_trap_is_real_and_the_batch_avoids_it() -> None:
    # config.use_cache=True (the default of most checkpoints): the model builds a cache even in train mode, and
    # transformers then skips packed-sequence detection, so examples attend across boundaries.
    ex, res = _packed()
    model = tiny_llama(VOCAB, attn_implementation="sdpa")
    model.config.use_cache = True
    batch = PackedCollator()(list(res.rows))
    assert batch["use_cache"] is False
    _assert_packed_equals_alone(model, batch, res, ex, atol=1e-4)
    leaky = {k: v for k, v in batch.items() if k not in ("labels", "use_cache")}
    with torch.no_grad():
        with_cache = model(**leaky).logits
        without = model(**leaky, use_cache=False).logits
    assert (with_cache - without).abs().max() > 1e-2


def test_block_mask_by_hand() -> None:
    neg = torch.finfo(torch.float32).min
    m = block_mask(torch.tensor([[0, 0, 1]]))
    assert m.shape == (1, 1, 3, 3)
    assert m[0, 0].tolist() == [[0.0, neg, neg], [0.0, 0.0, neg], [neg, neg, 0.0]]


def test_mask_bytes_match_the_tensor() -> None:
    _, res = _packed()
    rows = list(res.rows)
    for dtype, width in ((torch.float32, 4), (torch.bfloat16, 2)):
        collator = PackedCollator(attention="block_mask", mask_dtype=dtype, pad_to=64)
        mask = collator(rows)["attention_mask"]
        assert mask.shape == (len(rows), 1, 64, 64)
        assert mask.numel() * mask.element_size() == collator.mask_bytes(len(rows), 64)
        assert collator.mask_bytes(len(rows), 64) == len(rows) * 64 * 64 * width  # (B, 1, T, T) by hand
    assert PackedCollator().mask_bytes(8, 4096) == 0


def test_padding_is_its_own_sequence_and_flash_kwargs_cover_the_batch() -> None:
    rows = [
        {"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "seq_lens": [2, 1]},
        {"input_ids": [4, 5, 6, 7, 8], "labels": [-100, 5, 6, 7, 8], "seq_lens": [5]},
    ]
    batch = PackedCollator(pad_token_id=9)(rows)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 9, 9], [4, 5, 6, 7, 8]]
    assert batch["labels"].tolist() == [[-100, 2, 3, -100, -100], [-100, 5, 6, 7, 8]]
    assert batch["position_ids"].tolist() == [[0, 1, 0, 0, 1], [0, 1, 2, 3, 4]]
    assert batch["cu_seq_lens_q"].dtype == torch.int32
    assert batch["cu_seq_lens_q"].tolist() == [0, 2, 3, 5, 10]  # over the flattened 2 x 5 tokens
    assert batch["max_length_q"] == 5
    assert PackedCollator(pad_to_multiple_of=8)(rows)["input_ids"].shape == (2, 8)


def test_dataloader_yields_every_row_once() -> None:
    _, res = _packed()
    seen = []
    for batch in packed_dataloader(res, batch_size=2, seed=1):
        assert set(batch) >= {"input_ids", "labels", "position_ids", "use_cache"}
        assert "attention_mask" not in batch
        seen.extend(sorted(batch["input_ids"][i][batch["labels"][i] != IGNORE_INDEX].tolist())
                    for i in range(batch["input_ids"].shape[0]))
    want = [sorted(t for t, lab in zip(r.input_ids, r.labels, strict=True) if lab != IGNORE_INDEX) for r in res.rows]
    assert sorted(seen) == sorted(want)


def test_trainer_step_on_packed_rows(tmp_path) -> None:
    from transformers import Trainer, TrainingArguments

    ex, res = _packed()
    model = tiny_llama(VOCAB, attn_implementation="sdpa")
    model.config.use_cache = True  # the collator's use_cache=False must win regardless
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=1, report_to=[],
                             use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=PackedDataset(res), data_collator=PackedCollator())
    model.eval()
    batch = PackedCollator()([r.to_dict() for r in res.rows])
    with torch.no_grad():
        loss = float(trainer.compute_loss(model, batch))
        total = count = 0.0
        for e in ex:  # token-weighted loss of the examples alone, by hand
            logits = model(input_ids=torch.tensor([e["input_ids"]]), use_cache=False).logits[0]
            target = torch.tensor(e["labels"][1:])
            total += float(torch.nn.functional.cross_entropy(logits[:-1], target, reduction="sum"))
            count += int((target != IGNORE_INDEX).sum())
    assert loss == pytest.approx(total / count, abs=1e-5)
    trainer.train()
    assert np.isfinite(trainer.state.log_history[-1]["train_loss"])


@pytest.mark.cuda
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs the flash_attn package")
def test_flash_attention_varlen_keeps_examples_apart() -> None:
    ex, res = _packed()
    model = tiny_llama(VOCAB, attn_implementation="flash_attention_2").to("cuda", torch.bfloat16)
    batch = {k: v.to("cuda") if isinstance(v, torch.Tensor) else v for k, v in PackedCollator()(list(res.rows)).items()}
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()
        for r, row in enumerate(res.rows):
            for e, a, n in zip(row.example_ids, row.cu_seqlens[:-1], row.seq_lens, strict=True):
                alone = model(input_ids=torch.tensor([ex[e]["input_ids"]], device="cuda"), use_cache=False).logits[0]
                torch.testing.assert_close(logits[r, a : a + n], alone.float(), atol=2e-2, rtol=2e-2)


def test_boundaries_from_position_ids_when_seq_lens_was_dropped() -> None:
    # The Trainer removes columns the model's forward does not name (seq_lens, cu_seqlens, example_ids).
    _, res = _packed()
    full = PackedCollator()([r.to_dict() for r in res.rows])
    trimmed = PackedCollator()([
        {"input_ids": r.input_ids, "labels": r.labels, "position_ids": r.position_ids} for r in res.rows
    ])
    for key in ("input_ids", "labels", "position_ids", "cu_seq_lens_q"):
        assert torch.equal(full[key], trimmed[key])
