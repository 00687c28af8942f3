"""A headless Chromium driven over the DevTools protocol (for the dashboard's test): start it, run
script in the page, take a screenshot, stop it. Debian's `chromium`; no browser download."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

BINARY = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, profile: Path, width: int = 1280, height: int = 900) -> None:
        assert BINARY is not None, "chromium is not installed (make's install step installs it)"
        profile.mkdir(parents=True, exist_ok=True)
        # Its own TMPDIR, for the singleton socket's directory it makes there and leaves behind (a
        # short path: a unix socket's must fit in 108 bytes, which a test's tmp_path may not).
        self.tmp = tempfile.mkdtemp(prefix="xce-chromium-")
        try:
            self.proc = subprocess.Popen(
                [BINARY, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
                 f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "TMPDIR": self.tmp})
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self._next = 0
        self.events: list[dict[str, Any]] = []  # notifications that came while waiting for a reply
        try:
            self.ws = self._connect(profile / "DevToolsActivePort")
        except BaseException:
            self.close()
            raise

    def _connect(self, port_file: Path) -> ClientConnection:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            pages = [t for t in json.load(answer) if t["type"] == "page"]
        return connect(pages[0]["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=10)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        self.ws.send(json.dumps({"id": self._next, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if "method" in message and len(self.events) < 100_000:
                self.events.append(message)
            if message.get("id") == self._next:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def go(self, url: str) -> None:
        self.send("Page.enable")
        self.send("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        """The browser's whole process group killed (its helpers too, though it may have ended),
        and its TMPDIR removed, whatever fails on the way."""
        ws = getattr(self, "ws", None)
        try:
            if ws is not None:
                ws.close()
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            finally:
                shutil.rmtree(self.tmp, ignore_errors=True)
