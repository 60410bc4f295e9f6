"""The JSON each page is rendered from in the tests: real ``--json`` outputs of the five commands (the
README's examples), kept here so the pages and their screenshots are reproducible.

estimate.json  memfit estimate llama-3.1-8b --rank 16 --batch 4 --seq 2048 --gpu 24GiB --json
fit.json       memfit fit llama-3.1-8b --gpu 24GiB --rank 64 --batch 4 --seq 2048 --json
trace.json     memfit trace llama-3.1-8b --rank 16 --batch 4 --seq 2048 --gpu 24GiB --json
measure.json   memfit measure tiny-llama.json --batch 1,2,4 --seq 128,256 --checkpointing both --device cpu
               --precision fp32 --method lora --steps 3 --json   (a 4-layer llama, hidden 128, on 2 CPU cores)
lengths.json   memfit lengths gsm8k/train.jsonl --tokenizer llama2 --prompt question --completion answer
               --seq-len 2048 --batch 8 --model llama-3.1-8b --json

legacy/ holds estimate and fit JSON as memfit wrote it before the moments were typed and the advisor's JSON
carried no sentences (``moments`` as {label: bytes}, each step's ``cost`` and each skip's ``reason`` in
words, the GPU named in the spec): a saved file of that form still renders (``memfit report``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
COMMANDS = ("estimate", "trace", "measure", "fit", "lengths")


LEGACY = ("estimate", "fit")


def load(command: str, *, legacy: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / ("legacy" if legacy else "") / f"{command}.json").read_text())
    return data


def timeline_peak_paths(d: dict[str, Any]) -> set[tuple[Any, ...]]:
    """The categories of the timeline's highest point (the first of equals), listed as alive at the peak."""
    timeline = d.get("timeline") or []
    if not timeline:
        return set()
    totals = [sum(p["bytes_by_category"].values()) for p in timeline]
    i = totals.index(max(totals))
    return {("timeline", i, "bytes_by_category", c) for c, v in timeline[i]["bytes_by_category"].items() if v}


def required_paths(command: str, d: dict[str, Any]) -> set[tuple[Any, ...]]:
    """The figures each page must show (so the figure check cannot pass on an empty page)."""
    if command == "estimate":
        paths = {("peak_bytes",), ("reserved_bytes",), ("gpu_bytes",), ("activation_bytes",), ("rule_of_thumb_bytes",)}
        paths |= {("components", k) for k, v in d["components"].items() if v}
        moments = d["moments"]
        paths |= ({("moments", i, "total") for i in range(len(moments))} if isinstance(moments, list)
                  else {("moments", k) for k in moments})
        paths |= {("activations_per_layer", k) for k in d["activations_per_layer"]}
        paths |= {("model_states", k) for k, v in d["model_states"].items() if v}
    elif command == "trace":
        paths = {("peak_bytes",), ("reserved_bytes",), ("gpu_bytes",), ("estimate", "peak_bytes"),
                 ("saved_for_backward", "total"), ("saved_for_backward", "by_layer", "layer 0")}
        paths |= {("components", k) for k, v in d["components"].items() if v}
        paths |= timeline_peak_paths(d) if d.get("timeline") else {("phase_peaks", k) for k in d["phase_peaks"]}
    elif command == "measure":
        paths = {("runs", i, "peak_bytes") for i, r in enumerate(d["runs"]) if r["fits"]}
        paths |= {("peak_vs_batch", i, "r2") for i in range(len(d["peak_vs_batch"]))}
        paths |= {("peak_vs_batch", i, "slope_bytes_per_sample") for i in range(len(d["peak_vs_batch"]))}
        paths |= {("checkpointing_trade", i, k) for i in range(len(d["checkpointing_trade"]))
                  for k in ("saved_bytes", "fraction_saved", "slowdown")}
        paths |= timeline_peak_paths(d)
    elif command == "fit":
        paths = {("initial", "peak_bytes"), ("budget_bytes",), ("final", "peak_bytes"), ("cheapest", "peak_bytes")}
        paths |= {("steps", i, k) for i in range(len(d["steps"])) for k in ("peak_bytes", "saved_bytes")}
    else:
        paths = {("count",), ("percentiles", "p95"), ("recommended_seq_len",), ("recommended_truncated_share",),
                 ("recommended_over",)}
        paths |= {("padding_waste", s) for s in ("random", "grouped", "packed")}
        paths |= {("padding", s, "padding_tokens") for s in ("random", "grouped", "packed")}
    return paths


