#!/usr/bin/env bash
# memfit measure on CUDA: the CUDA tests, then a small real sweep with the checkpointing trade and the
# max-batch bisection, figures printed (and written under $OUT when set). About 2-3 minutes on an H200.
#
# Needs a Python with CUDA torch, transformers >= 5, peft, typer, rich, matplotlib (the H200 image has
# them); memfit itself is used from this checkout (no network needed):  bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUTDIR=${OUT:-/tmp/memfit_gpu_check}
mkdir -p "$OUTDIR"

$PY - <<'PY'
import torch, transformers, peft
print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)
print("device", torch.cuda.get_device_name(0), f"{torch.cuda.get_device_properties(0).total_memory / 1024**3:.1f} GiB")
PY

echo "== CUDA tests (tests/measure -m cuda)"
$PY -m pytest -q -p no:cacheprovider -m cuda tests/measure 2>&1 | tee "$OUTDIR/cuda_tests.log" \
    || echo "== CUDA TESTS FAILED (see above); the sweep runs anyway"

echo "== sweep: qwen2.5-0.5b LoRA mixed-bf16, batch 1,2,4, seq 1024, checkpointing both"
$PY -m memfit measure qwen2.5-0.5b --method lora --precision mixed-bf16 --batch 1,2,4 --seq 1024 \
    --checkpointing both --device cuda --steps 3 --json > "$OUTDIR/measure_cuda.json"
$PY - "$OUTDIR/measure_cuda.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
G = 1024**3
for r in d["runs"]:
    if not r["fits"]:
        print(f"b{r['batch']} s{r['seq']} {r['checkpointing']}: {r['error']}")
        continue
    est = f"{r['estimate_bytes'] / G:.3f}" if r["estimate_bytes"] else "-"
    ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
    print(f"b{r['batch']} s{r['seq']} {r['checkpointing']:4}: peak {r['peak_bytes'] / G:.3f} GiB, reserved "
          f"{r['reserved_bytes'] / G:.3f} GiB, tracker {r['tracker_peak_bytes'] / G:.3f} GiB, estimate {est} GiB "
          f"(meas/est {ratio}), {r['step_seconds']:.4f} s/step, {r['tokens_per_second']:,.0f} tok/s, "
          f"phase {r['peak_phase']}")
    print("    " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in r["by_category"].items()))
for f in d["fits"]:
    print(f"fit seq {f['seq']} {f['checkpointing']}: slope {f['slope_bytes_per_sample'] / 2**20:.1f} MiB/sample, "
          f"intercept {f['intercept_bytes'] / G:.3f} GiB, R^2 {f['r2']:.5f}, "
          f"{f['bytes_per_layer_token_hidden']:.1f} B per layer*token*hidden (lesson ~20)")
for t in d["checkpointing_trade"]:
    print(f"trade b{t['batch']}: saved {t['saved_bytes'] / G:.3f} GiB ({100 * t['fraction_saved']:.0f}%), "
          f"time x{t['slowdown']:.2f}: {t['verdict']}")
PY

echo "== max batch: qwen2.5-0.5b LoRA mixed-bf16, seq 2048, checkpointing full, within 8GiB"
$PY -m memfit measure qwen2.5-0.5b --method lora --precision mixed-bf16 --batch 1 --seq 2048 \
    --checkpointing full --device cuda --steps 1 --memory-limit 8GiB --max-batch --plot "$OUTDIR/measure_cuda.png"
