"""Packing: memfit's row-by-row largest fit with exact fit and look-ahead beside next-fit and first-fit on
1,000,000 lengths, and the training throughput of packed vs padded batches on GSM8K on the CPU.

Writes the `## pack` section of bench/RESULTS.md. Run: `.venv/bin/python bench/bench_pack.py`
(`--quick` for 100k lengths and fewer training steps).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from _results import write_section as write_results_section  # bench/_results.py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"
RESULTS = HERE / "RESULTS.md"


# ------------------------------------------------------------------------------------------------ baselines


def next_fit(lengths: np.ndarray, max_len: int) -> int:
    """Next-fit in input order: one open row; an item that does not fit closes it. O(n). Returns rows."""
    rows = 0
    room = 0
    for s in lengths.tolist():
        if s > room:
            rows += 1
            room = max_len
        room -= s
    return rows


def first_fit(lengths: np.ndarray, max_len: int) -> int:
    """First-fit in input order: each item into the lowest-numbered row with room, found by descending a
    max-segment-tree over the rows' room. O(n log n), in Python. Returns rows."""
    n = len(lengths)
    size = 1
    while size < n:
        size *= 2
    tree = [0] * (2 * size)  # leaves: room of row i (0 until opened), internal nodes: max of children
    rows = 0
    for s in lengths.tolist():
        if tree[1] >= s:
            i = 1
            while i < size:
                i = 2 * i if tree[2 * i] >= s else 2 * i + 1
        else:
            i = size + rows
            rows += 1
            tree[i] = max_len
        tree[i] -= s
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2
    return rows


# ------------------------------------------------------------------------------------------------ lengths


def gsm8k_lengths() -> np.ndarray:
    from memfit.data.formats import load_records
    from memfit.data.tokenize import tokenize_records
    from memfit.data.tokenizer import load_tokenizer

    tok = load_tokenizer(SHARED / "tokenizers" / "llama2")
    recs = load_records(SHARED / "data" / "gsm8k" / "train.jsonl", prompt="question", completion="answer")
    ex = tokenize_records(tok, recs.records, prompt="question", completion="answer", progress=False)
    return tok, ex, np.array([len(e.input_ids) for e in ex])


def best_of(repeats: int, fn, *args):
    """Fastest of ``repeats`` runs as (wall seconds, CPU seconds of this process, result). The box is shared:
    the minimum is the least disturbed run, and CPU seconds leave out the time spent waiting for a core."""
    best = cpu_best = math.inf
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn(*args)
        best = min(best, time.perf_counter() - t)
        cpu_best = min(cpu_best, time.process_time() - c)
    return best, cpu_best, out


