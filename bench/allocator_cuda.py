"""The caching-allocator replay (memfit.estimate.allocator) against torch.cuda.memory_reserved on a real GPU.

For each row: build the model on CUDA and run two training steps with the allocator's history recorded
(``torch.cuda.memory._record_memory_history``), then compare ``torch.cuda.max_memory_reserved()`` with

- the replay of the *real* allocation sequence (the history's ``alloc`` / ``free_completed`` entries, by address):
  checks the allocator model itself;
- the replay of the *traced* sequence (``memfit trace --device cuda``: fake tensors on the CPU, the prediction
  memfit makes without a GPU): checks the whole chain.

Each row runs twice, with torch's defaults and with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (a child
process each: the allocator reads its settings once). Writes ``$OUT/allocator_cuda.json``. Run by bench/gpu_run.sh;
never run on a CPU-only machine (no figures exist until a GPU session runs it).

    python bench/allocator_cuda.py OUT_JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("qwen2.5-0.5b", {"method": "lora", "precision": "bf16", "attention": "sdpa", "batch": 4, "seq": 1024}),
    ("qwen2.5-0.5b", {"method": "full", "precision": "mixed-bf16", "attention": "sdpa", "batch": 2, "seq": 1024}),
    ("llama-3.2-1b", {"method": "lora", "precision": "bf16", "attention": "sdpa", "batch": 4, "seq": 2048,
                      "checkpointing": "full"}),
    ("llama-3.2-1b", {"method": "lora", "precision": "bf16", "attention": "sdpa", "batch": 2, "seq": 2048,
                      "checkpointing": "full", "offload": True}),
)


def history_events(snapshot: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(kind, address, size)`` for the replay from a ``torch.cuda.memory._snapshot()``: each ``alloc`` and each
    ``free_completed`` (the block back in the pool) of device 0, in order.

    >>> history_events({"device_traces": [[{"action": "alloc", "addr": 1, "size": 512},
    ...                                    {"action": "free_requested", "addr": 1, "size": 512},
    ...                                    {"action": "free_completed", "addr": 1, "size": 512}]]})
    [('alloc', 1, 512), ('free', 1, 0)]
    """
    out: list[tuple[str, int, int]] = []
    for e in (snapshot.get("device_traces") or [[]])[0]:
        if e["action"] == "alloc":
            out.append(("alloc", int(e["addr"]), int(e["size"])))
        elif e["action"] == "free_completed":
            out.append(("free", int(e["addr"]), 0))
    return out


def one_row(model: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Runs in the child process (the allocator settings come from its environment)."""
    import torch

    from memfit.estimate import lookup
    from memfit.estimate.allocator import AllocatorSettings, replay
    from memfit.estimate.spec import RunSpec
    from memfit.runtime.build import build_model
    from memfit.runtime.step import make_optimizer, run_step
    from memfit.trace.engine import trace_step

    settings = AllocatorSettings.parse(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    spec = lookup(model).shape.arch.runnable_spec(RunSpec(device="cuda", **fields))
    config = dict(lookup(model).config)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history("all", context=None, max_entries=2_000_000, clear_history=True)
    net = build_model(config, spec, device="cuda")
    optimizer = make_optimizer(net, spec)
    for _ in range(2):
        run_step(net, spec, optimizer=optimizer, batch=spec.batch, seq=spec.seq,
                 vocab=int(config["vocab_size"]), device="cuda")
    torch.cuda.synchronize()
    measured_reserved = int(torch.cuda.max_memory_reserved())
    measured_allocated = int(torch.cuda.max_memory_allocated())
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    real = replay(history_events(snap), settings)  # type: ignore[arg-type]
    del net, optimizer
    traced = trace_step(config, spec, name=model)
    predicted = (traced.allocator or {}).get("default", {})
    out = {
        "row": f"{model} {fields}", "conf": settings.conf, "measured_reserved_bytes": measured_reserved,
        "measured_allocated_bytes": measured_allocated, "replay_of_real_sequence": real.to_dict(),
        "real_replay_error": (real.reserved_peak_bytes - measured_reserved) / measured_reserved,
        "trace_allocator": traced.allocator, "trace_peak_bytes": traced.peak_bytes,
    }
    if not settings.expandable_segments:  # the trace's default-settings replay is the one to compare
        predicted_bytes = int(predicted.get("reserved_peak_bytes", 0))
        out["trace_replay_error"] = (predicted_bytes - measured_reserved) / measured_reserved
    else:
        best = (traced.allocator or {}).get("best", {})
        if best.get("conf") == settings.conf:
            out["trace_replay_error"] = (int(best["reserved_peak_bytes"]) - measured_reserved) / measured_reserved
    return out


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(one_row(sys.argv[2], json.loads(sys.argv[3]))))
        return 0
    out_path = sys.argv[1]
    results = []
    for model, fields in ROWS:
        for conf in ("", "expandable_segments:True"):
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
            proc = subprocess.run([sys.executable, __file__, "--child", model, json.dumps(fields)], env=env,
                                  capture_output=True, text=True, timeout=240)
            line = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None
            row = json.loads(line) if line else {"row": f"{model} {fields}", "conf": conf,
                                                  "error": proc.stderr.strip()[-800:]}
            results.append(row)
            print(json.dumps({k: row.get(k) for k in ("row", "conf", "measured_reserved_bytes", "real_replay_error",
                                                      "trace_replay_error", "error")}), flush=True)
            with open(out_path, "w") as f:
                json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
