"""Driving a headless Chromium over the DevTools protocol without a driver library: Chromium
started with --remote-debugging-pipe reads JSON commands on fd 3 and answers on fd 4, each
message ending in a NUL byte. Enough to open a page, run script in it (typing, clicking) and
wait for what it shows."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from dash_util import CHROMIUM_FLAGS, chromium

from waits import WaitTimedOut, wait_until


class CdpError(AssertionError):
    pass


class Browser:
    def __init__(self, profile: Path, timeout: float = 30.0) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        to_chromium_r, self._to_chromium = os.pipe()
        self._from_chromium, from_chromium_w = os.pipe()

        def wire_fds() -> None:
            # In the child: the protocol's fds are 3 (commands in) and 4 (answers out); moved
            # through high numbers first so neither end is overwritten by the other.
            high_r, high_w = os.dup2(to_chromium_r, 200), os.dup2(from_chromium_w, 201)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "--window-size=1280,900", "about:blank"],
            preexec_fn=wire_fds, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_chromium_r)
        os.close(from_chromium_w)
        self._next_id = 0
        self._buffer = b""

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self._send("Browser.close", {}, None)
                self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_chromium)
            os.close(self._from_chromium)

    def _send(self, method: str, params: dict[str, Any], session: str | None) -> int:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._to_chromium, json.dumps(msg).encode() + b"\0")
        return self._next_id

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        """Send one command and return its result; events in between are dropped."""
        wanted = self._send(method, params or {}, session)
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, _, self._buffer = self._buffer.partition(b"\0")
                msg = json.loads(raw)
                if msg.get("id") == wanted:
                    if "error" in msg:
                        raise CdpError(f"{method}: {msg['error']}")
                    return msg.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"{method}: no answer within {self.timeout}s")
            ready, _, _ = select.select([self._from_chromium], [], [], left)
            if ready:
                chunk = os.read(self._from_chromium, 1 << 16)
                if not chunk:
                    raise CdpError(f"chromium exited (code {self.proc.poll()}) during {method}")
                self._buffer += chunk

    def open(self, url: str) -> Page:
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a script expression in the page (a promise is awaited)."""
        result = self.browser.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True,
        }, self.session)
        if "exceptionDetails" in result:
            raise CdpError(f"{expression[:80]}: {result['exceptionDetails'].get('exception', result)}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 20.0, what: str | None = None) -> Any:
        """Poll the expression until it is truthy, or fail at the deadline showing the page."""
        try:
            return wait_until(lambda: self.evaluate(expression), timeout, what or expression, interval=0.05)
        except WaitTimedOut as e:
            text = self.evaluate("document.querySelector('main') && document.querySelector('main').innerText")
            raise CdpError(f"{e}; the page shows:\n{text}") from None

    def text(self, selector: str = "main") -> str:
        return str(self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''"))

    def fill(self, selector: str, value: str) -> None:
        """Set an input's value as typing does, firing its input event."""
        self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            f" el.value = {json.dumps(value)}; el.dispatchEvent(new Event('input', {{bubbles: true}})); }})()"
        )

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")
