"""memfit lab on this CPU: all eight reps on the scaled lesson model (memfit.lab.setup) with the bundled GSM8K and
the Llama 2 tokenizer; writes the `## lab` section of bench/RESULTS.md (the claims beside the measurements, the
verdicts, the wall-clock and CPU seconds, and the load average the machine had: it is shared).

Run: `OMP_NUM_THREADS=2 .venv/bin/python bench/bench_lab.py` (`--no-write` prints only; `--json FILE` keeps the
lab's JSON, which `memfit report FILE --html lab.html` turns into the page).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from _results import write_section  # bench/_results.py

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from memfit.lab import bundled_data, cpu_setup, run_lab  # noqa: E402
from memfit.report.lab import lab_markdown  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    found = bundled_data()
    if found is None:
        print("the bundled data (../shared/data/gsm8k, ../shared/tokenizers/llama2) is missing", file=sys.stderr)
        return 1
    load_before = os.getloadavg()[0]
    result = run_lab(cpu_setup(), data=found[0], tokenizer=found[1],
                     fields={"prompt": "question", "completion": "answer"},
                     progress=lambda line: print(line, file=sys.stderr, flush=True))
    d = result.to_dict()
    load_after = os.getloadavg()[0]
    text = lab_markdown(d) + (
        f"\nMachine: {os.cpu_count()} cores, load average {load_before:.1f} before and {load_after:.1f} after the run "
        "(other work shares it: the wall-clock time grows with the load, the CPU seconds do not). Regenerate: "
        "`OMP_NUM_THREADS=2 .venv/bin/python bench/bench_lab.py`; the same as a page: `memfit lab --html lab.html`.\n")
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(d, fh, indent=1, default=str)
    if not args.no_write:
        write_section("lab", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
