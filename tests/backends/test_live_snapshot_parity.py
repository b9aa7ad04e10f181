"""The same data gives the same results live as from a snapshot.

The built-in nginx-upstream-timeout scenario's nginx logs, config, stub_status and application
logs are written to real files (and served by a real stub_status-like HTTP server); the live
backends' results at the scenario's clock must equal the snapshot backend's, ref for ref.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rootproof.backends.live.logs import LogsBackend
from rootproof.backends.live.nginx import NginxBackend
from rootproof.backends.snapshot import SnapshotBackend
from rootproof.scenarios.loader import load_scenario
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import LogsTarget, NginxTarget
from rootproof.tools.base import TOOLS
from rootproof.tools.refs import enumerate_ref_paths, ref_text

SCENARIO = "nginx-upstream-timeout"


@pytest.fixture()
def utc_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """nginx's error log is in the server's local time; the snapshot's is UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture()
def stub_status() -> Iterator[str]:
    status = load_scenario(SCENARIO).responses.nginx_status or {}
    page = (
        f"Active connections: {status['active']} \nserver accepts handled requests\n"
        f" {status['accepts']} {status['handled']} {status['requests']} \n"
        f"Reading: {status['reading']} Writing: {status['writing']} Waiting: {status['waiting']} \n"
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/nginx_status"
    server.shutdown()
    server.server_close()


def _same(tool: str, args: dict[str, Any], snapshot: SnapshotBackend, live: Any, now: Any) -> None:
    model = TOOLS[tool].args_model.model_validate(args)
    want = snapshot.call(tool, model, now=now, run_id="s").json()
    got = live.call(tool, model, now=now, run_id="l").json()
    assert enumerate_ref_paths(got) == enumerate_ref_paths(want) != [], args
    for path in enumerate_ref_paths(want):
        assert ref_text(tool, got, path) == ref_text(tool, want, path), (args, path)
    assert {k: v for k, v in got.items() if k != "no_evidence"} == {k: v for k, v in want.items() if k != "no_evidence"}


def test_nginx_results_equal_the_snapshot(tmp_path: Path, utc_local_time: None, stub_status: str) -> None:
    scenario = load_scenario(SCENARIO)
    lines = scenario.responses.lines
    (tmp_path / "error.log").write_text("\n".join(ln.text for ln in lines["nginx.error_log"]) + "\n")
    (tmp_path / "access.log").write_text("\n".join(ln.text for ln in lines["nginx.access_log"]) + "\n")
    (tmp_path / "nginx.conf").write_text("\n".join(scenario.responses.nginx_config or ()) + "\n")
    target = NginxTarget(kind="nginx", name="edge", error_log=tmp_path / "error.log", access_log=tmp_path / "access.log",
                         config=tmp_path / "nginx.conf", status_url=stub_status)
    live, snapshot = NginxBackend(target, environ={}), SnapshotBackend(scenario)
    for args in (
        {"kind": "error_log", "query": "upstream timed out"},
        {"kind": "error_log", "query": "9970 9981", "since": "10m"},
        {"kind": "access_log", "query": "504"},
        {"kind": "access_log", "query": "reports 504", "limit": 3, "offset": 2},
        {"kind": "access_log", "since": "1h"},
        {"kind": "config"},
        {"kind": "config", "query": "proxy_read_timeout"},
        {"kind": "status"},
        {"kind": "status", "query": "waiting"},
    ):
        _same("inspect_nginx", args, snapshot, live, scenario.now)
    live.close()


def test_logs_results_equal_the_snapshot(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIO)
    entries = scenario.responses.logs or ()
    assert {e.source for e in entries} == {"reports-service.log"}
    (tmp_path / "reports-service.log").write_text(
        "".join(json.dumps({"ts": format_timestamp(e.ts), "level": e.level, "service": e.service, "message": e.message}) + "\n" for e in entries)
    )
    target = LogsTarget(kind="logs", name="reports", paths=[str(tmp_path / "*.log")], service="reports-service")
    live, snapshot = LogsBackend([target], environ={}), SnapshotBackend(scenario)
    os.utime(tmp_path / "reports-service.log", (scenario.now.timestamp(), scenario.now.timestamp()))
    for args in (
        {"query": "export broken pipe"},
        {"level": "WARN"},
        {"service": "reports-service", "limit": 3, "offset": 1},
        {"query": '"client closed connection"', "since": "15m"},
        {"scope": "APPLICATION", "query": "9931"},
    ):
        _same("query_logs", args, snapshot, live, scenario.now)
