"""``bench/act_offload_cuda.py`` (run by bench/gpu_run.sh on a GPU machine) on this CPU-only machine: its rows are
specs the estimate takes (a row the estimate refused would end the GPU session's step 5 with a traceback), and the
script says there is no CUDA device and exits 0 instead of failing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memfit.estimate import RunSpec, estimate_memory, lookup

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "act_offload_cuda.py"


def _rows() -> tuple[tuple[str, dict[str, object]], ...]:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import act_offload_cuda
    finally:
        sys.path.pop(0)
    return act_offload_cuda.ROWS


def test_every_row_is_estimated_with_host_bytes() -> None:
    for model, fields in _rows():
        spec = RunSpec(device="cuda", attention="sdpa", offload_activations=True, **fields)  # type: ignore[arg-type]
        est = estimate_memory(lookup(model).shape, spec)
        assert est.host_bytes > 0 and est.peak_bytes > 0


def test_without_cuda_it_says_so_and_exits_0(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the script would measure")
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out.json")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0
    assert "no CUDA device" in out.stdout
    assert not (tmp_path / "out.json").exists()
