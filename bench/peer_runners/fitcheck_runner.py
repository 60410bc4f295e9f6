"""fitcheck-llm's CLI, ``fitcheck MODEL_ID ... --json`` (fitcheck-llm 0.3.1), one process per row.

fitcheck reads ``config.json`` through ``huggingface_hub.hf_hub_download`` (the local cache laid out by
bench/peers.py, ``HF_HUB_OFFLINE=1``) and asks the Hub for the safetensors parameter count, which offline
fails, so it falls back to the count it derives from the config (it prints a warning saying so).
Its JSON ``memory_mib`` has weights, lora, optimizer, gradients, activations and overhead (CUDA context
plus a fragmentation share) and their total. The figure compared is the tensor total (total minus
overhead, what fitcheck's docs call the "tensors" tier), like for like with live tensor bytes; the
process total is kept in ``detail``. Exit codes: 0 fits, 1 does not fit / uncertain, 2 could not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _protocol import serve

MIB = 1024**2


def one_row(row: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    exe = Path(sys.executable).with_name("fitcheck")
    argv = [str(exe), row["repo_id"], *row["options"]["argv"], "--json"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode not in (0, 1):
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise RuntimeError(f"exit {proc.returncode}: {lines[-1] if lines else proc.stdout.strip()[:300]}")
    report = json.loads(proc.stdout)
    mem = report["memory_mib"]
    tensors = mem["total"] - mem["overhead"]
    return round(tensors * MIB), {"memory_mib": mem, "process_total_bytes": round(mem["total"] * MIB),
                                  "verdict": report["verdict"]["status"], "argv": argv[1:],
                                  "warnings": [ln for ln in proc.stderr.splitlines() if "Warning" in ln][:3]}


if __name__ == "__main__":
    serve(("fitcheck-llm", "huggingface_hub", "click", "rich"), one_row)
