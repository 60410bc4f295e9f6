"""Every file memfit writes (``pack --out``, ``--plot``, ``--html``, ``fit --write``) goes through here.

The rule: a file appears whole or not at all. It is written to a temporary file in the target's folder
(``.NAME.XXXXXXXX.tmp.SUFFIX``: the same file system, so the final ``os.replace`` is an atomic rename, and the
same suffix, so writers that pick the format from the name, as matplotlib's ``savefig`` does, still do), flushed
to disk, given the permissions a new file would get (0666 less the umask; ``mkstemp`` makes 0600), then renamed
over the target. An interrupt (Ctrl-C, SIGTERM: the CLI turns both into an exception that unwinds), a full
disk or any error on the way removes the temporary file and leaves the target as it was.

An existing target is replaced only with ``force`` (``--force``); otherwise the error names the flag. All of
it is checked once up front by :func:`check_output`, before any slow work, and again at the rename (a file
that appeared meanwhile is not overwritten without ``force``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from memfit.errors import MemfitError

__all__ = ["TEMP_MARK", "atomic_output", "check_output", "move_into_place", "temporary_beside", "write_atomic"]

TEMP_MARK = ".tmp"  # temporary files are ".{name}.{random}.tmp{suffix}" beside the target


def _parent(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def check_output(path: str | os.PathLike[str], *, flag: str, force: bool, example: str = "out") -> Path:
    """Fail now, naming ``flag``, when ``path`` could not be written: a directory (the hint suggests the file
    ``example`` in it), something other than a regular file, an existing file without ``force``, a folder that
    does not exist, or one that refuses new files (probed with a temporary file, removed at once: permission
    bits say nothing for root, and ``/proc`` or ``/sys`` refuse files whatever they say). Returns the path."""
    target = Path(path)
    if target.is_dir():
        name = example if "." in example else example + (target.suffix or ".out")
        raise MemfitError(f"{flag} {target} is a directory", hint=f"give a file name such as {target / name}")
    if target.exists() and not target.is_file():
        raise MemfitError(f"{flag} {target} exists and is not a regular file", hint=f"choose another {flag}")
    if target.exists() and not force:
        raise MemfitError(f"{target} exists", hint=f"pass --force to replace it, or choose another {flag} file")
    parent = _parent(target)
    if not parent.is_dir():
        raise MemfitError(f"{flag} {target}: the folder {parent} does not exist",
                          hint=f"create it or choose another {flag}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".memfit-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise MemfitError(f"{flag} {target}: cannot write in {parent} ({exc.strerror or exc})",
                          hint="choose a folder you can write to") from exc
    return target


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], *, flag: str, force: bool, example: str = "out"
                  ) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; when the block ends normally it becomes ``path``
    (module docstring), when it raises (an error, Ctrl-C, SIGTERM) it is removed and ``path`` is untouched.

    An ``OSError`` while writing or renaming (a full disk, a folder removed meanwhile) becomes a MemfitError
    naming the file; anything else is re-raised after the clean-up.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_output(folder / "a.txt", flag="--out", force=False) as tmp:
    ...     _ = tmp.write_text("whole")
    >>> [p.name for p in folder.iterdir()], (folder / "a.txt").read_text()
    (['a.txt'], 'whole')
    """
    target = check_output(path, flag=flag, force=force, example=example)
    tmp = temporary_beside(target)
    try:
        yield tmp
        _fsync(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if not force and target.exists():  # appeared while we worked
            raise MemfitError(f"{target} exists", hint=f"pass --force to replace it, or choose another {flag} file")
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise MemfitError(f"cannot write {target} ({exc.strerror or exc})",
                          hint=f"{'free some space or ' if full else ''}choose another {flag}") from exc
    except BaseException:
        _remove(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, flag: str, force: bool,
                 example: str = "out") -> Path:
    """Write ``data`` (text as UTF-8 with ``\\n`` line ends) to ``path`` through :func:`atomic_output`."""
    with atomic_output(path, flag=flag, force=force, example=example) as tmp:
        if isinstance(data, str):
            with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(data)
        else:
            tmp.write_bytes(data)
    return Path(path)


def _fsync(path: Path) -> None:
    """Put the bytes on disk before the rename makes them the target (else a crash could leave an empty file
    under the final name on some file systems)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def temporary_beside(target: str | os.PathLike[str]) -> Path:
    """A new empty temporary file in ``target``'s folder, named as :func:`atomic_output` names its own, for a
    file another process writes and :func:`move_into_place` renames (``measure --snapshot``'s per-run files)."""
    t = Path(target)
    fd, name = tempfile.mkstemp(prefix=f".{t.name}.", suffix=TEMP_MARK + t.suffix, dir=_parent(t))
    os.close(fd)
    return Path(name)


def move_into_place(tmp: Path, target: str | os.PathLike[str], *, flag: str, force: bool,
                    example: str = "out") -> Path:
    """Rename the finished temporary file ``tmp`` (from :func:`temporary_beside`) onto ``target``, checked as
    :func:`check_output` checks (an existing target only with ``force``); ``tmp`` is removed if that fails."""
    try:
        out = check_output(target, flag=flag, force=force, example=example)
        os.replace(tmp, out)
    except BaseException:
        _remove(tmp)
        raise
    return out
