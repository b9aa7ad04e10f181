"""A small client of the Chrome DevTools Protocol for the browser tests: Debian's headless
`chromium` started with `--remote-debugging-port=0`, driven over one WebSocket (`websockets`'
synchronous client) with flattened target sessions. Only what the tests use: browser contexts
(separate cookie jars), tabs, `Runtime.evaluate`, typing, cookies and the network log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from rootproof.service.process import free_port


class CdpError(RuntimeError):
    """A command the browser answered with an error, or an answer that did not come in time."""


@dataclass
class Browser:
    """A running headless chromium and the DevTools connection to it."""

    proc: subprocess.Popen[bytes]
    ws: ClientConnection
    events: list[dict[str, Any]] = field(default_factory=list)
    _next: int = 0

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None, timeout: float = 20) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile are kept in `events`)."""
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"{method}: no answer within {timeout} s")
            data = json.loads(self.ws.recv(timeout=left))
            if data.get("id") == ident:
                if "error" in data:
                    raise CdpError(f"{method}: {data['error']}")
                result: dict[str, Any] = data.get("result", {})
                return result
            if "method" in data:
                self.events.append(data)

    def context(self) -> Context:
        """A new browser context: a cookie jar of its own, like a separate browser profile."""
        ctx = self.send("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
        return Context(self, ctx)


@dataclass
class Context:
    browser: Browser
    id: str

    def tab(self) -> Tab:
        target = self.browser.send("Target.createTarget", {"url": "about:blank", "browserContextId": self.id})["targetId"]
        session = self.browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        tab = Tab(self.browser, session)
        tab.send("Page.enable")
        tab.send("Network.enable")
        return tab

    def cookies(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.browser.send("Storage.getCookies", {"browserContextId": self.id})["cookies"]
        return found


@dataclass
class Tab:
    browser: Browser
    session: str

    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 20) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise CdpError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 20, what: str = "") -> Any:
        """Poll `expression` until it is truthy (navigations in between are waited out)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(CdpError):  # the page is between two documents
                last = self.evaluate(expression)
                if last:
                    return last
            time.sleep(0.05)
        href = ""
        with contextlib.suppress(CdpError):
            href = self.evaluate("location.href + ' :: ' + document.body.innerText.slice(0, 500)")
        raise CdpError(f"{what or expression}: not true within {timeout} s (last {last!r}; page {href})")

    def new_document(self, action: Callable[[], object], what: str) -> None:
        """Run `action` (a navigation, a click that submits a form) and wait until another
        document than the current one has loaded (redirects followed)."""
        self.evaluate("window.__rpOld = true")
        action()
        self.wait_for("!window.__rpOld && document.readyState === 'complete'", what=what)

    def goto(self, url: str) -> None:
        """Navigate to `url` and wait for the document (after any redirect) to load."""
        self.new_document(lambda: self.send("Page.navigate", {"url": url}), f"load {url}")

    def click(self, selector: str) -> None:
        """Click an element that leads to another document (a submit button) and wait for it."""
        script = f"document.querySelector({json.dumps(selector)}).click()"
        self.new_document(lambda: self.evaluate(script), f"click {selector}")

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type `text` as keyboard input."""
        assert self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return false; e.focus(); return true; }})()"), selector
        self.send("Input.insertText", {"text": text})

    def requests(self) -> Iterator[str]:
        """The URLs this tab has requested so far."""
        for event in self.browser.events:
            if event.get("sessionId") == self.session and event.get("method") == "Network.requestWillBeSent":
                yield str(event["params"]["request"]["url"])


HEADLESS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions")
"""How the tests run chromium: headless, no sandbox (root in a container), no GPU, no first-run pages."""


@contextlib.contextmanager
def launch(chromium: str, profile: Path, *, extra: list[str] | None = None, ready_s: float = 30) -> Iterator[Browser]:
    """Headless chromium on a DevTools port of its choosing, connected; closed on exit. Every
    fetch that is not to loopback goes to a proxy that is not there and fails: no network."""
    dead_proxy = free_port()
    profile.mkdir(parents=True, exist_ok=True)
    cmd = [
        chromium,
        *HEADLESS,
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        f"--proxy-server=http://127.0.0.1:{dead_proxy}",  # loopback itself bypasses the proxy
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        *(extra or []),
        "about:blank",
    ]
    with (profile / "chromium.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + ready_s
        lines: list[str] = []
        while len(lines) < 2:
            if proc.poll() is not None:
                raise CdpError(f"chromium exited with {proc.returncode}: {(profile / 'chromium.log').read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise CdpError(f"chromium wrote no DevTools port within {ready_s} s")
            time.sleep(0.05)
            lines = port_file.read_text().split() if port_file.exists() else []
        with connect(f"ws://127.0.0.1:{lines[0]}{lines[1]}", max_size=None, open_timeout=10) as ws:
            browser = Browser(proc=proc, ws=ws)
            try:
                yield browser
            finally:
                with contextlib.suppress(Exception):
                    browser.send("Browser.close", timeout=5)
    finally:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
