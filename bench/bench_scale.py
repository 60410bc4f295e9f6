"""memfit lengths and memfit pack from 10,000 to 2,000,000 examples: throughput and peak memory.

The data: GSM8K-like JSON lines, each record drawn with replacement from the 7,473 real GSM8K train records
(seeded), so the length distribution is GSM8K's at every size; 2,000,000 records are ~1.1 GB. Each command runs
as `python -m memfit ...` in its own subprocess (as a user runs it; TOKENIZERS_PARALLELISM=true, the CLI's
default), and its peak resident memory is that process's ru_maxrss (os.wait4). The real GSM8K train file is
run the same way, beside the 7,473-example figure of the `## lengths` section.

Writes the `## scale` section of bench/RESULTS.md. Run: `.venv/bin/python bench/bench_scale.py` (about 40
minutes on 2 shared cores; `--sizes 10000,100000` for a quick look). Needs ~8 GB free beside the data for
pack's JSONL output at 2,000,000 (written, measured, deleted). Not part of `make test`; the bounded-memory
property at 20,000 examples is (tests/data/test_scale.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from _results import write_section  # bench/_results.py

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
GSM8K = SHARED / "data" / "gsm8k" / "train.jsonl"
TOKENIZER = SHARED / "tokenizers" / "llama2"
SIZES = (10_000, 100_000, 500_000, 2_000_000)
FIELDS = ["--prompt", "question", "--completion", "answer"]
INTRO = ("`memfit lengths` and `memfit pack` streaming GSM8K-like JSON lines from 10,000 to 2,000,000 examples: "
         "throughput and peak memory (bench/bench_scale.py; the raw figures in bench/scale_results.json).\n\n")


def make_data(n: int, folder: Path, seed: int = 0) -> Path:
    """``n`` GSM8K train records drawn with replacement (``random.Random(seed)``), as JSON lines."""
    path = folder / f"gsm8k_like_{n}.jsonl"
    if path.exists():
        return path
    records = GSM8K.read_text(encoding="utf-8").splitlines()
    rng = random.Random(seed)
    tmp = path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, n, 100_000):
            f.write("\n".join(rng.choice(records) for _ in range(min(100_000, n - start))) + "\n")
    tmp.replace(path)
    return path


def run(argv: list[str]) -> dict[str, object]:
    """Run ``python -m memfit ARGV --json`` in a fresh subprocess: wall seconds, peak RSS (that process's
    ru_maxrss, KiB on Linux), CPU seconds, and its JSON."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "memfit", *argv, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    out = b"".join(iter(lambda: proc.stdout.read(1 << 16), b""))  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"memfit {' '.join(argv)} failed ({proc.returncode}): {err}")
    return {"wall": wall, "rss": usage.ru_maxrss * 1024, "cpu": usage.ru_utime + usage.ru_stime,
            "json": json.loads(out)}


def measure(data: Path, n: int, out_dir: Path) -> list[dict[str, object]]:
    rows = []
    r = run(["lengths", str(data), "-t", str(TOKENIZER), *FIELDS])
    d = r["json"]
    assert isinstance(d, dict) and d["count"] == n, d.get("count")
    rows.append({"command": "lengths", "n": n, "tokens": d["total_tokens"], "bytes": data.stat().st_size,
                 "p95": d["percentiles"]["p95"], **{k: r[k] for k in ("wall", "rss", "cpu")}})
    print(rows[-1], flush=True)
    out = out_dir / f"rows_{n}.jsonl"
    r = run(["pack", str(data), "-t", str(TOKENIZER), *FIELDS, "--out", str(out), "--force"])
    d = r["json"]
    assert isinstance(d, dict) and d["examples"] == n and d["tokens"] == rows[0]["tokens"], d
    rows.append({"command": "pack", "n": n, "tokens": d["tokens"], "bytes": data.stat().st_size,
                 "rows": d["rows"], "efficiency": d["efficiency"], "out_bytes": d["out_bytes"],
                 **{k: r[k] for k in ("wall", "rss", "cpu")}})
    out.unlink()
    print(rows[-1], flush=True)
    return rows


def startup(folder: Path) -> dict[str, float]:
    """Wall seconds of each command on 100 records: Python, imports, the tokenizer, the report (the fixed cost
    inside every row's wall time)."""
    data = make_data(100, folder)
    out = folder / "rows_100.jsonl"
    walls = {"lengths": float(run(["lengths", str(data), "-t", str(TOKENIZER), *FIELDS])["wall"]),  # type: ignore[arg-type]
             "pack": float(run(["pack", str(data), "-t", str(TOKENIZER), *FIELDS, "--out", str(out),  # type: ignore[arg-type]
                                "--force"])["wall"])}
    out.unlink()
    return walls


