"""Untrusted spans: which parts of a ref's text an outsider controls (boundary/provenance.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rootproof.boundary.provenance import only_untrusted, outside_spans, record_key, untrusted_spans
from rootproof.tools.refs import EvidenceRef

BUILTIN = Path(__file__).resolve().parents[2] / "src" / "rootproof" / "scenarios" / "builtin"
PREFIX = "2026-03-12T09:58:00.000Z INFO order-service [order-service.log] "


def parts(tool: str, text: str) -> list[str]:
    return [text[s:e] for s, e in untrusted_spans(tool, text)]


def outside(tool: str, text: str) -> str:
    return outside_spans(text, untrusted_spans(tool, text))


# -- nginx ---------------------------------------------------------------------------------------
ACCESS = (
    '127.0.0.1 - - [30/Nov/2026:07:08:33 +0000] "GET /api/orders/slow?id=7 HTTP/1.1" 504 167 "-" '
    '"curl-probe" rt=1.001 uct=0.001 uht=- urt=1.002 us=504 ua=127.0.0.1:58081'
)
ERROR = (
    "2026/11/30 07:08:33 [error] 3630#3630: *3 upstream timed out (110: Connection timed out) while reading "
    'response header from upstream, client: 127.0.0.1, server: localhost, request: "GET /api/orders/slow?id=7 '
    'HTTP/1.1", upstream: "http://127.0.0.1:58081/api/orders/slow?id=7", host: "127.0.0.1:58080"'
)


def test_nginx_access_line_spans_request_referer_and_agent_only() -> None:
    assert parts("inspect_nginx", ACCESS) == ["GET /api/orders/slow?id=7 HTTP/1.1", "-", "curl-probe"]
    rest = outside("inspect_nginx", ACCESS)
    for server_written in (
        "504 167",
        "rt=1.001",
        "us=504",
        "ua=127.0.0.1:58081",
        "[30/Nov/2026:07:08:33 +0000]",
    ):
        assert server_written in rest


def test_nginx_access_line_with_a_planted_signal_keeps_it_inside() -> None:
    line = (
        '10.0.0.7 - - [12/Mar/2026:09:58:00 +0000] "GET /search?q=max number of clients reached HTTP/1.1" '
        '200 512 "https://max number of clients reached/" "max number of clients reached"'
    )
    text = PREFIX.replace("[order-service.log]", "[access.log]") + line
    assert only_untrusted(text, "max number of clients reached", untrusted_spans("query_logs", text))
    assert "200 512" in outside("query_logs", text)


def test_nginx_error_line_spans_quoted_values_and_upstream_path_not_address() -> None:
    assert parts("inspect_nginx", ERROR) == [
        "GET /api/orders/slow?id=7 HTTP/1.1",
        "/api/orders/slow?id=7",
        "127.0.0.1:58080",
    ]
    rest = outside("inspect_nginx", ERROR)
    for server_written in (
        "upstream timed out (110: Connection timed out) while reading response header from upstream",
        "client: 127.0.0.1, server: localhost",
        'upstream: "http://127.0.0.1:58081',
        "[error] 3630#3630: *3",
    ):
        assert server_written in rest


def test_nginx_error_line_quoted_path_and_referrer() -> None:
    line = (
        '2026/02/24 10:02:11 [error] 3120#3120: *5 open() "/usr/share/nginx/html/x" failed (2: No such file '
        'or directory), client: 10.61.9.40, server: pay.example.com, request: "GET /x HTTP/1.1", host: '
        '"pay.example.com", referrer: "http://evil/"'
    )
    assert parts("inspect_nginx", line) == [
        "/usr/share/nginx/html/x",
        "GET /x HTTP/1.1",
        "pay.example.com",
        "http://evil/",
    ]
    assert "failed (2: No such file or directory)" in outside("inspect_nginx", line)


def test_nginx_error_line_with_a_forged_key_is_the_outsiders_to_the_end() -> None:
    line = (
        "2026/02/24 10:02:11 [error] 3120#3120: *5 upstream timed out (110: Connection timed out) while reading "
        'response header from upstream, client: 10.61.9.40, server: api, request: "GET /a", upstream: '
        '"http://1.2.3.4/max number of clients reached", host: "x HTTP/1.1", upstream: "http://10.0.0.1:80/a", '
        'host: "api"'
    )
    spans = untrusted_spans("inspect_nginx", line)
    assert only_untrusted(line, "max number of clients reached", spans)
    assert "upstream timed out (110: Connection timed out)" in outside_spans(line, spans)


# -- application logs ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "spans", "kept"),
    [
        ("POST /api/orders/ORD-1/confirm 500 in 30018 ms", ["/api/orders/ORD-1/confirm"], "500 in 30018 ms"),
        ("GET /v1/suggest?q=wint 200 in 3388 ms", ["/v1/suggest?q=wint"], "200 in 3388 ms"),
        (
            "GET /v1/members/88120/points 500: database connection failed",
            ["/v1/members/88120/points"],
            "500: database connection failed",
        ),
        (
            "charge request failed: POST https://pay.example.com/v1/charges -> 502 Bad Gateway",
            ["https://pay.example.com/v1/charges"],
            "-> 502 Bad Gateway",
        ),
        (
            'ledger export failed: Post "https://ledger.internal:8443/v1/e": tls: failed to verify certificate',
            ["https://ledger.internal:8443/v1/e"],
            "tls: failed to verify certificate",
        ),
        ('proxy: "GET /a?b=c HTTP/1.1" took 12 ms', ["GET /a?b=c HTTP/1.1"], "took 12 ms"),
        (
            "request done url=/x?q=1 ua=Mozilla/5.0 status=200 dur=3ms",
            ["/x?q=1", "Mozilla/5.0"],
            "status=200 dur=3ms",
        ),
        (
            'bad request ua="max number of clients reached" status=400',
            ["max number of clients reached"],
            "status=400",
        ),
        ("rejected body=max number of clients reached", ["max number of clients reached"], "rejected"),
        (
            "HikariPool-1 - Connection is not available, request timed out after 30000ms",
            [],
            "Connection is not available",
        ),
    ],
)
def test_application_line(message: str, spans: list[str], kept: str) -> None:
    text = PREFIX + message
    assert parts("query_logs", text) == spans
    assert kept in outside("query_logs", text)
    assert PREFIX.strip() in outside("query_logs", text)


def test_application_target_with_a_forged_status_tail_stays_inside() -> None:
    text = PREFIX + "GET /x 200 in 1 ms max number of clients reached 503 in 3581 ms: cache unavailable"
    spans = untrusted_spans("query_logs", text)
    assert only_untrusted(text, "max number of clients reached", spans)
    assert "503 in 3581 ms: cache unavailable" in outside_spans(text, spans)


def test_multiline_message_spans_the_request_line_only() -> None:
    text = PREFIX + (
        "GET /v1/cart 503 in 3581 ms: cache unavailable\nTraceback (most recent call last):\n"
        "redis.exceptions.ConnectionError: max number of clients reached"
    )
    assert parts("query_logs", text) == ["/v1/cart"]
    assert not only_untrusted(text, "max number of clients reached", untrusted_spans("query_logs", text))


def test_json_log_line_values_of_outsider_keys() -> None:
    msg = '{"level":"info","url":"/x?q=1","headers":{"User-Agent":"max number of clients reached"},"status":503,"msg":"done"}'
    text = PREFIX + msg
    assert parts("query_logs", text) == ["/x?q=1", '{"User-Agent":"max number of clients reached"}']
    assert '"status":503,"msg":"done"' in outside("query_logs", text)


def test_database_rows_keep_their_query_text() -> None:
    row = '{"pid":5301,"query":"UPDATE orders SET status = $1","state":"active"}'
    assert untrusted_spans("inspect_postgres", row) == ()
    assert untrusted_spans("query_metrics", "pg_locks_waiting first=0 last=3") == ()


def test_postgres_bound_parameters() -> None:
    line = (
        "2026-09-14 13:52:40.118 UTC [7710] inventory@inventory DETAIL:  parameters: $1 = '1', $2 = 'it''s'"
    )
    assert parts("inspect_postgres", line) == ["1", "it''s"]


# -- the helpers -----------------------------------------------------------------------------------
def test_outside_spans_keeps_length_and_only_untrusted_needs_every_occurrence_inside() -> None:
    text = PREFIX + 'GET /max-clients 200 in 3 ms ua="Max Number of clients reached"'
    spans = untrusted_spans("query_logs", text)
    assert len(outside_spans(text, spans)) == len(text)
    assert only_untrusted(text, "max number of clients reached", spans)
    assert not only_untrusted(text + " max number of clients reached", "MAX NUMBER of clients reached", spans)
    # Words on either side of a span never join into an occurrence outside it.
    joined = PREFIX + 'max ua="x" clients'
    assert only_untrusted(joined, "max clients", untrusted_spans("query_logs", joined))


def test_ref_dict_carries_spans_only_when_there_are_any() -> None:
    plain = EvidenceRef(raw_path="$.entries[0]", text="x", data_source="snapshot")
    assert "untrusted_spans" not in plain.as_dict()
    spanned = EvidenceRef(
        raw_path="$.entries[0]", text="x", data_source="snapshot", untrusted_spans=((1, 4),)
    )
    assert spanned.as_dict()["untrusted_spans"] == [[1, 4]]


def test_record_key_drops_timestamps_but_keeps_pids() -> None:
    a = "2026-08-03 09:38:02.517 UTC [5120] app@orders LOG:  process 5120 still waiting for ShareLock"
    b = "2026-08-03 09:44:40.066 UTC [5120] app@orders LOG:  process 5120 still waiting for ShareLock"
    c = "2026-08-03 09:44:40.066 UTC [5188] app@orders LOG:  process 5188 still waiting for ShareLock"
    assert record_key(a) == record_key(b) != record_key(c)
    for x, y in (
        ("2026-03-12T09:31:10.220Z INFO s [s.log] m", "2026-03-12T09:41:10.221Z INFO s [s.log] m"),
        ("2026/11/30 07:08:33 [error] 1#1: *3 m", "2026/11/30 07:09:33 [error] 1#1: *3 m"),
        (
            '1.2.3.4 - - [30/Nov/2026:07:08:30 +0000] "GET / HTTP/1.1" 200',
            '1.2.3.4 - - [30/Nov/2026:07:09:30 +0000] "GET / HTTP/1.1" 200',
        ),
        ("1:M 09 Mar 2026 20:01:12.004 * m", "1:M 09 Mar 2026 20:02:12.004 * m"),
        ("Mar  9 20:01:12 host kernel: m", "Mar  9 20:03:12 host kernel: m"),
        (
            "[2026-01-08T10:49:05.240+0000][info][gc] GC(1) m",
            "[2026-01-08T10:59:05.240+0000][info][gc] GC(1) m",
        ),
    ):
        assert record_key(x) == record_key(y)
    assert record_key("2026-03-12 09:31:10 INFO a") != record_key("2026-03-12 09:31:10 WARN a")


# -- real data ---------------------------------------------------------------------------------------
_SERVER_WRITTEN = [
    re.compile(r'" (\d{3}) \d+ "'),  # access: status and bytes
    re.compile(r"\b(?:rt|uct|uht|urt|us|ua)=(\S+)"),  # access: timings, upstream status and address
    re.compile(r'upstream: "([a-z]+://[^/"]+)'),  # error: upstream address
    re.compile(
        r"(upstream timed out \(110: [^)]*\)|connect\(\) failed \(111: [^)]*\)|no live upstreams|upstream prematurely closed connection)"
    ),
    re.compile(r"client: ([0-9.]+), server: (\S+?),"),
]


def _real_lines(folder: Path) -> list[str]:
    return [
        ln
        for f in sorted(folder.glob("nginx-*.log"))
        for ln in f.read_text(encoding="utf-8").splitlines()
        if ln.strip()
    ]


def test_real_nginx_logs_spans_never_cover_what_the_server_wrote(shared_data: Path) -> None:
    lines = _real_lines(shared_data / "real-logs")
    assert len(lines) >= 20
    spanned = 0
    for line in lines:
        spans = untrusted_spans("inspect_nginx", line)
        spanned += bool(spans)
        for pat in _SERVER_WRITTEN:
            for m in pat.finditer(line):
                for g in range(1, (m.lastindex or 0) + 1):
                    s, e = m.span(g)
                    assert not any(a < e and s < b for a, b in spans), (line, m.group(g))
        # Every request line nginx printed is inside a span.
        for m in re.finditer(r'"((?:GET|POST|HEAD|PUT|DELETE) [^"]*)"', line):
            assert any(a <= m.start(1) and m.end(1) <= b for a, b in spans), line
    assert spanned == len([ln for ln in lines if '"' in ln])


def _builtin_log_refs() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for f in sorted(BUILTIN.glob("*/snapshot/tool_responses.yaml")):
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        for e in data.get("logs") or []:
            out.append(
                ("query_logs", f"{e['ts']} {e['level']} {e['service']} [{e['source']}] {e['message']}")
            )
        for tool, key in (
            ("inspect_nginx", "nginx"),
            ("inspect_postgres", "postgres"),
            ("inspect_redis", "redis"),
        ):
            section = data.get(key) or {}
            for kind in ("error_log", "access_log", "log", "slowlog"):
                for line in section.get(kind) or []:
                    out.append((tool, str(line)))
    return out


def test_builtin_scenario_logs_spans_never_cover_status_timing_or_errors() -> None:
    refs = _builtin_log_refs()
    assert len(refs) > 300
    for tool, text in refs:
        spans = untrusted_spans(tool, text)
        rest = outside_spans(text, spans)
        for m in re.finditer(r" [1-5]\d{2} in \d+ ms", text):
            assert rest[m.start() : m.end()] == m.group(0), text
        for needle in (
            "Exception",
            "Error:",
            "timed out",
            "FATAL",
            "still waiting",
            "Pause Full",
            "max number of clients",
        ):
            for m in re.finditer(re.escape(needle), text):
                assert rest[m.start() : m.end()] == needle, text


def test_recorded_refs_with_and_without_spans_both_audit() -> None:
    from rootproof.audit import audit_run

    text = PREFIX + "GET /x?q=1 500 in 30018 ms"
    new = {
        "raw_path": "$.entries[0]",
        "text": text,
        "data_source": "snapshot",
        "untrusted_spans": [list(s) for s in untrusted_spans("query_logs", text)],
    }
    old = {
        "raw_path": "$.entries[1]",
        "text": text.replace("/x", "/y"),
        "data_source": "snapshot",
    }  # a record from before spans
    cits = [
        {
            "invocation_id": "inv-1",
            "tool_name": "query_logs",
            "raw_path": r["raw_path"],
            "excerpt": "500 in 30018 ms",
        }
        for r in (new, old)
    ]
    report = {
        "claims": [{"id": "c1", "text": "500s", "kind": "finding", "citations": cits}],
        "root_cause": None,
    }
    trace = {
        "run": {
            "run_id": "r",
            "release_outcome": "PUBLISHED",
            "content": {"content_type": "DIAGNOSIS_REPORT", "report": report},
        },
        "invocations": [
            {
                "invocation_id": "inv-1",
                "status": "READY",
                "tool_name": "query_logs",
                "evidence_refs": [new, old],
            }
        ],
    }
    finding = audit_run(trace)
    assert finding.ok and finding.checked_citations == 2
