"""memfit.data needs only the ``data`` extra (tokenizers, numpy, pyarrow, transformers for the tokenizer loader):
with torch unavailable its modules import, ``memfit lengths`` and ``memfit pack`` run, and the torch half
(``memfit.data.torch``, ``memfit verify-pack``) says which extra to install in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"

CODE = """
import importlib, json, sys
sys.modules['torch'] = None  # any `import torch` now raises ImportError
from memfit.errors import MemfitError

for name in ('formats', 'records', 'tokenizer', 'tokenize', 'lengths', 'padding', 'binpack', 'pack', 'io'):
    importlib.import_module('memfit.data.' + name)
importlib.import_module('memfit.report.pack')
importlib.import_module('memfit.report.lengths')
try:
    importlib.import_module('memfit.data.torch.collator')
    raise SystemExit('memfit.data.torch imported without torch')
except MemfitError as exc:
    print('torch-half:', exc)

from memfit.cli import main
data, tok, out = sys.argv[1:4]
fields = ['--prompt', 'question', '--completion', 'answer', '--seq-len', '512']
codes = [main(['lengths', data, '-t', tok, *fields, '--json']),
         main(['pack', data, '-t', tok, *fields, '--out', out, '--json']),
         main(['verify-pack', data, '-t', tok, *fields, '--limit', '2'])]
assert sys.modules['torch'] is None
print('codes:', json.dumps(codes))
"""


@pytest.mark.slow
def test_lengths_and_pack_run_without_torch_and_verify_pack_names_the_extra(tmp_path: Path) -> None:
    data = tmp_path / "g20.jsonl"
    data.write_text("".join((SHARED / "data" / "gsm8k" / "test.jsonl").read_text().splitlines(keepends=True)[:20]))
    rows = tmp_path / "rows.jsonl"
    tok = SHARED / "tokenizers" / "qwen3"
    out = subprocess.run([sys.executable, "-c", CODE, str(data), str(tok), str(rows)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, *printed, last = out.stdout.strip().splitlines()
    assert first == "torch-half: this needs torch: pip install 'memfit[torch]'"
    assert last == "codes: [0, 0, 1]"
    # lengths and pack printed their JSON; verify-pack one red line naming the extra, no traceback
    text, decoder = "\n".join(printed), json.JSONDecoder()
    lengths, end = decoder.raw_decode(text)
    packed, _ = decoder.raw_decode(text[end:].lstrip())
    assert lengths["count"] == packed["examples"] == 20
    assert packed["rows"] == len(rows.read_text().splitlines()) >= 1
    assert "this needs torch: pip install 'memfit[torch]'" in out.stderr and "Traceback" not in out.stderr
    assert "PyTorch was not found" not in out.stderr  # transformers' notice: the tokenizer needs no torch
