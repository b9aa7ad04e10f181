"""How `rootproof serve` runs uvicorn: its h11 protocol with the connection limits uvicorn lacks.

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) but has no deadline for a
request's headers: its keep-alive timer is cancelled by the first byte that arrives, so a
client sending a byte every few seconds holds a connection for ever (and a connection that
never sends a byte is never closed). `GuardedH11Protocol`, a subclass of uvicorn's own h11
protocol, adds:

- an idle deadline from the connection's opening (`ROOTPROOF_SERVICE_KEEPALIVE_S`, the one
  uvicorn applies between requests): a connection that sends nothing is closed;
- a header deadline (`ROOTPROOF_SERVICE_HEADER_TIMEOUT_S`) from a request's first byte to the
  end of its headers: past it, `408` and the connection is closed;
- the connection cap (`ROOTPROOF_SERVICE_MAX_CONNECTIONS`): a connection opened beyond it is
  answered `503` (the JSON problem, `Retry-After`) on its request and closed;
- a response sent before its request's body was read (a `401` of the key gate, a `404`) ends
  the connection: the rest of that body is never read.

The body deadline is the ASGI middleware's (`service.limits.BodyLimit`): it times the reads the
app asks for. None of them writes a traceback: a timeout is one INFO line of `uvicorn.error`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

if TYPE_CHECKING:
    from rootproof.settings import Settings

__all__ = ["GuardedH11Protocol", "ServeConfig", "run", "serve_config"]

_log = logging.getLogger("uvicorn.error")
_CAP_WARNING_EVERY_S = 60.0
"""The connection cap's warning is logged at most this often (a flood is not a log flood)."""
_last_cap_warning = 0.0


class ServeConfig(uvicorn.Config):
    """uvicorn's configuration plus the limits `GuardedH11Protocol` reads (it travels to each
    worker process of `--workers N` as uvicorn's own does)."""

    def __init__(self, app: Any, *, header_timeout_s: float, max_connections: int, **kwargs: Any) -> None:
        super().__init__(app, http=GuardedH11Protocol, **kwargs)
        self.header_timeout_s = header_timeout_s
        self.max_connections = max_connections


def serve_config(app: Any, settings: Settings, **kwargs: Any) -> ServeConfig:
    """The configuration `rootproof serve` runs `app` with: the limits from `settings`."""
    return ServeConfig(
        app,
        header_timeout_s=settings.service_header_timeout_s,
        max_connections=settings.service_max_connections,
        timeout_keep_alive=settings.service_keepalive_s,
        proxy_headers=False,  # the app believes X-Forwarded-* from ROOTPROOF_TRUSTED_PROXIES only
        **kwargs,
    )


def run(config: ServeConfig) -> None:
    """What `uvicorn.run` does with its configuration: one process, or `config.workers` worker
    processes sharing one socket."""
    server = uvicorn.Server(config)
    try:
        if config.workers > 1:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[config.bind_socket()]).run()
        else:
            server.run()
    except KeyboardInterrupt:
        pass
    if not server.started and config.workers == 1:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE: the port is taken, say (uvicorn logged why)


def _problem_bytes(status: int, reason: str, detail: str, field: str) -> bytes:
    """A whole JSON problem answer, written straight to a connection h11 has no request on."""
    body = json.dumps({"detail": detail, "field": field}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\ncache-control: no-store\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def _over_capacity(scope: Any, receive: Any, send: Any) -> None:
    """The one request of a connection opened beyond the cap: `503`, then the connection closes."""
    del scope, receive
    body = json.dumps({"detail": "the server has as many connections as it serves (ROOTPROOF_SERVICE_MAX_CONNECTIONS); retry later", "field": None}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with an idle deadline from the connection's opening, a header
    deadline, the connection cap, and no reading of a body its response did not wait for."""

    def __init__(self, config: uvicorn.Config, server_state: ServerState, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout_s: float = getattr(config, "header_timeout_s", 10.0)
        self.max_connections: int | None = getattr(config, "max_connections", None)
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self.app = _over_capacity  # this connection only
            _warn_cap(self.max_connections)
        # Idle until its first byte, as between two requests (uvicorn arms this after a response only).
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.header_timer is None and self.conn.their_state is h11.IDLE:  # a request begins
            self.header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # its headers are in (or the connection failed)
            self._cancel_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # Answered before its body was read (a 401, a 404): the rest is never read.
            self._unset_keepalive_if_required()
            self.transport.close()

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _header_timeout(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        _log.info("%s - closed: its request's headers took longer than %g s (ROOTPROOF_SERVICE_HEADER_TIMEOUT_S)", client, self.header_timeout_s)
        detail = f"the request's headers did not arrive within {self.header_timeout_s:g} s (ROOTPROOF_SERVICE_HEADER_TIMEOUT_S)"
        self.transport.write(_problem_bytes(408, "Request Timeout", detail, "(headers)"))
        self.transport.close()


def _warn_cap(cap: int) -> None:
    global _last_cap_warning
    now = time.monotonic()
    if now - _last_cap_warning >= _CAP_WARNING_EVERY_S:
        _last_cap_warning = now
        _log.warning("more than %d open connections (ROOTPROOF_SERVICE_MAX_CONNECTIONS): requests beyond them are answered 503", cap)
