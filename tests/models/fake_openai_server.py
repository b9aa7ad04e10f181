"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 for testing model clients over real HTTP.

`POST /v1/chat/completions` records the JSON body, headers and arrival time, then replies with
the next scripted `Reply` (a completion, or a status with an error body, optional headers such as
`Retry-After`, and an optional delay before answering). A request with `"stream": true` gets a
200 completion as server-sent events, as OpenAI streams it: a role chunk, the content and each
tool call's arguments split into small chunks, a finish chunk, a usage chunk when the request
asked for one (`stream_options.include_usage`) and `data: [DONE]`; `first_chunk_delay_s` and
`chunk_delay_s` pace it (a slow prompt, a stalled answer). An exhausted script answers
`otherwise` when set (a server that always rejects the key, or is always slow), else 500 so the
test sees it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = ["FakeOpenAI", "Reply", "completion", "error", "fake_openai", "serve", "stream_chunks", "unauthorized"]


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    """Seconds to wait before answering (to provoke client timeouts)."""
    first_chunk_delay_s: float = 0.0
    """Streaming: seconds between the response headers and the first chunk."""
    chunk_delay_s: float = 0.0
    """Streaming: seconds between two chunks."""
    stall_after: int | None = None
    """Streaming: after this many chunks, stop sending (the connection stays open) for `chunk_delay_s`."""


def completion(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning_content: str | None = None,
    refusal: str | None = None,
    prompt_tokens: int | None = 10,
    completion_tokens: int | None = 5,
    finish_reason: str = "stop",
    delay_s: float = 0.0,
) -> Reply:
    """A chat.completion reply; `tool_calls` items are `{"id", "name", "arguments"}` (arguments a string)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in tool_calls
        ]
        finish_reason = "tool_calls"
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
    }
    if prompt_tokens is not None and completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return Reply(body=body, delay_s=delay_s)


def error(
    status: int,
    message: str,
    *,
    retry_after: str | None = None,
    delay_s: float = 0.0,
    kind: str = "server_error",
) -> Reply:
    """An error reply in OpenAI's `{"error": {...}}` shape."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return Reply(status=status, body=body, headers=headers, delay_s=delay_s)


def unauthorized(key_shown: str = "sk-proj-abcdefghijklmnopqrstuvwx") -> Reply:
    """OpenAI's answer to a wrong key: 401 `invalid_api_key`, echoing (part of) the key as it does."""
    message = (
        f"Incorrect API key provided: {key_shown}. You can find your API key at "
        "https://platform.openai.com/account/api-keys."
    )
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    return Reply(status=401, body=body)


def _pieces(text: str, size: int = 7) -> list[str]:
    """`text` in pieces of `size` characters, at most `MAX_PIECES` of them (a 100 000-character
    hostile answer in 7-character pieces cost the client's SDK half a minute of CPU per reply)."""
    size = max(size, -(-len(text) // MAX_PIECES))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


MAX_PIECES = 400


def stream_chunks(body: dict[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects a streaming server sends for the completion `body`."""
    head = {"id": body.get("id", "chatcmpl-fake"), "object": "chat.completion.chunk", "created": body.get("created", 0), "model": body.get("model", "fake-model")}
    choice = body["choices"][0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        out += [chunk({"reasoning_content": p}) for p in _pieces(message["reasoning_content"])]
    if message.get("content"):
        out += [chunk({"content": p}) for p in _pieces(message["content"])]
    if message.get("refusal"):
        out.append(chunk({"refusal": message["refusal"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in _pieces(fn.get("arguments") or "")]
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage and body.get("usage"):
        out.append({**head, "choices": [], "usage": body["usage"]})
    return out


class FakeOpenAI:
    """The running server: `base_url`, what it received, and the script it answers from."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        host, port = server.server_address[:2]
        self.base_url = f"http://{host!s}:{port}/v1"
        self.requests: list[dict[str, Any]] = []
        """JSON bodies received, in order."""
        self.headers: list[dict[str, str]] = []
        """Request headers (lower-cased names), in order."""
        self.times: list[float] = []
        """`time.monotonic()` at each request's arrival."""
        self._script: list[Reply | Callable[[dict[str, Any]], Reply]] = []
        self.otherwise: Reply | None = None
        """The answer once the script is exhausted (None: a 500 naming the exhausted script)."""
        self._lock = threading.Lock()
        self.model_ids: list[str] | None = ["fake-model"]
        """What `GET /v1/models` lists (None: that route answers 404, as some servers do)."""

    def script(self, replies: list[Reply | Callable[[dict[str, Any]], Reply]]) -> None:
        """Answer the next requests with these replies, in order (replacing what was left)."""
        with self._lock:
            self._script = list(replies)

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            self.times.append(time.monotonic())
            nxt = self._script.pop(0) if self._script else None
        if nxt is None:
            return self.otherwise or error(500, "fake server: the test script is exhausted")
        # A callable reply is built from the request (a turn that depends on earlier results).
        return nxt(body) if callable(nxt) else nxt


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(Reply(status=404, body={"error": {"message": f"no route {self.path}"}}))
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(Reply(status=400, body={"error": {"message": "body is not JSON"}}))
                return
            reply = fake._record(body, {k.lower(): v for k, v in self.headers.items()})
            if reply.delay_s:
                time.sleep(reply.delay_s)
            if body.get("stream") and reply.status == 200 and isinstance(reply.body, dict) and reply.body.get("choices"):
                self._stream(reply, include_usage=bool((body.get("stream_options") or {}).get("include_usage")))
                return
            self._send(reply)

        def _stream(self, reply: Reply, *, include_usage: bool) -> None:
            chunks = stream_chunks(reply.body, include_usage=include_usage) if isinstance(reply.body, dict) else []
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                if reply.first_chunk_delay_s:
                    time.sleep(reply.first_chunk_delay_s)
                for i, chunk in enumerate(chunks):
                    if i and (reply.stall_after is None or i == reply.stall_after) and reply.chunk_delay_s:
                        time.sleep(reply.chunk_delay_s)
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
            self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send(models_reply(fake, self.path))

        def _send(self, reply: Reply) -> None:
            payload = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
            try:
                self.send_response(reply.status)
                content_type = "text/plain" if isinstance(reply.body, str) else "application/json"
                if not any(name.lower() == "content-type" for name in reply.headers):
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (timeout): nothing to answer.
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base
            return

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out reset their connections; that is expected here.
        return


@contextmanager
def serve() -> Iterator[FakeOpenAI]:
    """Run a fake server on an ephemeral port of 127.0.0.1 in a background thread."""
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    fake = FakeOpenAI(server)
    server.RequestHandlerClass = _handler(fake)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A fresh scripted OpenAI-compatible server for one test."""
    with serve() as fake:
        yield fake


def models_reply(fake: FakeOpenAI, path: str) -> Reply:
    """The answer to `GET path`: `/v1/models` lists `fake.model_ids` (OpenAI's list shape)."""
    if path.rstrip("/") != "/v1/models" or fake.model_ids is None:
        return Reply(status=404, body={"error": {"message": f"no route {path}"}})
    data = [{"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for m in fake.model_ids]
    return Reply(body={"object": "list", "data": data})
