"""memfit.estimate must import and work with torch unavailable (STYLE: litgpt's config.py rule)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
sys.modules['torch'] = None  # any `import torch` now raises ImportError
sys.modules['transformers'] = None
import memfit.estimate as e
import memfit.cli  # the CLI module tree must not import torch at start-up either
assert e.count_params(e.lookup('gpt2').shape).total == 124439808
est = e.estimate_memory(e.lookup('llama-3.1-8b').shape, e.RunSpec(sharding='zero3', gpus=8))
assert e.Target.resolve('H100-80GB').fits(est.peak_bytes, 'cuda')
print('ok')
"""


def test_estimate_imports_without_torch() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
