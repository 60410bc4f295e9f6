"""Run every benchmark in bench/ in one go (``make bench``). Each writes its own section of RESULTS.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    # peers.py needs the peers' own venvs and is run by `make bench-peers`
    scripts = sorted(p for p in HERE.glob("*.py") if p.name not in ("run_all.py", "peers.py")
                     and not p.name.startswith("_"))
    failed = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
