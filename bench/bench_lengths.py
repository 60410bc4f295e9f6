"""memfit lengths: batched encoding through the fast tokenizer vs one example at a time, on GSM8K train
(7,473 prompt/completion pairs) and the 500 ShareGPT chats, with the real tokenizers in ../shared.

Writes the `## lengths` section of bench/RESULTS.md. Run: `.venv/bin/python bench/bench_lengths.py`.
The machine is shared: the load average before the run is recorded beside the figures.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from _results import write_section as write_results_section  # bench/_results.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # what the CLI uses

from memfit.data.formats import load_records  # noqa: E402
from memfit.data.lengths import length_report  # noqa: E402
from memfit.data.tokenize import tokenize_records  # noqa: E402
from memfit.data.tokenizer import load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
SHARED = HERE.parent.parent / "shared"
TOKENIZERS = [("llama2", SHARED / "tokenizers" / "llama2"), ("qwen3", SHARED / "tokenizers" / "qwen3"),
              ("gpt-neox-20b", SHARED / "tokenizers" / "gpt-neox-20b" / "tokenizer.json")]
REPEATS = 3


def _best_time(fn) -> tuple[float, float, object]:  # type: ignore[no-untyped-def]
    """Fastest wall-clock seconds and fastest process CPU seconds (all threads) over REPEATS runs: on a shared
    machine the minimum is the least disturbed run (timeit's advice), and CPU time is what the work costs."""
    walls, cpus, out = [], [], None
    for _ in range(REPEATS):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), out


def one_by_one_pc(tok, records):  # type: ignore[no-untyped-def]
    """What a loop over examples does: one tokenizer call per prompt and per completion."""
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    out = []
    for r in records:
        p = tok(r["question"]).input_ids
        c = tok(r["answer"], add_special_tokens=False).input_ids + eos
        out.append(len(p) + len(c))
    return out


def one_by_one_chat(tok, records):  # type: ignore[no-untyped-def]
    out = []
    for r in records:
        msgs = [{"role": "user" if m["from"] == "human" else "assistant", "content": m["value"]}
                for m in r["conversations"]]
        out.append(len(tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]))
    return out


def run() -> list[str]:
    load1 = os.getloadavg()[0]
    gsm = load_records(SHARED / "data" / "gsm8k" / "train.jsonl", prompt="question", completion="answer").records
    chats = load_records(SHARED / "data" / "chat" / "conversations.json", messages="conversations").records
    rows = ["| data | tokenizer | tokens | batched wall / CPU (s) | one by one wall / CPU (s) | speed-up (wall) | "
            "batched tokens/s (wall) | p95 | recommended | waste random / grouped / packed (b8, 2048) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, path in TOKENIZERS:
        tok = load_tokenizer(path)
        jobs = [("GSM8K train (7,473)", gsm,
                 lambda tok=tok: tokenize_records(tok, gsm, prompt="question", completion="answer", progress=False),
                 lambda tok=tok: one_by_one_pc(tok, gsm))]
        if tok.chat_template:
            jobs.append(("ShareGPT chats (500)", chats,
                         lambda tok=tok: tokenize_records(tok, chats, messages="conversations", progress=False),
                         lambda tok=tok: one_by_one_chat(tok, chats)))
        for label, _records, batched, single in jobs:
            t_batched, c_batched, examples = _best_time(batched)
            t_single, c_single, lengths = _best_time(single)
            lens = [len(e) for e in examples]  # type: ignore[attr-defined]
            if lens != lengths:
                raise SystemExit(f"{name} {label}: batched and one-by-one lengths differ")
            r = length_report(lens, seq_len=2048, batch=8, examples=examples, mode="x")  # type: ignore[arg-type]
            w = r.padding
            rows.append(f"| {label} | {name} | {r.total_tokens:,} | {t_batched:.2f} / {c_batched:.2f} | "
                        f"{t_single:.2f} / {c_single:.2f} | "
                        f"{t_single / t_batched:.1f}x | {r.total_tokens / t_batched:,.0f} | {r.p95} | "
                        f"{r.recommended_seq_len} | {w.random.waste:.1%} / {w.grouped.waste:.1%} / "
                        f"{w.packed.waste:.1%} |")
            print(rows[-1], flush=True)
    load2 = os.getloadavg()[0]
    return rows + ["", f"Best of {REPEATS} runs each (wall and process CPU time, all threads), {os.cpu_count()} "
                   "cores shared with other sessions "
                   f"(1-minute load average {load1:.1f} before, {load2:.1f} after the run), "
                   "TOKENIZERS_PARALLELISM=true. Batched = `tokenize_records` (the fast tokenizer's batch "
                   "encode, 1,024 texts a call, labels built too); one by one = a Python loop calling the "
                   "tokenizer per prompt and per completion (chats: `apply_chat_template(tokenize=True)` per "
                   "conversation). Both give identical lengths (checked). Tokenizer loading is not timed."]


def write_section(rows: list[str]) -> None:
    write_results_section("lengths", "`memfit lengths`: tokenising real data with the real tokenizer, batched vs one "
                          "by one (bench/bench_lengths.py).\n\n" + "\n".join(rows))


if __name__ == "__main__":
    write_section(run())
    sys.exit(0)
