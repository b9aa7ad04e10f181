"""The live nginx backend against a private nginx (Debian's /usr/sbin/nginx) in front of a slow upstream."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rootproof.backends.live.nginx import NginxBackend, access_line_fits, line_time, parse_stub_status
from rootproof.errors import BackendQueryError, BackendUnavailable
from rootproof.targets import NginxTarget
from rootproof.tools.base import InspectNginxArgs
from rootproof.tools.refs import ref_text

from .nginx_server import Nginx, free_port, nginx_with_slow_upstream, slow_requests

SLOW = 3


@pytest.fixture(scope="module")
def nginx() -> Iterator[Nginx]:
    with nginx_with_slow_upstream() as server:
        assert slow_requests(server, SLOW) == [504] * SLOW
        yield server


def _target(server: Nginx, **kw: object) -> NginxTarget:
    fields: dict[str, object] = {
        "kind": "nginx", "name": "edge", "error_log": server.error_log, "access_log": server.access_log,
        "access_format": "upstream", "config": server.config, "status_url": server.status_url,
    }
    fields.update(kw)
    return NginxTarget.model_validate(fields)


def _call(backend: NginxBackend, now: datetime | None = None, **args: object) -> tuple[dict[str, object], dict[str, object]]:
    out = backend.call("inspect_nginx", InspectNginxArgs.model_validate(args), now=now or datetime.now(UTC), run_id="t")
    assert out.data_source == "live:edge"
    return out.json(), out.details


def test_504s_after_a_slow_upstream_are_found_and_windowed(nginx: Nginx) -> None:
    backend = NginxBackend(_target(nginx), environ={})
    data, details = _call(backend, kind="access_log", query="504")
    lines = data["lines"]
    assert isinstance(lines, list) and len(lines) == SLOW == data["total_matches"]
    assert all('"GET /slow/export?id=' in ln and '" 504 ' in ln and ln.endswith(" 504") for ln in lines)
    assert all(access_line_fits("upstream", ln) for ln in lines) and details["format_mismatch"] == 0
    data, _ = _call(backend, kind="error_log", query="upstream timed out")
    assert len(data["lines"]) == SLOW  # type: ignore[arg-type]
    assert all("upstream timed out (110: Connection timed out) while reading response header from upstream" in ln for ln in data["lines"])  # type: ignore[union-attr]
    assert ref_text("inspect_nginx", data, "$.lines[0]") == data["lines"][0]  # type: ignore[index]
    later = datetime.now(UTC) + timedelta(hours=2)
    data, _ = _call(backend, now=later, kind="access_log", query="504", since="1h")
    assert data["lines"] == [] and "found no match for query '504' (kind=access_log, since=1h) in window" in str(data["no_evidence"])
    earlier = datetime.now(UTC) - timedelta(hours=1)
    data, _ = _call(backend, now=earlier, kind="error_log", query="upstream")
    assert data["total_matches"] == 0
    backend.close()


def test_stub_status_is_parsed_with_the_snapshot_field_names(nginx: Nginx) -> None:
    backend = NginxBackend(_target(nginx), environ={})
    data, details = _call(backend, kind="status")
    status = data["status"]
    assert isinstance(status, dict)
    assert set(status) == {"active", "accepts", "handled", "requests", "reading", "writing", "waiting"}
    assert all(isinstance(v, int) for v in status.values()) and status["requests"] >= SLOW and status["active"] >= 1
    assert ref_text("inspect_nginx", data, "$.status.requests") == f"requests: {status['requests']}"
    assert details["bytes_read"] and details["url"] == nginx.status_url
    data, _ = _call(backend, kind="status", query="waiting")
    assert list(data["status"]) == ["waiting"]  # type: ignore[arg-type]
    backend.close()
    backend.close()


def test_config_lines_whole_and_includes_listed_not_followed(nginx: Nginx) -> None:
    backend = NginxBackend(_target(nginx), environ={})
    data, details = _call(backend, kind="config", query="proxy_read_timeout")
    assert data["config"] == nginx.config.read_text().splitlines()
    assert details["includes"] == [f"{nginx.prefix}/conf.d/*.conf"]
    i = next(i for i, ln in enumerate(data["config"]) if "proxy_read_timeout" in ln)  # type: ignore[arg-type]
    assert ref_text("inspect_nginx", data, f"$.config[{i}]") == f"{i + 1}:             proxy_read_timeout 1s;"
    data, _ = _call(backend, kind="config", query="ssl_certificate")
    assert data["config"] == [] and "kind=config" in str(data["no_evidence"])


def test_a_kind_the_target_lacks_says_so(nginx: Nginx) -> None:
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", error_log=nginx.error_log), environ={})
    for kind in ("access_log", "config", "status"):
        data, _ = _call(backend, kind=kind)
        assert f"the target edge has no {kind if kind != 'status' else 'status_url'} configured" in str(data["no_evidence"])


def test_unreadable_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "error.log"
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", error_log=missing, config=tmp_path), environ={})
    with pytest.raises(BackendQueryError, match=str(missing)):
        _call(backend, kind="error_log")
    with pytest.raises(BackendQueryError, match=str(tmp_path)):
        _call(backend, kind="config")
    check = backend.check()
    assert not check.usable and str(missing) in (check.problem or "")


def test_status_refused_or_silent_is_unavailable() -> None:
    refused = NginxBackend(NginxTarget(kind="nginx", name="edge", status_url=f"http://127.0.0.1:{free_port()}/nginx_status"), environ={})
    with pytest.raises(BackendUnavailable, match="unreachable"):
        _call(refused, kind="status")
    with socket.socket() as listener:  # accepts connections (backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://user:s3cret@127.0.0.1:{listener.getsockname()[1]}/nginx_status"
        silent = NginxBackend(NginxTarget.model_construct(kind="nginx", name="edge", status_url=url, timeout_s=0.3), environ={})  # built in code, past the file's checks: the backend still masks it
        with pytest.raises(BackendUnavailable, match="timed out") as info:
            _call(silent, kind="status")
        assert "s3cret" not in str(info.value) and "user" not in str(info.value)
        silent.close()


def test_access_log_larger_than_max_bytes_is_read_bounded(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    now = datetime.now(UTC).replace(microsecond=0)
    lines = []
    for i in range(400):
        ts = (now - timedelta(seconds=400 - i)).strftime("%d/%b/%Y:%H:%M:%S +0000")
        lines.append(f'10.0.0.{i % 250} - - [{ts}] "GET /api/orders/{i} HTTP/1.1" 200 512 "-" "okhttp/4.12.0"')
    log.write_text("\n".join(lines) + "\n")
    assert log.stat().st_size > 3 * 4096
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", access_log=log, max_bytes=4096), environ={})
    data, details = _call(backend, now=now, kind="access_log", limit=200)
    got = data["lines"]
    assert isinstance(got, list) and 0 < len(got) < 400
    assert details["truncated"] is True and details["bytes_read"] <= 4096
    assert got[0] == lines[-1] and set(got) <= set(lines[-len(got):])  # the newest part only, whole lines
    assert lines[0] not in got


def test_line_times_and_formats(tmp_path: Path) -> None:
    assert line_time("access_log", '1.2.3.4 - - [01/Dec/2026:14:00:00 +0200] "GET / HTTP/1.1" 200 1 "-" "-"') == datetime(2026, 12, 1, 12, tzinfo=UTC)
    local = datetime(2026, 12, 1, 12, 0, 0).astimezone()
    assert line_time("error_log", "2026/12/01 12:00:00 [error] 123#123: *5 upstream timed out") == local.astimezone(UTC)
    assert line_time("error_log", "\tcontinued") is None and line_time("access_log", "garbage [99/Foo/2026:00:00:00 +0000]") is None
    combined = '1.2.3.4 - - [01/Dec/2026:12:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl/8"'
    assert access_line_fits("combined", combined) and not access_line_fits("upstream", combined)
    assert access_line_fits("upstream", combined + " 0.002, 1.001 200, 504")
    assert parse_stub_status("Active connections: 2 \nserver accepts handled requests\n 5 5 9 \nReading: 0 Writing: 1 Waiting: 1 \n")["requests"] == 9
    with pytest.raises(ValueError):
        parse_stub_status("<html>nginx</html>")
    # a combined line in an `upstream` target is kept and counted; a line without a time continues the one before
    log = tmp_path / "access.log"
    now = datetime.now(UTC)
    stamp = now.strftime("%d/%b/%Y:%H:%M:%S +0000")
    log.write_text(f"orphan\n{combined.replace('01/Dec/2026:12:00:00 +0000', stamp)}\ncontinued\n")
    backend = NginxBackend(NginxTarget(kind="nginx", name="edge", access_log=log, access_format="upstream"), environ={})
    data, details = _call(backend, now=now + timedelta(seconds=1), kind="access_log")
    assert len(data["lines"]) == 2 and details["format_mismatch"] == 1 and details["unparsed"] == 1  # type: ignore[arg-type]


def test_check_reports_usable_and_warnings(nginx: Nginx, tmp_path: Path) -> None:
    with closing(NginxBackend(_target(nginx), environ={})) as backend:
        ok = backend.check()
    assert ok.usable and ok.problem is None and ok.warnings == []
    status_url = f"http://127.0.0.1:{free_port()}/s"
    with closing(NginxBackend(_target(nginx, error_log=tmp_path / "missing.log", status_url=status_url), environ={})) as backend:
        partial = backend.check()
    assert partial.usable and len(partial.warnings) == 2
    with closing(NginxBackend(NginxTarget(kind="nginx", name="edge"), environ={})) as backend:
        assert backend.check().usable is False




def test_a_dripping_status_server_is_cut_off() -> None:
    """httpx's timeout is per read: a server sending a byte every 0.1s is still stopped after 2 × timeout_s."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Drip(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"A")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/nginx_status"
        backend = NginxBackend(NginxTarget(kind="nginx", name="edge", status_url=url, timeout_s=0.4), environ={})
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="timed out"):
            _call(backend, kind="status")
        assert time.monotonic() - started < 2.5
        backend.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_status_url_that_is_not_http_is_a_query_error() -> None:
    backend = NginxBackend(NginxTarget.model_construct(kind="nginx", name="edge", status_url="ftp://127.0.0.1/status"), environ={})  # past the file's checks
    with pytest.raises(BackendQueryError, match="not an http"):
        _call(backend, kind="status")
    assert backend.check().usable is False
