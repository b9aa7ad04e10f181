"""The live logs backend: real files in three formats, and a Loki-speaking HTTP server.

No Loki binary is installable here, so the Loki tests start a real HTTP server on loopback
(ThreadingHTTPServer) that answers `/loki/api/v1/query_range` and `/ready` in Loki's documented
response format (`{"status":"success","data":{"resultType":"streams","result":[{"stream":{…},
"values":[["<ns>","<line>"]]}]}}`): they check our HTTP client, the LogQL we send and how we read
the answer, not Loki itself. Like Loki, the server applies the query's line filters (`|~ "re"`,
`|= "text"`: to the line only, never to labels) and `limit` (the newest lines across streams),
so a filter pushed down to Loki that hides evidence shows here.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from rootproof.backends.live.logparse import LineParser, normalise_level, parse_logfmt, parse_time
from rootproof.backends.live.logs import LogsBackend
from rootproof.backends.live.loki import build_logql
from rootproof.errors import BackendQueryError, BackendUnavailable, ConfigError
from rootproof.targets import LogsTarget, LokiTarget
from rootproof.tools.base import QueryLogsArgs

from .logs_fixtures import STACK, TEXT_PATTERN, write_all
from .nginx_server import free_port

NOW = datetime.now(UTC)


def _call(backend: LogsBackend, now: datetime = NOW, **args: Any) -> tuple[dict[str, Any], Any]:
    out = backend.call("query_logs", QueryLogsArgs.model_validate(args), now=now, run_id="t")
    return out.json(), out


@pytest.fixture()
def files(tmp_path: Path) -> list[LogsTarget]:
    return write_all(tmp_path, NOW)


def test_formats_parse_into_entries(files: list[LogsTarget]) -> None:
    data, out = _call(LogsBackend(files, environ={}), limit=200)
    entries = data["entries"]
    by_msg = {e["message"].split("\n")[0]: e for e in entries}
    error = by_msg["Failed to create order order_id=88130"]
    assert error["message"] == "Failed to create order order_id=88130\n" + STACK  # the stack trace whole
    assert error["level"] == "ERROR" and error["source"] == "order-service.jsonl" and error["service"] == "order-service"
    worker = by_msg["order 88130 moved to retry queue attempt=2"]  # epoch ms, severity=warning, its own service
    assert worker["level"] == "WARN" and worker["service"] == "order-worker"
    assert "old line outside the window" not in str(entries)
    charge = by_msg['charge failed: upstream timed out provider=stripe duration_ms=30001 err="context deadline exceeded"']
    assert charge["service"] == "payment-gateway" and charge["source"] == "payments.log"
    assert by_msg["retrying charge attempt=2"]["service"] == "payment-retrier"
    text = by_msg["Request failed: java.net.SocketTimeoutException: Read timed out"]
    assert text["message"].count("\n\tat ") == 2 and text["service"] == "checkout-api"
    hikari = by_msg["HikariPool-1 - Connection is not available, request timed out after 30000ms. logger=com.zaxxer.hikari.pool.HikariPool"]
    assert hikari["message"].endswith('\n{"ts": "torn write')  # a torn line continues the record before it
    assert data["total_matches"] == len(entries) == 10
    assert [e["ts"] for e in entries] == sorted((e["ts"] for e in entries), reverse=True)
    assert out.data_source == "live:orders-app"
    for i, e in enumerate(entries):
        expected = {"order-service.jsonl": None, "payments.log": "live:payments", "checkout.log": "live:checkout"}[e["source"]]
        assert out.ref_sources.get(f"$.entries[{i}]") == expected
    assert out.details["targets"] == ["orders-app", "payments", "checkout"] and out.details["bytes_read"] > 1000


def test_filters_order_and_paging(files: list[LogsTarget]) -> None:
    backend = LogsBackend(files, environ={})
    data, _ = _call(backend, level="ERROR")
    assert {e["level"] for e in data["entries"]} == {"ERROR"} and data["total_matches"] == 3
    data, _ = _call(backend, level="WARN", service="order-service")
    assert [e["level"] for e in data["entries"]] == ["ERROR", "WARN"]
    data, _ = _call(backend, query='hikaripool "request timed out"')
    assert data["entries"][0]["level"] == "ERROR"  # both terms, newer; then the WARN (both), …
    assert all("hikaripool" in e["message"].lower() for e in data["entries"][:2])
    data, _ = _call(backend, query="timed out", limit=2, offset=1)
    assert len(data["entries"]) == 2 and data["total_matches"] >= 4
    data, _ = _call(backend, query="timed", offset=50)
    assert "matches, none at offset 50" in data["no_evidence"] and data["entries"] == []
    data, _ = _call(backend, scope="DATABASE")
    assert data["no_evidence"].startswith("query_logs found no match for query '' (scope=DATABASE, since=30m) in window ")


def test_a_file_larger_than_max_bytes_is_read_bounded(tmp_path: Path) -> None:
    log = tmp_path / "big.jsonl"
    lines = [json.dumps({"ts": (NOW - timedelta(seconds=600 - i)).isoformat(), "level": "info", "msg": f"request {i} done"}) for i in range(600)]
    log.write_text("\n".join(lines) + "\n")
    older = tmp_path / "big.jsonl.1"
    older.write_text(lines[0] + "\n")
    os.utime(older, (NOW.timestamp() - 60, NOW.timestamp() - 60))
    assert log.stat().st_size > 5 * 4096
    target = LogsTarget(kind="logs", name="big", paths=[str(tmp_path / "big.jsonl*")], service="api", max_bytes=4096)
    data, out = _call(LogsBackend([target], environ={}), limit=200)
    got = [e["message"] for e in data["entries"]]
    assert 0 < len(got) < 600 and got[0] == "request 599 done"
    assert got == [f"request {i} done" for i in range(599, 599 - len(got), -1)]  # only the newest part
    assert out.details["truncated"] is True and out.details["bytes_read"] <= 4096
    assert out.details["per_target"]["big"]["files"] == ["big.jsonl"]  # the older file was not reached


def test_files_newest_first_and_old_files_skipped(tmp_path: Path) -> None:
    (tmp_path / "app.log.1.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    for name, age, msg in (("app.log", 0, "current"), ("app.log.1", 300, "rotated"), ("app.log.2", 7200, "ancient")):
        p = tmp_path / name
        ts = NOW - timedelta(seconds=age + 1)
        p.write_text(f"ts={ts.isoformat()} level=info msg={msg}\n")
        os.utime(p, (ts.timestamp(), ts.timestamp()))
    target = LogsTarget(kind="logs", name="app", paths=[str(tmp_path / "app.log*")], format="logfmt", service="api")
    data, out = _call(LogsBackend([target], environ={}))
    assert [e["message"] for e in data["entries"]] == ["current", "rotated"]
    assert out.details["per_target"]["app"]["files"] == ["app.log", "app.log.1"]
    assert out.details["per_target"]["app"]["compressed_skipped"] == ["app.log.1.gz"] and out.details["per_target"]["app"]["unparsed"] == 0


def test_a_glob_matching_nothing(tmp_path: Path) -> None:
    target = LogsTarget(kind="logs", name="app", paths=[str(tmp_path / "none-*.log")], service="api")
    backend = LogsBackend([target], environ={})
    data, _ = _call(backend, query="error")
    assert data["entries"] == [] and f"the target app matches no files ({tmp_path}/none-*.log)" in data["no_evidence"]
    check = backend.check()
    assert check.usable and check.warnings == [f"app: the globs {tmp_path}/none-*.log match no file yet"]


def test_unreadable_files_and_bad_patterns(tmp_path: Path) -> None:
    (tmp_path / "dir.log").mkdir()  # matches the glob but cannot be read as a file… is not a file: skipped
    target = LogsTarget(kind="logs", name="app", paths=[str(tmp_path / "*.log")], service="api")
    assert _call(LogsBackend([target], environ={}))[0]["entries"] == []
    with pytest.raises(ValidationError, match="pattern"):  # the targets file refuses it before any backend exists
        LogsTarget(kind="logs", name="t", paths=["x"], format="regex", pattern="(", service="s")
    with pytest.raises(ValidationError, match="named group for the time"):
        LogsTarget(kind="logs", name="t", paths=["x"], format="regex", pattern="(?P<message>.*)", service="s")
    text = tmp_path / "plain.log"
    text.write_text("no time here\n")
    t = LogsTarget(kind="logs", name="plain", paths=[str(text)], format="regex", pattern=TEXT_PATTERN, service="s")
    backend = LogsBackend([t], environ={})
    assert _call(backend)[1].details["per_target"]["plain"]["unparsed"] == 1
    assert "is a regex record with a time" in backend.check().warnings[0]


def test_parsers() -> None:
    assert parse_logfmt('ts=1 level=error msg="a \\"quoted\\" value" path=/x flag') == {
        "ts": "1", "level": "error", "msg": 'a "quoted" value', "path": "/x", "flag": "true"}
    assert parse_logfmt("    at com.example.Foo(Foo.java:1)") is None
    assert [normalise_level(v) for v in ("warning", "err", "critical", "crit", "panic", "trace", "notice", "weird", None)] == [
        "WARN", "ERROR", "FATAL", "FATAL", "FATAL", "DEBUG", "INFO", "INFO", "INFO"]
    t = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
    for v in ("2026-12-01T12:00:00Z", "2026-12-01T13:00:00+01:00", "2026-12-01 12:00:00", 1796126400, 1796126400000,
              "1796126400000000000", "2026-12-01T12:00:00.000000000Z", 1796126400.0):
        assert parse_time(v) == t, v
    assert parse_time("2026-12-01 12:00:00,250") == t + timedelta(milliseconds=250)
    assert parse_time("yesterday") is None and parse_time(True) is None
    hostile = LineParser(fmt="jsonl", service="s", fields={})
    assert hostile.fields_of('{"a":' + "[" * 200_000 + "]" * 200_000 + "}") is None  # no RecursionError
    mapped = LineParser(fmt="jsonl", service="s", fields={"message": "log", "ts": "time", "level": "log.level"})
    rec = mapped.parse(['{"time": "2026-12-01T12:00:00Z", "log": {"level": "crit"}, "stream": "stderr"}', '{"log": "x"}']).records
    assert len(rec) == 1 and rec[0].level == "FATAL" and rec[0].message == '{"level":"crit"} stream=stderr\n{"log": "x"}'


@dataclass
class FakeLoki:
    """A loopback HTTP server answering like Loki; records every request."""

    streams: list[dict[str, Any]]
    status: int = 200
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


_LINE_FILTER = re.compile(r'\|([~=])\s*"((?:[^"\\]|\\.)*)"')


def _loki_select(streams: list[dict[str, Any]], logql: str, limit: int) -> list[dict[str, Any]]:
    """What Loki answers for `logql`: its line filters applied to each line, then the newest `limit` lines."""
    filters = [(op, codecs.decode(raw, "unicode_escape")) for op, raw in _LINE_FILTER.findall(logql)]

    def keep(line: str) -> bool:
        return all(re.search(arg, line) if op == "~" else arg in line for op, arg in filters)

    values = [(int(ns), i, line) for i, s in enumerate(streams) for ns, line in s["values"] if keep(line)]
    chosen = sorted(values, key=lambda v: -v[0])[:limit]
    return [
        {"stream": s["stream"], "values": [[str(ns), line] for ns, j, line in chosen if j == i]}
        for i, s in enumerate(streams)
        if any(j == i for _, j, _ in chosen)
    ]


@pytest.fixture()
def loki() -> Iterator[FakeLoki]:
    fake = FakeLoki(streams=[])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            parts = urlsplit(self.path)
            fake.requests.append((parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()}))
            if parts.path == "/ready":
                body = b"ready\n"
            else:
                query = parse_qs(parts.query)
                result = _loki_select(fake.streams, query.get("query", [""])[0], int(query.get("limit", ["100"])[0]))
                body = json.dumps({"status": "success", "data": {"resultType": "streams", "result": result,
                                                                   "stats": {}}}).encode()
            if fake.status != 200:
                body = b"parse error at line 1, col 5: syntax error"
            self.send_response(fake.status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def _ns(ts: datetime) -> str:
    return str(int(ts.timestamp()) * 10**9 + ts.microsecond * 1000)


def test_loki_logql_headers_and_lines(loki: FakeLoki) -> None:
    t1, t2, t3 = (NOW - timedelta(minutes=m) for m in (1, 2, 3))
    loki.streams = [
        {"stream": {"service": "orders", "level": "error", "job": "k8s"}, "values": [
            [_ns(t1), "HikariPool-1 - Connection is not available, request timed out after 30000ms."]]},
        {"stream": {"service": "orders", "job": "k8s"}, "values": [
            [_ns(t2), json.dumps({"level": "warn", "msg": "slow query timed out", "duration_ms": 5012})],
            [_ns(t3), 'level=error msg="charge timed out" provider=stripe']]},
    ]
    target = LokiTarget(kind="loki", name="loki", url=loki.url + "/", tenant="team-a", password_env="LOKI_TOKEN")
    backend = LogsBackend([target], environ={"LOKI_TOKEN": "tok-123"})
    data, out = _call(backend, query='"timed out" hikari', service="orders")
    path, params, headers = loki.requests[-1]
    assert path == "/loki/api/v1/query_range"
    assert params["query"] == ['{job=~".+", service="orders"}']  # query terms are matched here, not by Loki
    assert params["direction"] == ["backward"] and params["limit"] == ["2000"]
    assert params["end"] == [_ns(NOW)] and params["start"] == [_ns(NOW - timedelta(minutes=30))]
    assert headers["x-scope-orgid"] == "team-a" and headers["authorization"] == "Bearer tok-123"
    entries = data["entries"]
    assert [e["message"] for e in entries] == [
        "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
        "slow query timed out duration_ms=5012",
        "charge timed out provider=stripe",
    ]
    assert [e["level"] for e in entries] == ["ERROR", "WARN", "ERROR"]
    assert {e["service"] for e in entries} == {"orders"} and {e["source"] for e in entries} == {"loki"}
    assert out.data_source == "live:loki" and out.details["per_target"]["loki"]["logql"] == params["query"][0]
    assert "tok-123" not in json.dumps(out.details)
    assert backend.check().usable and loki.requests[-1][0] == "/ready"


def test_loki_basic_auth_and_a_bad_query(loki: FakeLoki) -> None:
    target = LokiTarget(kind="loki", name="loki", url=f"http://reader@127.0.0.1:{loki.port}", password_env="PW")
    backend = LogsBackend([target], environ={"PW": "pw"})
    _call(backend)
    assert loki.requests[-1][2]["authorization"] == "Basic cmVhZGVyOnB3"  # reader:pw
    loki.status = 400
    with pytest.raises(BackendQueryError, match="HTTP 400"):
        _call(backend)


def test_a_dead_loki_does_not_hide_file_logs(files: list[LogsTarget]) -> None:
    dead = LokiTarget(kind="loki", name="loki", url=f"http://127.0.0.1:{free_port()}", timeout_s=1)
    backend = LogsBackend([dead, *files], environ={})
    data, out = _call(backend, level="ERROR")
    assert data["total_matches"] == 3 and out.details["unavailable"] == ["loki"]
    assert "unreachable" in out.details["errors"]["loki"]
    assert all(out.ref_sources[f"$.entries[{i}]"].startswith("live:") for i in range(3))  # none from the first target
    data, _ = _call(backend, query="no-such-term-anywhere")
    assert "not searched: loki (unavailable)" in data["no_evidence"]
    check = backend.check()
    assert check.usable and any(w.startswith("loki: ") for w in check.warnings)
    with pytest.raises(BackendUnavailable, match="every logs target failed"):
        _call(LogsBackend([dead], environ={}))


def test_logql_building() -> None:
    assert build_logql('{app="x"} | json', service_label="svc", service='o"1') == '{app="x", svc="o\\"1"} | json'
    assert build_logql('{job=~"{.+}"}', service_label="service", service="s") == '{job=~"{.+}", service="s"}'
    assert build_logql('{job="a"}', service_label="service", service=None) == '{job="a"}'


def test_open_live_backends_mounts_nginx_and_one_logs_backend(files: list[LogsTarget], tmp_path: Path) -> None:
    from rootproof.backends.live import open_live_backends
    from rootproof.backends.live.nginx import NginxBackend
    from rootproof.targets import NginxTarget, TargetsFile

    loki = LokiTarget(kind="loki", name="loki", url=f"http://127.0.0.1:{free_port()}", timeout_s=1)
    nginx = NginxTarget(kind="nginx", name="edge", error_log=tmp_path / "error.log")
    mounts = open_live_backends(TargetsFile(targets=[nginx, *files, loki]), {})
    assert [k for k, _ in mounts] == ["nginx:edge", "logs"]
    assert isinstance(mounts[0][1], NginxBackend) and isinstance(mounts[1][1], LogsBackend)
    data, out = _call(mounts[1][1], query="HikariPool")  # type: ignore[arg-type]
    assert data["total_matches"] == 2 and out.details["unavailable"] == ["loki"]
    for _, backend in mounts:
        backend.close()


def test_loki_configuration_errors() -> None:
    with pytest.raises(ValidationError, match="its port, if any, must be a number from 0 to 65535"):  # the targets file refuses it
        LokiTarget(kind="loki", name="loki", url="http://127.0.0.1:99999")
    built = LokiTarget.model_construct(kind="loki", name="loki", url="http://127.0.0.1:99999")  # past the file's checks
    with pytest.raises(BackendQueryError, match="Port out of range"):  # as nginx and Prometheus: the call fails, not the build
        _call(LogsBackend([built], environ={}))
    with pytest.raises(ConfigError, match="LOKI_TOKEN is not set"):
        LogsBackend([LokiTarget(kind="loki", name="loki", url="http://127.0.0.1:3100", password_env="LOKI_TOKEN")], environ={})


def test_loki_terms_in_labels_or_needing_folding_are_found(loki: FakeLoki) -> None:
    """Query terms are matched here as for files: a term only in a label, or equal only after casefold/NFKC."""
    t = NOW - timedelta(minutes=1)
    loki.streams = [
        {"stream": {"service": "payments", "level": "error", "job": "k8s"}, "values": [[_ns(t), "plain text line no markers"]]},
        {"stream": {"service": "orders", "job": "k8s"}, "values": [
            [_ns(t - timedelta(seconds=1)), "Ｃｏｎｎｅｃｔｉｏｎ ＲＥＦＵＳＥＤ by upstream"],  # fullwidth: NFKC → Connection REFUSED
            [_ns(t - timedelta(seconds=2)), "Straße gesperrt"]]},  # casefold: ß → ss
    ]
    backend = LogsBackend([LokiTarget(kind="loki", name="loki", url=loki.url)], environ={})
    for query, message in (("payments", "plain text line no markers"), ("error", "plain text line no markers"),
                           ('"connection refused"', "Ｃｏｎｎｅｃｔｉｏｎ ＲＥＦＵＳＥＤ by upstream"), ("STRASSE", "Straße gesperrt")):
        data, out = _call(backend, query=query)
        assert [e["message"] for e in data["entries"]] == [message], query
        assert "|" not in out.details["per_target"]["loki"]["logql"]  # no line filter pushed to Loki
    data, _ = _call(backend, query="error", service="orders")
    assert data["entries"] == []  # the service matcher still goes to Loki (and is checked here)
    assert loki.requests[-1][1]["query"] == ['{job=~".+", service="orders"}']


def test_loki_line_limit_reached_is_said(loki: FakeLoki) -> None:
    t = NOW - timedelta(minutes=20)
    values = [[_ns(t + timedelta(milliseconds=i)), f"request {i} done"] for i in range(2100)]
    values[0][1] = "the only deadlock detected"  # the oldest line, past Loki's limit of 2000
    loki.streams = [{"stream": {"service": "orders"}, "values": values}]
    backend = LogsBackend([LokiTarget(kind="loki", name="loki", url=loki.url)], environ={})
    data, out = _call(backend, query="deadlock")
    info = out.details["per_target"]["loki"]
    assert info["lines"] == 2000 and info["limit_reached"] is True and out.details["truncated"] is True
    oldest_seen = NOW - timedelta(minutes=20) + timedelta(milliseconds=100)
    assert info["searched_from"] == oldest_seen.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert data["entries"] == [] and (
        f"Loki's line limit (2000) was reached for loki: lines before {info['searched_from']} were not searched "
        "(narrow since or name a service)" in data["no_evidence"]
    )
    found, out = _call(backend, query="request 2099")
    assert found["entries"][0]["message"] == "request 2099 done" and out.details["per_target"]["loki"]["limit_reached"] is True


def test_loki_long_lines_are_cut(loki: FakeLoki) -> None:
    loki.streams = [{"stream": {"service": "orders"}, "values": [[_ns(NOW - timedelta(minutes=1)), "deadlock " + "x" * 40_000]]}]
    data, _ = _call(LogsBackend([LokiTarget(kind="loki", name="loki", url=loki.url)], environ={}), query="deadlock")
    message = data["entries"][0]["message"]
    assert message == ("deadlock " + "x" * 40_000)[:32768] + f" …[cut: {40_009 - 32768} more characters]"


def test_logql_string_escapes_control_characters(loki: FakeLoki) -> None:
    backend = LogsBackend([LokiTarget(kind="loki", name="loki", url=loki.url, selector="{}")], environ={})
    _call(backend, service='a"b\\c\nd\re\tf')
    sent = loki.requests[-1][1]["query"][0]
    assert sent == '{service="a\\"b\\\\c\\nd\\re\\tf"}'
    assert "\n" not in sent and "\r" not in sent and "\t" not in sent
    from rootproof.backends.live.loki import logql_string

    assert logql_string("x\x01y\x7fz\u2028") == '"x\\x01y\\x7fz\\u2028"'