def packing_rows(n: int, gsm: np.ndarray) -> list[str]:
    from memfit.data.binpack import fill_rows, pack_lengths

    rng = np.random.default_rng(0)
    dists = {
        "lognormal chat-like (median 350, sigma 0.9)": lambda L: np.clip(
            np.round(rng.lognormal(math.log(350), 0.9, n)), 1, L).astype(np.int64),
        "GSM8K-like (resampled llama2 lengths of GSM8K train)": lambda L: rng.choice(gsm, n).astype(np.int64),
    }
    out = [
        f"### Packing {n:,} lengths (1 thread; memfit: fastest of 3 runs, baselines: 1 run; wall clock on a "
        "shared 2-core box, see the load average above)",
        "",
        "| lengths | max_len | algorithm | wall (s) | CPU (s) | rows | efficiency | lower bound rows | bound / rows |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, make in dists.items():
        for max_len in (2048, 4096):
            lengths = make(max_len)
            bound = math.ceil(int(lengths.sum()) / max_len)
            runs = []
            secs, cpu, (_, starts) = best_of(3, fill_rows, lengths, max_len)
            runs.append(("memfit fill (`fill_rows`, CSR)", secs, cpu, len(starts) - 1))
            secs, cpu, bins = best_of(3, pack_lengths, lengths, max_len)
            runs.append(("memfit fill (`pack_lengths`, lists)", secs, cpu, len(bins)))
            secs, cpu, nf = best_of(1, next_fit, lengths, max_len)
            runs.append(("next-fit (Python loop)", secs, cpu, nf))
            secs, cpu, ff = best_of(1, first_fit, lengths, max_len)
            runs.append(("first-fit (Python segment tree)", secs, cpu, ff))
            for algo, secs, cpu, rows in runs:
                eff = int(lengths.sum()) / (rows * max_len)
                out.append(f"| {name} | {max_len:,} | {algo} | {secs:.3f} | {cpu:.3f} | {rows:,} | {eff:.3%} | "
                           f"{bound:,} | {bound / rows:.4%} |")
                print(out[-1], flush=True)
    return out


# ------------------------------------------------------------------------------------------------ throughput


def throughput_rows(tok, examples, steps: int) -> list[str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from memfit.data.pack import pack
    from memfit.data.torch.collator import PackedCollator
    from memfit.estimate.constants import IGNORE_INDEX

    torch.set_num_threads(2)
    config = AutoConfig.for_model("llama", vocab_size=len(tok), hidden_size=128, intermediate_size=344,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                  max_position_embeddings=2048, use_cache=False)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(examples))
    batch = 8

    def padded_batches():
        for i in range(0, len(order), batch):
            chunk = [examples[j] for j in order[i : i + batch]]
            t = max(len(e.input_ids) for e in chunk)
            ids = torch.zeros((len(chunk), t), dtype=torch.long)
            labels = torch.full((len(chunk), t), IGNORE_INDEX, dtype=torch.long)
            mask = torch.zeros((len(chunk), t), dtype=torch.long)
            for r, e in enumerate(chunk):
                n = len(e.input_ids)
                ids[r, :n] = torch.tensor(e.input_ids)
                labels[r, :n] = torch.tensor(e.labels)
                mask[r, :n] = 1
            yield {"input_ids": ids, "labels": labels, "attention_mask": mask}, int(mask.sum()), len(chunk) * t

    shuffled = [examples[j] for j in order]
    collate = PackedCollator()

    def packed_batches(seq_len: int, rows_per_batch: int):
        rows = pack(shuffled, seq_len).rows
        perm = np.random.default_rng(1).permutation(len(rows))  # rows come out longest examples first: shuffle
        for i in range(0, len(rows), rows_per_batch):
            chunk = [rows[j] for j in perm[i : i + rows_per_batch]]
            b = collate(chunk)
            yield b, sum(r.n_tokens for r in chunk), b["input_ids"].numel()

    results = []
    for name, gen in (("padded (batch 8, pad to longest, 2D mask)", padded_batches),
                      ("packed (1 row of 2,048, position_ids, no mask)", lambda: packed_batches(2048, 1)),
                      ("packed (2 rows of 1,024, position_ids, no mask)", lambda: packed_batches(1024, 2))):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        it = gen()
        real = slots = 0
        elapsed = 0.0
        for step in range(steps + 1):
            inputs, n_real, n_slots = next(it)
            t = time.perf_counter()
            loss = model(**inputs).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t
            if step:  # step 0 warms up
                real += n_real
                slots += n_slots
                elapsed += dt
        results.append((name, real, slots, elapsed))
        print(name, real, slots, f"{elapsed:.2f}s", f"{real / elapsed:,.0f} real tok/s", flush=True)
    base = results[0][1] / results[0][3]
    out = [
        "",
        f"### Training throughput: GSM8K train, Llama 2 tokenizer, random Llama (2 layers, hidden 128, vocab "
        f"{len(tok):,}), fp32, AdamW, CPU 2 threads, {steps} steps after 1 warm-up",
        "",
        "| batches | real tokens | token slots | seconds | real tokens / s | slots / s | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, real, slots, secs in results:
        out.append(f"| {name} | {real:,} | {slots:,} | {secs:.2f} | {real / secs:,.0f} | {slots / secs:,.0f} | "
                   f"{real / secs / base:.2f}x |")
    return out


def write_section(rows: list[str]) -> None:
    write_results_section("pack", "\n".join([
        "`memfit pack`: row-by-row largest fit with exact fit and look-ahead (`memfit.data.binpack.fill_rows`, "
        "best-fit decreasing until commit 7bc6b60) beside next-fit and first-fit, and "
        "training throughput packed vs padded (`.venv/bin/python bench/bench_pack.py`). Efficiency = real tokens "
        "/ (rows x max_len); lower bound = ceil(tokens / max_len) rows; `bound / rows` = 100% is optimal. "
        f"Load average when run: {os.getloadavg()[0]:.1f} on 2 cores.",
        "",
        *rows,
    ]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100k lengths, 3 training steps")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tok, examples, gsm = gsm8k_lengths()
    rows = packing_rows(100_000 if args.quick else 1_000_000, gsm)
    rows += throughput_rows(tok, examples, 3 if args.quick else 10)
    rows += [
        "",
        "Reading it: memfit's packer is within 0.1% of the bound (ceil(tokens / max_len), which assumes examples "
        "could be cut anywhere) on both distributions. Best-fit decreasing, its previous algorithm, measured by "
        "this script before commit 7bc6b60 on the same lengths: 99.98% / 99.99% of the bound on chat-like, but "
        "99.31% (2,048) / 99.66% (4,096) on GSM8K-like lengths, where no example is shorter than ~60 tokens and "
        "best fit ends many rows with a gap shorter than any example left; filling one row at a time, with an "
        "exact fit or a longest example whose leftover the remaining lengths can still fill, closes those gaps. "
        "First-fit in input order wastes several times more, next-fit 3-19%. Real tokens per second is the figure that "
        "matters for training: padded batches spend compute on pad slots; packed rows have none, but each packed "
        "row of 2,048 has a longer attention span (sdpa with a materialised block mask), so slots/s is lower "
        "than for short padded batches.",
    ]
    write_section(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
