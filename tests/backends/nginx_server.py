"""A private nginx for the live nginx tests: Debian's /usr/sbin/nginx in a tmp prefix on a free loopback port.

`nginx_with_slow_upstream()` starts a real Python HTTP server (the upstream) whose `/slow`
sleeps longer than nginx's `proxy_read_timeout 1s`, and nginx in the foreground
(`-p PREFIX -c PREFIX/nginx.conf -g 'daemon off;'`) with pid, temp paths and logs inside the
prefix, `stub_status` at `/nginx_status` and `log_format upstream` (combined +
`$upstream_response_time $upstream_status`). Requests through nginx to `/slow/…` produce real
`upstream timed out` error lines and 504 access lines. When the tests run as root, nginx's
workers run as `nobody` (no `user` directive) and only open sockets; the master writes the logs.
nginx is stopped by its pid (SIGQUIT, then SIGKILL) and the upstream shut down on exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from .procs import free_port, stop_process

NGINX = "/usr/sbin/nginx"
SLOW_S = 2.5


def _unavailable(what: str) -> NoReturn:
    """Skip, or fail under ROOTPROOF_REQUIRE_SERVICES=1 (as tests/conftest.py does)."""
    if os.environ.get("ROOTPROOF_REQUIRE_SERVICES", "") == "1":
        pytest.fail(f"{what} (ROOTPROOF_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(what)


@dataclass(frozen=True)
class Nginx:
    """A running private nginx."""

    prefix: Path
    port: int
    error_log: Path
    access_log: Path
    config: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str:
        return f"{self.base}/nginx_status"


class _Upstream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.startswith("/slow"):
            time.sleep(SLOW_S)
        body = b'{"status":"ok"}'
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # nginx gave up on us (the point of /slow)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def _conf(prefix: Path, port: int, upstream_port: int) -> str:
    temp = "\n".join(f"    {k}_temp_path {prefix}/tmp/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{
    worker_connections 64;
}}
http {{
{temp}
    log_format upstream '$remote_addr - $remote_user [$time_local] "$request" '
                        '$status $body_bytes_sent "$http_referer" "$http_user_agent" '
                        '$upstream_response_time $upstream_status';
    access_log {prefix}/logs/access.log upstream;
    include {prefix}/conf.d/*.conf;
    upstream reports_backend {{
        server 127.0.0.1:{upstream_port};
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        location /nginx_status {{
            stub_status;
        }}
        location / {{
            proxy_pass http://reports_backend;
            proxy_connect_timeout 1s;
            proxy_read_timeout 1s;
        }}
    }}
}}
"""


@contextmanager
def nginx_with_slow_upstream() -> Iterator[Nginx]:
    """Start the upstream and nginx; stop both on exit (skips without /usr/sbin/nginx)."""
    if not os.access(NGINX, os.X_OK):
        _unavailable(f"{NGINX} is not installed (Debian package nginx)")
    upstream = _QuietServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    prefix = Path(tempfile.mkdtemp(prefix="rootproof-nginx-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        for sub in ("logs", "tmp", "conf.d"):
            (prefix / sub).mkdir()
        os.chmod(prefix, 0o755)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(_conf(prefix, port, upstream.server_address[1]), encoding="utf-8")
        proc = subprocess.Popen(
            [NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        server = Nginx(prefix, port, prefix / "logs/error.log", prefix / "logs/access.log", conf)
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                _unavailable(f"nginx did not start: {err.strip()[:500]}")
            try:
                httpx.get(server.status_url, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    _unavailable("nginx did not answer on its status URL within 10s")
                time.sleep(0.05)
        yield server
    finally:
        if proc is not None:
            stop_process(proc, signal.SIGQUIT)  # nginx's graceful stop
        if proc is not None and proc.stderr is not None:
            proc.stderr.close()
        upstream.shutdown()
        upstream.server_close()
        shutil.rmtree(prefix, ignore_errors=True)


def slow_requests(server: Nginx, n: int) -> list[int]:
    """`n` requests to `/slow/export?id=…` through nginx, concurrently; their status codes (504 expected)."""
    codes: list[int] = [0] * n

    def one(i: int) -> None:
        codes[i] = httpx.get(f"{server.base}/slow/export?id={9930 + i}", timeout=10).status_code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # nginx writes a request's access-log line in its log phase, after the client has its answer:
    # wait (bounded) until both logs hold every request, so a test never reads a log mid-write.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        access = Path(server.access_log).read_text(encoding="utf-8", errors="replace").count('" 504 ')
        errors = Path(server.error_log).read_text(encoding="utf-8", errors="replace").count("upstream timed out")
        if access >= n and errors >= n:
            break
        time.sleep(0.05)
    return codes
