"""A headless Chromium for the browser tests: Debian's ``chromium`` package, installed here when it is
missing and we are root on Debian (``apt-get install chromium``); skipped with a message elsewhere."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cdp import Chromium, find_chromium

INSTALL_LOCK = Path("/tmp/memfit-chromium-install.lock")


def _install_on_debian() -> tuple[str | None, str]:
    """``apt-get install chromium`` as root on Debian (one installer at a time across xdist workers)."""
    if not Path("/etc/debian_version").exists() or shutil.which("apt-get") is None:
        return None, "not Debian: install Chromium (chromium or chromium-browser on PATH) to run the browser tests"
    if os.geteuid() != 0:
        return None, "Chromium is missing and installing it needs root: sudo apt-get install chromium"
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if find_chromium():  # another worker installed it while we waited
            return find_chromium(), ""
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
            if done.returncode != 0:
                return None, f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()[-300:]}"
    return find_chromium(), ""


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    exe = find_chromium()
    why = ""
    if exe is None:
        exe, why = _install_on_debian()
    if exe is None:
        pytest.skip(f"no headless Chromium for the browser tests: {why}")
    browser = Chromium(exe)
    try:
        yield browser
    finally:
        browser.close()
