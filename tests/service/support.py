"""What the service tests share: a real server on a loopback port, SSE parsing, keys.

`serve_in_thread` runs `create_app` under uvicorn in a thread of the test process (one replica);
`serve_process` starts `rootproof serve` as a process of its own (replicas the tests can kill).
Every server listens on a free loopback port and is reached over real HTTP.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from rootproof.service.process import ServeProcess, free_port, start_serve
from tests.services import inherited_env, unavailable

OPERATOR_KEY = "op-key-0123456789abcdef"
OPERATOR2_KEY = "op2-key-0123456789abcdef"
AUDITOR_KEY = "aud-key-0123456789abcdef"
ADMIN_KEY = "adm-key-0123456789abcdef"
API_KEYS = f"{OPERATOR_KEY}:operator,{OPERATOR2_KEY}:operator,{AUDITOR_KEY}:auditor,{ADMIN_KEY}:admin"
ROOT = Path(__file__).resolve().parents[2]


def auth(key: str) -> dict[str, str]:
    """The Authorization header of `key`."""
    return {"Authorization": f"Bearer {key}"}


@dataclass
class SseEvent:
    """One parsed server-sent event."""

    event: str | None
    id: str | None
    data: dict[str, Any] | None
    comment: bool = False


def read_sse(lines: Iterator[str]) -> Iterator[SseEvent]:
    """Parse an event stream line by line (comments become `comment=True` events)."""
    event: str | None = None
    ident: str | None = None
    data: list[str] = []
    for line in lines:
        if line == "":
            if event is not None or data:
                yield SseEvent(event=event, id=ident, data=json.loads("\n".join(data)) if data else None)
            event, ident, data = None, None, []
            continue
        if line.startswith(":"):
            yield SseEvent(event=None, id=None, data=None, comment=True)
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            ident = value
        elif name == "data":
            data.append(value)


def stream(client: httpx.Client, method: str, url: str, *, stop_after: int | None = None, **kwargs: Any) -> list[SseEvent]:
    """The events of one SSE request (comments dropped); stops after `stop_after` events."""
    out: list[SseEvent] = []
    with client.stream(method, url, **kwargs) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers.get_list("cache-control") == ["no-store"], resp.headers  # as docs/service.md promises
        for ev in read_sse(resp.iter_lines()):
            if ev.comment:
                continue
            out.append(ev)
            if stop_after is not None and len(out) >= stop_after:
                break
    return out


class ThreadServer:
    """uvicorn serving an app in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def service_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a service process: its own data folder and keys."""
    env = inherited_env() | {k: v for k, v in os.environ.items() if k == "ROOTPROOF_REQUIRE_SERVICES"}
    env.update({"ROOTPROOF_HOME": str(home), "ROOTPROOF_API_KEYS": API_KEYS, "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


ProcessServer = ServeProcess


def serve_process(env: dict[str, str], log: Path) -> ServeProcess:
    """Start `rootproof serve` on a free port and wait for `/readyz` (`rootproof.service.process`)."""
    return start_serve(env, log, ready_s=90, cwd=ROOT)


def redis_or_skip(url: str = "redis://127.0.0.1:6379/0") -> str:
    """`url` when a Redis answers there; else skip (fail under ROOTPROOF_REQUIRE_SERVICES=1)."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:  # noqa: BLE001
        unavailable(f"Redis at {url} unreachable: {exc}")
    return url


_COMPLETION = {
    "id": "chatcmpl-held",
    "object": "chat.completion",
    "created": 0,
    "model": "slow",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "I cannot tell yet."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}


class SlowModelServer:
    """An OpenAI-compatible endpoint on loopback that holds every completion request for
    `hold_s` seconds and then answers 503: a run against it stays in flight long enough to be
    cancelled, disconnected or killed (real HTTP; the client under test is the real one).

    With `answer=True` a held request is answered `200` with a plain completion (the run ends
    SUCCESS, its fallback saying the model gave no draft) once the gate opens (`release()`) or
    `hold_s` passes; `hold()` closes the gate again."""

    def __init__(self, hold_s: float = 30.0, *, answer: bool = False) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        hold = hold_s
        self.requests = 0
        self.gate = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = json.dumps({"object": "list", "data": [{"id": "slow", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                outer.requests += 1
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                if answer:
                    outer.gate.wait(hold)
                    status, body = 200, json.dumps(_COMPLETION).encode()
                else:
                    time.sleep(hold)
                    status, body = 503, b'{"error": {"message": "busy"}}'
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def release(self) -> None:
        """Answer the held requests now, and the next ones at once."""
        self.gate.set()

    def hold(self) -> None:
        """Hold the next requests again."""
        self.gate.clear()

    def __enter__(self) -> SlowModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def env(self) -> dict[str, str]:
        """Settings that point a service at this server."""
        return {
            "ROOTPROOF_MODEL": "openai",
            "ROOTPROOF_OPENAI_BASE_URL": self.url,
            "ROOTPROOF_OPENAI_PROVIDER": "llamacpp",
            "ROOTPROOF_OPENAI_MODEL": "slow",
            "ROOTPROOF_MODEL_MAX_RETRIES": "0",
            "ROOTPROOF_MODEL_TIMEOUT_S": "60",
        }
