"""Request size caps enforced before routing, authentication or parsing.

A raw ASGI middleware: a request whose `Content-Length` is above its cap is answered `413` at
once, and a body sent without one (chunked) is counted as it arrives and refused the moment it
passes the cap. The body is read into memory only up to the cap, then handed to the app as it
came. So no request, with or without a key, can make the server hold more than the cap.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["BodyLimit", "NoStore"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """Caps request bodies: `caps` maps a path prefix to its cap in bytes (the longest prefix
    that matches wins); other paths get `default`. `setting` names the cap in the 413."""

    def __init__(self, app: ASGIApp, *, caps: dict[str, tuple[int, str]], default: tuple[int, str]) -> None:
        self.app = app
        self.caps = sorted(caps.items(), key=lambda kv: -len(kv[0]))
        self.default = default

    def _cap(self, path: str) -> tuple[int, str]:
        for prefix, cap in self.caps:
            if path.startswith(prefix):
                return cap
        return self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        cap, setting = self._cap(str(scope.get("path", "")))
        length = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await _problem(send, 400, "Content-Length: not a number", "Content-Length")
                return
            if declared > cap:
                await _problem(send, 413, f"the body is larger than {cap} bytes ({setting})", "(body)")
                return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > cap:
                await _problem(send, 413, f"the body is larger than {cap} bytes ({setting})", "(body)")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _problem(send: Send, status: int, detail: str, field: str) -> None:
    body = json.dumps({"detail": detail, "field": field}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})


class NoStore:
    """`Cache-Control: no-store` on every answer of `/api/*` and `/runs/*`, event streams included
    (they came with the framework's `no-cache`, which lets a cache keep the run's evidence). A
    plain ASGI middleware: Starlette's `BaseHTTPMiddleware` (`@app.middleware("http")`) raised
    `RuntimeError: No response returned.` with a traceback in the server's log each time a
    client went away in the middle of its request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(("/api/", "/runs/")):
            await self.app(scope, receive, send)
            return

        async def send_no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers") or [] if k.lower() != b"cache-control"]
                message = {**message, "headers": [*headers, (b"cache-control", b"no-store")]}
            await send(message)

        await self.app(scope, receive, send_no_store)
