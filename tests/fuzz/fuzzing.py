"""Property-based fuzzing of every input boundary (hypothesis): profiles and the CLI helpers.

Profiles: ``fast`` (the default, what ``make test`` runs: each property sized so the folder stays well under a
minute on 2 cores) and ``slow`` (ten times the examples, for a deliberate hunt: ``MEMFIT_FUZZ=slow pytest
tests/fuzz --hypothesis-show-statistics``). Every property has ``deadline=None``: the machine is shared, and
a slow example is not a failure. ``--hypothesis-show-statistics`` prints how many examples each property ran.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SLOW = os.environ.get("MEMFIT_FUZZ", "").lower() == "slow"
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                      HealthCheck.data_too_large]}
settings.register_profile("fast", **_COMMON, print_blob=True)
settings.register_profile("slow", **_COMMON, print_blob=True, max_examples=1000)
settings.load_profile("slow" if SLOW else "fast")


def examples(n: int) -> int:
    """``n`` examples in the fast profile, ten times as many under ``MEMFIT_FUZZ=slow``."""
    return n * 10 if SLOW else n


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``memfit ARGV`` in this process: :func:`memfit.cli.main` (which turns errors into a red line or the
    ``--json`` error object) inside typer's ``CliRunner`` isolation (its own stdin/stdout/stderr, 80 columns).
    Returns ``(exit code, stdout, stderr)``."""
    from typer.testing import CliRunner

    from memfit.cli import main

    with CliRunner().isolation() as streams:
        code = main(argv)
        sys.stdout.flush()  # the isolation's text wrappers buffer: flush them into the byte streams read below
        sys.stderr.flush()
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _byte_figures(doc: object) -> list[float]:
    """Every number under a key ending in ``_bytes`` (the figures memfit reports in bytes)."""
    out: list[float] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and str(k).endswith("_bytes"):
                out.append(v)
            else:
                out += _byte_figures(v)
    elif isinstance(doc, list):
        for v in doc:
            out += _byte_figures(v)
    return out


def assert_cli_contract(argv: list[str], code: int, out: str, err: str) -> None:
    """The CLI's promise for any input: exit 0 (or 3, "does not fit" under --check) with valid output (under
    --json: JSON whose byte figures are ones a machine can have, below 2^63), or a
    non-zero exit with one short message; never a traceback. Under --json, stdout is JSON either way and an
    error is one object ``{error, hint, exit_code}`` with the exit code; without it, a bad input is one red
    line (a usage error is typer's usage box, exit 2)."""
    import json

    where = f"memfit {' '.join(argv)!r} -> {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out, where
    assert code in (0, 1, 2, 3), where
    as_json = "--json" in argv
    if as_json:
        assert out.strip(), f"--json printed nothing on stdout: {where}"
        try:
            doc = json.loads(out)  # one JSON document: the result, or the error object
        except ValueError:
            raise AssertionError(f"stdout is not one JSON document: {where}") from None
        huge = [v for v in _byte_figures(doc) if not 0 <= v < 2**63]
        assert not huge, f"a byte figure no machine has (input accepted that should be refused): {huge[:3]} {where}"
    if code in (0, 3):
        assert out.strip(), f"an answer with nothing on stdout: {where}"
        return
    if as_json:
        lines = out.strip().splitlines()
        assert len(lines) == 1, where
        obj = json.loads(lines[0])
        assert set(obj) == {"error", "hint", "exit_code"} and obj["exit_code"] == code, where
        assert 0 < len(obj["error"]) <= 1000, where
    elif code == 1:
        assert out == "" or "verify" in argv[0], where  # verify-pack prints its FAIL report, then exits 1
        if out == "":
            assert err.startswith("error: ") and len(err) <= 1200, where
            assert len(err.strip().splitlines()) <= 6, where  # one line, wrapped at most a few times at 80 columns
    else:
        assert "Usage:" in err or "Error" in err, where  # typer's usage box (with or without the usage line)
