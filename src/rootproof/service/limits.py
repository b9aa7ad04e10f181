"""What a client can make the server hold, decided before routing and parsing: raw ASGI
middlewares (no framework in between, so a client that goes away ends quietly).

- `KeyGate`: a route that needs a key is answered `401` (no key, an unknown one) or `403` (the
  role lacks the route's grant) from the request's headers alone, with `Connection: close`:
  no byte of its body is ever read.
- `BodyLimit`: a request whose `Content-Length` is above its cap is answered `413` at once, and
  a body sent without one (chunked) is counted as it arrives and refused the moment it passes
  the cap; a body that has not arrived whole within `ROOTPROOF_SERVICE_BODY_TIMEOUT_S` of its
  headers is answered `408` and its connection closed. The body is read into memory only up to
  the cap, then handed to the app as it came.
- `NoStore`: `Cache-Control: no-store` on the answers of `/api/*` and `/runs/*`.

The connection-level limits (the header deadline, idle keep-alive, the connection cap) are
`service.server`'s.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from rootproof.service.auth import Principal, Refusal, require_grant

__all__ = ["BodyLimit", "KeyGate", "NoStore"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class KeyGate:
    """`401`/`403` from the headers alone, before any byte of a body is read. `need(scope)`
    says whether the request's route needs a key and which grant its role must hold (None:
    any key); `who(scope)` says who sent it (a key, a browser's session) or raises a
    `Refusal` — the decision the routes' own dependency makes too."""

    def __init__(self, app: ASGIApp, *, who: Callable[[Scope], Awaitable[Principal]], need: Callable[[Scope], tuple[bool, str | None]]) -> None:
        self.app = app
        self.who = who
        self.need = need

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            needs_key, grant = self.need(scope)
            if needs_key:
                try:
                    who = await self.who(scope)
                    if grant is not None:
                        require_grant(who, grant)
                except Refusal as exc:
                    await _problem(send, exc.status, exc.detail, exc.field, exc.headers)
                    return
        await self.app(scope, receive, send)


class BodyLimit:
    """Caps request bodies: `caps` maps a path prefix to its cap in bytes (the longest prefix
    that matches wins); other paths get `default`. `setting` names the cap in the 413. The
    whole body must arrive within `timeout_s` of the headers, else `408`."""

    def __init__(self, app: ASGIApp, *, caps: dict[str, tuple[int, str]], default: tuple[int, str], timeout_s: float) -> None:
        self.app = app
        self.caps = sorted(caps.items(), key=lambda kv: -len(kv[0]))
        self.default = default
        self.timeout_s = timeout_s

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
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                detail = f"the body did not arrive within {self.timeout_s:g} s (ROOTPROOF_SERVICE_BODY_TIMEOUT_S)"
                await _problem(send, 408, detail, "(body)")
                return
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


async def _problem(send: Send, status: int, detail: str, field: str | None, headers: dict[str, str] | None = None) -> None:
    """The service's JSON problem (`{"detail", "field"}`), with `Connection: close`: what the
    client may still be sending is never read."""
    body = json.dumps({"detail": detail, "field": field}).encode("utf-8")
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                *extra,
            ],
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
