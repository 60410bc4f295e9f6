"""The worker protocol: the typed request round-trips, the server answers errors as replies, the client reads
the last JSON line and turns a killed worker into a point that does not fit."""

from __future__ import annotations

import subprocess

import pytest

from memfit.errors import MemfitError
from memfit.estimate import RunSpec
from memfit.measure import isolation
from memfit.measure.isolation import WorkerRequest, handle, last_json_line, measure_in_subprocess

CONFIG = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
          "vocab_size": 64}


def test_request_round_trips_through_json() -> None:
    request = WorkerRequest(config=CONFIG, spec=RunSpec(method="lora", rank=8, batch=2, seq=16, device="cpu"),
                            steps=2, warmup=0, memory_limit=3_000_000)
    assert WorkerRequest.from_json(request.to_json()) == request


def test_the_reply_is_the_last_json_line() -> None:
    out = 'a library printed {"not": json\n{"ok": true, "result": {}}\n\n'
    assert last_json_line(out) == {"ok": True, "result": {}}
    assert last_json_line("no reply at all") is None


def test_the_server_answers_a_memfit_error_as_a_reply() -> None:
    pytest.importorskip("torch")
    reply = handle(WorkerRequest(config={k: v for k, v in CONFIG.items() if k != "vocab_size"},
                                 spec=RunSpec(batch=1, seq=8, device="cpu")))
    assert reply == {"ok": False, "kind": "memfit", "error": "the config has no vocab_size: add it to config.json"}


def _worker_replies(monkeypatch: pytest.MonkeyPatch, *, stdout: str, stderr: str = "", code: int = 0) -> None:
    def run(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args=[], returncode=code, stdout=stdout, stderr=stderr)

    monkeypatch.setattr(isolation.subprocess, "run", run)


def test_the_client_reads_a_point_and_relays_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = RunSpec(batch=4, seq=32, device="cpu")
    _worker_replies(monkeypatch, stdout='{"ok": true, "result": {"batch": 4, "seq": 32, "checkpointing": "none", '
                                        '"device": "cpu", "fits": true, "peak_bytes": 1234, "ratio": null, '
                                        '"by_category": {"activations": 1000, "weights_frozen": 234}}}')
    point = measure_in_subprocess(CONFIG, spec, device="cpu", steps=1)
    assert (point.fits, point.peak_bytes, point.by_category["activations"]) == (True, 1234, 1000)
    _worker_replies(monkeypatch, stdout='{"ok": false, "kind": "memfit", "error": "use --device cpu"}')
    with pytest.raises(MemfitError, match="^use --device cpu$"):
        measure_in_subprocess(CONFIG, spec, device="cpu", steps=1)
    _worker_replies(monkeypatch, stdout="", stderr="Traceback ...\nValueError: boom", code=1)
    with pytest.raises(MemfitError, match="worker failed at batch 4, seq 32: ValueError: boom"):
        measure_in_subprocess(CONFIG, spec, device="cpu", steps=1)


def test_a_worker_killed_by_the_host_is_a_point_that_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_replies(monkeypatch, stdout="", code=-9)
    point = measure_in_subprocess(CONFIG, RunSpec(batch=64, seq=32, device="cpu"), device="cpu", steps=1)
    assert not point.fits and "host out of memory" in (point.error or "")
