"""One HTTP failure mapping for nginx stub_status, Loki and Prometheus (`backends.live._http`).

A real loopback HTTP server answers every path with a chosen status and body; each backend
must map the same answer to the same error class. Also: the clients ignore proxy settings in
the environment, and a backend asked for a tool it does not serve raises BackendError itself.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rootproof.backends.live.logs import LogsBackend
from rootproof.backends.live.nginx import NginxBackend
from rootproof.backends.live.prometheus import PrometheusBackend
from rootproof.backends.live.redis import RedisBackend
from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable
from rootproof.targets import LokiTarget, NginxTarget, PrometheusTarget, RedisTarget
from rootproof.tools.base import InspectNginxArgs, QueryLogsArgs, QueryMetricsArgs

from .nginx_server import free_port

STUB = b"Active connections: 3 \nserver accepts handled requests\n 10 10 20 \nReading: 0 Writing: 1 Waiting: 2 \n"


@dataclass
class Answer:
    """What the server answers to every GET."""

    status: int = 200
    body: bytes = STUB
    headers: dict[str, str] = field(default_factory=dict)
    hits: int = 0


@pytest.fixture()
def server() -> Iterator[tuple[str, Answer]]:
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            answer.hits += 1
            self.send_response(answer.status)
            for k, v in answer.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", answer
    httpd.shutdown()
    httpd.server_close()


def _nginx(url: str) -> Callable[[], Any]:
    backend = NginxBackend(NginxTarget.model_construct(kind="nginx", name="edge", status_url=url + "/nginx_status", timeout_s=2, max_bytes=1 << 20), environ={})
    return lambda: backend.call("inspect_nginx", InspectNginxArgs(kind="status", query=""), now=datetime.now(UTC), run_id="t")


def _loki(url: str) -> Callable[[], Any]:
    backend = LogsBackend([LokiTarget.model_construct(kind="loki", name="loki", url=url, timeout_s=2, max_bytes=1 << 20, selector='{job=~".+"}',
                                                      service_label="service", tenant=None, password_env=None, password_file=None)], environ={})
    return lambda: backend.call("query_logs", QueryLogsArgs(query=""), now=datetime.now(UTC), run_id="t")


def _prometheus(url: str) -> Callable[[], Any]:
    backend = PrometheusBackend(PrometheusTarget.model_construct(kind="prometheus", name="prom", url=url, timeout_s=2, max_bytes=1 << 20,
                                                                 password_env=None, password_file=None), environ={})
    return lambda: backend.call("query_metrics", QueryMetricsArgs(metric="up"), now=datetime.now(UTC), run_id="t")


BACKENDS = {"nginx": _nginx, "loki": _loki, "prometheus": _prometheus}
PROM_ERROR = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}).encode()
CASES = [
    (500, b"internal error", {}, BackendUnavailable, "HTTP 500"),
    (503, b"", {}, BackendUnavailable, "HTTP 503"),
    (429, b"slow down", {}, BackendUnavailable, "HTTP 429"),
    (401, b"", {}, BackendUnavailable, "authentication failed (HTTP 401)"),
    (403, b"", {}, BackendUnavailable, "authentication failed (HTTP 403)"),
    (404, b"not found", {}, BackendUnavailable, "HTTP 404"),
    (302, b"", {"Location": "http://127.0.0.1:1/login"}, BackendUnavailable, "HTTP 302, a redirect"),
    (400, b"parse error at line 1, col 5: syntax error", {}, BackendQueryError, "refused the query (HTTP 400): parse error at line 1"),
    (422, PROM_ERROR, {}, BackendQueryError, "refused the query (HTTP 422): bad_data: parse error at char 3"),
    (200, b"<html>please log in</html>", {}, BackendUnavailable, "did not answer"),
]


@pytest.mark.parametrize("name", sorted(BACKENDS))
@pytest.mark.parametrize(("status", "body", "headers", "error", "text"), CASES, ids=[f"{c[0]}-{c[3].__name__}" for c in CASES])
def test_every_http_backend_maps_an_answer_alike(
    server: tuple[str, Answer], name: str, status: int, body: bytes, headers: dict[str, str], error: type[BackendError], text: str
) -> None:
    url, answer = server
    answer.status, answer.body, answer.headers = status, body, headers
    call = BACKENDS[name](url)
    with pytest.raises(BackendError) as info:
        call()
    assert type(info.value) is error
    assert text in str(info.value)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_refused_connection_and_a_url_that_is_not_http(name: str) -> None:
    with pytest.raises(BackendUnavailable, match="unreachable"):
        BACKENDS[name](f"http://127.0.0.1:{free_port()}")()
    with pytest.raises(BackendQueryError, match=r"not an http\(s\) URL"):
        BACKENDS[name]("ftp://127.0.0.1:21")()


def test_proxy_settings_in_the_environment_are_ignored(server: tuple[str, Answer], monkeypatch: pytest.MonkeyPatch) -> None:
    url, answer = server
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, dead_proxy)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    out = _nginx(url)()
    assert out.result.status["active"] == 3
    answer.body = json.dumps({"status": "success", "data": {"resultType": "streams", "result": []}}).encode()
    assert _loki(url)().result.total_matches == 0
    assert answer.hits == 2  # both reached the server, not the (dead) proxy


def test_a_tool_a_backend_does_not_serve_is_a_backend_error() -> None:
    backend = RedisBackend(RedisTarget(kind="redis", name="cache", url=f"redis://127.0.0.1:{free_port()}/0"), environ={})
    with pytest.raises(BackendError, match="does not serve 'inspect_nginx'") as info:
        backend.call("inspect_nginx", InspectNginxArgs(kind="status"), now=datetime.now(UTC), run_id="t")
    assert type(info.value) is BackendError
    backend.close()


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_an_invalid_url_is_refused_by_the_file_and_a_query_error_in_a_call(name: str) -> None:
    from pydantic import ValidationError

    model = {"nginx": NginxTarget, "loki": LokiTarget, "prometheus": PrometheusTarget}[name]
    field_name = "status_url" if name == "nginx" else "url"
    with pytest.raises(ValidationError, match="its port, if any, must be a number from 0 to 65535"):
        model.model_validate({"kind": model.model_fields["kind"].annotation.__args__[0], "name": "t", field_name: "http://127.0.0.1:99999"})  # type: ignore[union-attr]
    call = BACKENDS[name]("http://127.0.0.1:99999")  # built in code, past the file's checks
    with pytest.raises(BackendQueryError):
        call()
