"""Writing the page: atomic (temporary file beside the target, then a rename), an existing file kept
unless --force, clear errors for a missing folder or a directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memfit.errors import MemfitError
from memfit.report.html.write import load_result, write_report


def test_writes_and_refuses_to_replace_without_force(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    write_report(target, "<p>one</p>")
    assert target.read_text() == "<p>one</p>"
    with pytest.raises(MemfitError, match=r"r.html exists: pass --force"):
        write_report(target, "<p>two</p>")
    assert target.read_text() == "<p>one</p>"
    write_report(target, "<p>two</p>", force=True)
    assert target.read_text() == "<p>two</p>"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left behind


def test_permissions_follow_the_umask(tmp_path: Path) -> None:
    """mkstemp makes 0600 files; the page gets what a new file would (0666 less the umask: 0644 for 022)."""
    old = os.umask(0o022)
    try:
        target = write_report(tmp_path / "r.html", "x")
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644


def test_a_failed_replace_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the rename fails (disk full, killed), the old page stays whole and the temporary file is removed; the
    failure is one MemfitError naming the file (before memfit.files, an OSError traceback)."""
    target = tmp_path / "r.html"
    target.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(MemfitError, match="cannot write .*r.html .*no space"):
        write_report(target, "new", force=True)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


@pytest.mark.parametrize(("name", "message"), [
    ("missing/r.html", "the folder .*missing does not exist"),
    (".", "is a directory: give a file name"),
])
def test_bad_targets(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(MemfitError, match=message):
        write_report(tmp_path / name, "x")


def test_load_result_errors(tmp_path: Path) -> None:
    with pytest.raises(MemfitError, match="no file at"):
        load_result(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": ')
    with pytest.raises(MemfitError, match=r"bad.json is not valid JSON \(line 1, column 7"):
        load_result(str(bad))
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(MemfitError, match="is not UTF-8 text"):
        load_result(str(binary))
