"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no websocket, no node):
Chromium reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4.

Used by the browser tests and by ``bench/screenshots.py``. Debian's ``chromium`` package; the flags are
the ones that work in a container without a display, GPU, sandbox or network.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageVisit:
    """What one load of a page gave: console errors, every URL requested, sizes, the DOM, a screenshot."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    scroll_width: int = 0
    client_width: int = 0
    height: int = 0
    dom: str = ""
    png: bytes = b""


class Chromium:
    """One headless browser; :meth:`visit` opens a page in a fresh tab at a given viewport."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="memfit-chromium-")
        cmd_r, cmd_w = os.pipe()  # we write commands; chromium reads fd 3
        res_r, res_w = os.pipe()  # chromium writes fd 4; we read

        def child_fds() -> None:  # runs in the child before exec
            a, b = os.dup(cmd_r), os.dup(res_w)  # out of the way of 3 and 4 first
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=child_fds)  # noqa: PLW1509 (no threads here)
        os.close(cmd_r)
        os.close(res_w)
        self._out = cmd_w
        self._in = res_r
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    # -- protocol -------------------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self._in], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for i, e in enumerate(self.events):
            if e.get("method") == method and e.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method and e.get("sessionId") == session:
                return e
            self.events.append(e)

    # -- pages ----------------------------------------------------------------------------------------
    def visit(self, url: str, *, width: int, height: int = 900, screenshot: bool = False, full_page: bool = True,
              media: str = "screen") -> PageVisit:
        """Load ``url`` in a new tab at ``width`` x ``height`` CSS pixels and report on it."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", session=s)
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, s)
            self.send("Emulation.setEmulatedMedia", {"media": media}, s)
            self.send("Page.navigate", {"url": url}, s)
            self.wait_event("Page.loadEventFired", s)
            found = self.send("Runtime.evaluate", {"expression": _PROBE, "returnByValue": True}, s)
            value = json.loads(found["result"]["value"])
            visit = PageVisit(scroll_width=value["sw"], client_width=value["cw"], height=value["h"],
                              dom=value["dom"])
            if screenshot:
                h = value["h"] if full_page else height
                self.send("Emulation.setDeviceMetricsOverride",
                          {"width": width, "height": h, "deviceScaleFactor": 1, "mobile": False}, s)
                shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}, s)
                visit.png = base64.b64decode(shot["data"])
            self.send("Runtime.evaluate", {"expression": "0"}, s)  # flush late events of this page
            mine = [e for e in self.events if e.get("sessionId") == s]
            self.events = [e for e in self.events if e.get("sessionId") != s]
            visit.errors = _errors(mine)
            visit.requests = [e["params"]["request"]["url"] for e in mine
                              if e.get("method") == "Network.requestWillBeSent"]
            return visit
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def print_pdf(self, url: str) -> bytes:
        """The page printed to PDF (A4), as Chromium's print preview would."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            self.send("Page.enable", session=s)
            self.send("Page.navigate", {"url": url}, s)
            self.wait_event("Page.loadEventFired", s)
            pdf = self.send("Page.printToPDF", {"paperWidth": 8.27, "paperHeight": 11.69, "printBackground": True}, s)
            return base64.b64decode(pdf["data"])
        finally:
            self.send("Target.closeTarget", {"targetId": target})

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


_PROBE = """JSON.stringify({sw: document.documentElement.scrollWidth, cw: document.documentElement.clientWidth,
 h: Math.ceil(document.documentElement.scrollHeight), dom: document.documentElement.outerHTML})"""


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append(f"exception: {p.get('exceptionDetails', {}).get('text')}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            out.append(f"console.{p['type']}: {[a.get('value') for a in p.get('args', [])]}")
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} ({p['entry'].get('url', '')})")
        elif m == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')}")
    return out


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
