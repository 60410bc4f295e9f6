"""Writing an output file the one way every command does: refuse an existing file unless ``--force``, fail
before slow work when the file could not be written, and write atomically (a temporary file beside the
target, then a rename), so a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from memfit.errors import MemfitError

__all__ = ["check_target", "write_atomic"]


def check_target(path: str | os.PathLike[str], *, force: bool, flag: str, example: str = "report.html") -> Path:
    """Fail early (before a slow trace or measurement) when ``flag``'s file could not be written."""
    target = Path(path)
    if target.is_dir():
        raise MemfitError(f"{flag} {target} is a directory: give a file name such as {target / example}")
    if target.exists() and not force:
        raise MemfitError(f"{target} exists: pass --force to replace it, or choose another {flag} file")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise MemfitError(f"the folder {parent} does not exist: create it or choose another {flag} file")
    return target


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, force: bool = False, flag: str,
                 example: str = "report.html") -> Path:
    """Write ``data`` (text as UTF-8 with ``\\n`` line ends, or bytes) to ``path`` atomically.

    The temporary file is created in the target's folder (a rename within one file system is atomic) and
    given the permissions a new file would get (0666 less the umask).
    """
    target = check_target(path, force=force, flag=flag, example=example)
    parent = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        if not force and target.exists():  # appeared while we worked
            raise MemfitError(f"{target} exists: pass --force to replace it, or choose another {flag} file")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
