"""A hostile client against a real `rootproof serve` (issue 30, point 4): refused from its
headers before any byte of its body is read (401, 403), slow senders closed within the header
and body deadlines, idle connections closed, the connection cap, and no traceback in the log.

One server process for the module, with short limits (seconds) so the deadlines are quick.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .support import ADMIN_KEY, AUDITOR_KEY, OPERATOR_KEY, ProcessServer, serve_process, service_env

pytestmark = [pytest.mark.xdist_group("hostile")]  # one worker, one server for the module

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
KEEPALIVE_S = 2
MAX_CONNECTIONS = 8
SLACK_S = 3.0
"""How much later than its deadline a connection may be closed (a busy machine)."""
BIG = 33 * 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    home = tmp_path_factory.mktemp("hostile")
    env = service_env(
        home,
        ROOTPROOF_SERVICE_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        ROOTPROOF_SERVICE_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        ROOTPROOF_SERVICE_KEEPALIVE_S=str(KEEPALIVE_S),
        ROOTPROOF_SERVICE_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    )
    srv = serve_process(env, home / "serve.log")
    try:
        yield srv
    finally:
        srv.stop()


def _port(server: ProcessServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _connect(server: ProcessServer, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", _port(server)), timeout=timeout)


def _read_answer(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or goes quiet for the socket's timeout (False)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return received, False
    except ConnectionResetError:
        pass
    return received, True


def _problem(answer: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def _head(method: str, path: str, *, length: int, key: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()


@pytest.mark.parametrize(
    ("key", "path", "status", "detail"),
    [
        (None, "/api/alerts/alertmanager", 401, "missing API key"),
        (None, "/api/chat", 401, "missing API key"),
        ("not-a-key-of-this-server-0123", "/api/chat", 401, "unknown API key"),
        (AUDITOR_KEY, "/api/chat", 403, "the auditor role may not do this"),
        (AUDITOR_KEY, "/api/alerts/grafana", 403, "the auditor role may not do this"),
        (None, "/api/no-such-route", 401, "missing API key"),
    ],
)
def test_a_refused_request_is_answered_from_its_headers_before_its_body(
    server: ProcessServer, key: str | None, path: str, status: int, detail: str
) -> None:
    """Only the headers of a 33 MiB POST are sent: the answer comes, and the connection closes,
    without waiting for one byte of the body; the body then finds the connection closed."""
    with _connect(server, timeout=5) as sock:
        sock.sendall(_head("POST", path, length=BIG, key=key))
        answer, closed = _read_answer(sock)
        assert closed, f"the server waited for the body: {answer!r}"
        got, headers, problem = _problem(answer)
        assert got == status and str(problem["detail"]).startswith(detail), answer
        assert set(problem) == {"detail", "field"} and headers["connection"] == "close"
        assert headers["cache-control"] == "no-store"
        if status == 401:
            assert problem["field"] == "Authorization" and headers["www-authenticate"] == "Bearer"
        with pytest.raises(OSError):  # nobody reads it: the server reset the connection
            for _ in range(BIG // 65536):
                sock.sendall(b"x" * 65536)


def test_a_route_of_another_grant_is_refused_before_its_query_is_checked(server: ProcessServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        r = c.get("/api/diagnosis/s-1/trace/reasoning", params={"runId": "r-1"}, headers={"Authorization": f"Bearer {OPERATOR_KEY}"})
        assert r.status_code == 403 and r.json() == {"detail": "the operator role may not do this (needs auditor or admin)", "field": None}
        r = c.get("/api/diagnosis/s-1/trace/reasoning", params={"runId": "r-1"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 404  # the gate lets the role through; the route answers
        r = c.get("/api/runs/r-1", headers={"Authorization": "Basic abc"})
        assert r.status_code == 401 and r.json()["detail"].startswith("missing API key")
        for public in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
            assert c.get(public).status_code == 200, public
        # A key the role allows: the body is read and checked as before.
        r = c.post("/api/alerts/alertmanager", content=b"{", headers={"Authorization": f"Bearer {OPERATOR_KEY}", "content-type": "application/json"})
        assert r.status_code == 422, r.text


def test_an_answer_that_did_not_wait_for_the_body_closes_the_connection(server: ProcessServer) -> None:
    """A GET with a key declaring a body it never sends: answered (404) and closed at once,
    not kept waiting for a body nobody reads (uvicorn alone waited for its keep-alive)."""
    with _connect(server, timeout=KEEPALIVE_S + SLACK_S) as sock:
        sock.sendall(_head("GET", "/api/runs/no-such-run", length=BIG, key=OPERATOR_KEY))
        t0 = time.monotonic()
        answer, closed = _read_answer(sock)
        elapsed = time.monotonic() - t0
    assert closed and _problem(answer)[0] == 404, answer
    assert elapsed < KEEPALIVE_S / 2, elapsed


def _trickle(server: ProcessServer, head: bytes, byte: bytes, limit_s: float) -> tuple[float, bytes]:
    """Send `head`, then `byte` every 0.2 s until the server answers and closes (or `limit_s`):
    how long it took from the end of `head`, and the answer."""
    with _connect(server) as sock:
        sock.sendall(head)
        t0 = time.monotonic()
        sock.settimeout(0.2)
        answer = b""
        while time.monotonic() - t0 < limit_s:
            try:
                sock.sendall(byte)
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            answer += chunk
            if not chunk:
                break
        return time.monotonic() - t0, answer


def _idle(server: ProcessServer, head: bytes) -> tuple[float, bytes]:
    """Send `head` (maybe nothing), then nothing: how long until the server closes, and what it sent."""
    with _connect(server, timeout=KEEPALIVE_S + SLACK_S) as sock:
        sock.sendall(head)
        t0 = time.monotonic()
        answer, closed = _read_answer(sock)
        return (time.monotonic() - t0) if closed else float("inf"), answer


def test_slow_and_idle_connections_are_closed_at_their_deadlines(server: ProcessServer) -> None:
    """At once: a byte every 0.2 s in the headers (uvicorn alone kept it open for ever), or in
    the body; a connection that never sends a byte, and one idle after its answer."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        headers = pool.submit(_trickle, server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", b"a", HEADER_TIMEOUT_S + SLACK_S)
        body = pool.submit(_trickle, server, _head("POST", "/api/alerts/alertmanager", length=1000, key=OPERATOR_KEY) + b"{", b" ", BODY_TIMEOUT_S + SLACK_S)
        never = pool.submit(_idle, server, b"")
        after = pool.submit(_idle, server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")

    elapsed, answer = headers.result()
    assert HEADER_TIMEOUT_S - 0.1 <= elapsed < HEADER_TIMEOUT_S + SLACK_S, elapsed
    status, head, problem = _problem(answer)
    assert status == 408 and problem["field"] == "(headers)" and "ROOTPROOF_SERVICE_HEADER_TIMEOUT_S" in str(problem["detail"])
    assert head["connection"] == "close"

    elapsed, answer = body.result()
    assert BODY_TIMEOUT_S - 0.1 <= elapsed < BODY_TIMEOUT_S + SLACK_S, elapsed
    status, head, problem = _problem(answer)
    assert status == 408 and problem == {"detail": "the body did not arrive within 1 s (ROOTPROOF_SERVICE_BODY_TIMEOUT_S)", "field": "(body)"}
    assert head["connection"] == "close"

    elapsed, answer = never.result()
    assert answer == b"" and KEEPALIVE_S - 0.1 <= elapsed < KEEPALIVE_S + SLACK_S, elapsed
    elapsed, answer = after.result()
    assert answer.startswith(b"HTTP/1.1 200") and KEEPALIVE_S - 0.1 <= elapsed < KEEPALIVE_S + SLACK_S, elapsed


def test_connections_beyond_the_cap_are_answered_503(server: ProcessServer) -> None:
    held = [_connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        with _connect(server) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer, closed = _read_answer(extra)
        status, headers, problem = _problem(answer)
        assert closed and status == 503 and headers["retry-after"] == "1" and headers["connection"] == "close"
        assert "ROOTPROOF_SERVICE_MAX_CONNECTIONS" in str(problem["detail"])
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # the held connections' close reaches the server: it serves again
        r = httpx.get(server.url + "/healthz", timeout=5)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert r.status_code == 200


def test_the_server_log_has_no_traceback(server: ProcessServer) -> None:
    """Last: every client above went away or was closed mid-request; none left a traceback."""
    with _connect(server) as sock:  # and one more that goes away in the middle of its body
        sock.sendall(_head("POST", "/api/chat", length=5000, key=OPERATOR_KEY) + b'{"message": "wh')
    with _connect(server) as sock:  # and in the middle of its headers
        sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: x\r\nAuthor")
    time.sleep(0.3)
    assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    log = Path(server.log).read_text(errors="replace")
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("ROOTPROOF_SERVICE_HEADER_TIMEOUT_S", "soon", "valid number"),
        ("ROOTPROOF_SERVICE_MAX_CONNECTIONS", "0", "greater than or equal to 1"),
    ],
)
def test_a_bad_limit_stops_serve_naming_it(tmp_path: Path, variable: str, value: str, expected: str) -> None:
    import subprocess
    import sys

    env = service_env(tmp_path, **{variable: value})
    p = subprocess.run([sys.executable, "-m", "rootproof.cli", "serve", "--port", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and variable in p.stderr and expected in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_browser_session_is_decided_from_its_headers_too(server: ProcessServer) -> None:
    """The key gate reads a browser's session cookie as the routes do: a stale session posting
    33 MiB is refused before its body, and so is a live-looking cookie sent cross-site."""
    from rootproof.service.sessions import SESSION_COOKIE

    head = _head("POST", "/api/chat", length=BIG).replace(b"\r\n\r\n", f"\r\nCookie: {SESSION_COOKIE}=stale-token-0123456789abcdef\r\n\r\n".encode())
    with _connect(server, timeout=5) as sock:
        sock.sendall(head)
        answer, closed = _read_answer(sock)
        assert closed, f"the server waited for the body: {answer!r}"
        got, _headers, problem = _problem(answer)
        assert got == 401 and problem["field"] == "Cookie" and "session" in str(problem["detail"]), answer