def table(results: list[dict[str, object]], load: tuple[float, float], fixed: dict[str, float]) -> str:
    lines = ["| examples | data | command | wall (s) | CPU (s) | examples/s | examples/s after start-up | tokens/s | "
             "peak RSS | vs the 7,473 run |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = {r["command"]: r["rss"] for r in results if r["n"] == min(x["n"] for x in results)}
    for r in results:
        n, wall = int(r["n"]), float(r["wall"])  # type: ignore[call-overload, arg-type]
        rss = int(r["rss"])  # type: ignore[call-overload]
        extra = f" ({r['rows']:,} rows, {float(r['efficiency']):.2%}, {int(r['out_bytes']) / 1e9:.2f} GB out)" \
            if r["command"] == "pack" else f" (p95 {r['p95']})"  # type: ignore[call-overload, arg-type]
        label = "GSM8K train" if r.get("real") else "GSM8K-like"
        lines.append(f"| {n:,} | {label}, {int(r['bytes']) / 1e6:,.0f} MB | {r['command']}{extra} | {wall:,.1f} | "  # type: ignore[call-overload]
                     f"{float(r['cpu']):,.1f} | {n / wall:,.0f} | "  # type: ignore[arg-type]
                     f"{n / max(wall - fixed[str(r['command'])], 1e-9):,.0f} | "
                     f"{int(r['tokens']) / wall:,.0f} | "  # type: ignore[call-overload]
                     f"{rss / 2**20:,.0f} MiB | {(rss - int(base.get(r['command'], rss))) / 2**20:+,.0f} MiB |")  # type: ignore[call-overload]
    return "\n".join(lines) + reading(results, fixed) + (
        f"\n\nEach command is `python -m memfit ... --json` in a fresh subprocess (llama2 tokenizer, --prompt question "
        f"--completion answer, --seq-len 2048, pack to JSON lines); \"after start-up\" subtracts the wall time of the "
        f"same command on 100 records ({fixed['lengths']:.1f} s lengths, {fixed['pack']:.1f} s pack: Python, imports, "
        f"the tokenizer). Peak RSS is that process's ru_maxrss (MiB = "
        f"2^20 B), which includes the ~380 MiB of Python + transformers (which imports torch) + the tokenizer "
        f"before any data is read. {os.cpu_count()} cores shared with other sessions (1-minute load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after), TOKENIZERS_PARALLELISM=true. GSM8K-like = records drawn "
        "with replacement from GSM8K train (seed 0).")


def reading(results: list[dict[str, object]], fixed: dict[str, float]) -> str:
    """What the table says, in numbers taken from it: throughput at each size (a line, not a cliff) and how
    the peak memory grows per example."""
    out = []
    reach = []
    for command in ("lengths", "pack"):
        rows = sorted((r for r in results if r["command"] == command and not r.get("real")),
                      key=lambda r: int(r["n"]))  # type: ignore[call-overload]
        if len(rows) < 2:
            continue
        small, big = rows[0], rows[-1]
        n0, n1 = int(small["n"]), int(big["n"])  # type: ignore[call-overload]
        per = (int(big["rss"]) - int(small["rss"])) / (n1 - n0)  # type: ignore[call-overload]
        rates = " / ".join(f"{int(r['n']) / max(float(r['wall']) - fixed[command], 1e-9):,.0f}"  # type: ignore[call-overload, arg-type]
                           for r in rows if int(r["n"]) >= 100_000)  # type: ignore[call-overload]
        sizes = " / ".join(f"{int(r['n']):,}" for r in rows if int(r["n"]) >= 100_000)  # type: ignore[call-overload]
        out.append(f"`{command}` runs {rates} examples/s after start-up at {sizes} examples, and its peak RSS "
                   f"grows by {per:.0f} B per example ({int(big['rss']) / 2**20:,.0f} MiB at {n1:,}, with a "  # type: ignore[call-overload]
                   f"{int(big['bytes']) / 2**20:,.0f} MiB data file).")  # type: ignore[call-overload]
        reach.append(n1 + (2 * 2**30 - int(big["rss"])) / max(per, 1e-9))  # type: ignore[call-overload]
    if not out:
        return ""
    return ("\n\nReading it: " + " ".join(out) + " A line, not a cliff: below 100,000 examples the ~4 s start-up "
            "dominates the rate; the wall time on the shared box also carries the other sessions' load (CPU time "
            "does not). Memory does not follow the data (the 1.1 GB of JSON lines is never held; pack's token ids "
            "wait in a scratch file): what grows is a few int64 arrays per example, the lengths and the index "
            "arrays of the padding and packing arithmetic (np.sort, the permutation, fill_rows' layout), so 2 GiB "
            f"would be reached near {min(reach) / 1e6:,.0f} million examples.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--folder", default=str(HERE / ".scale"), help="where the generated data goes")
    parser.add_argument("--no-write", action="store_true", help="print, do not update RESULTS.md")
    parser.add_argument("--from-json", help="rewrite the section from a saved run (bench/scale_results.json)")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        text = table(saved["results"], tuple(saved["load"]), saved["fixed"])  # type: ignore[arg-type]
        print(text)
        if not args.no_write:
            write_section("scale", INTRO + text)
        return
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    load1 = os.getloadavg()[0]
    fixed = startup(folder)
    results = []
    for r in measure(GSM8K, 7_473, folder):
        results.append({**r, "real": True})
    for n in (int(x) for x in args.sizes.split(",")):
        results += measure(make_data(n, folder), n, folder)
    load = (load1, os.getloadavg()[0])
    (HERE / "scale_results.json").write_text(json.dumps({"results": results, "fixed": fixed, "load": load}, indent=1))
    text = table(results, load, fixed)
    print(text)
    if not args.no_write:
        write_section("scale", INTRO + text)


if __name__ == "__main__":
    main()
