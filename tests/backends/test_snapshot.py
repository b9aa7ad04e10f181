"""The snapshot backend: query semantics, windows, inspectors, no_evidence and data sources."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rootproof.backends import SnapshotBackend, parse_query, ref_paths_with_sources
from rootproof.errors import BackendError
from rootproof.scenarios import LogEntry, Scenario, ToolResponses, load_scenario
from rootproof.tools.base import TOOLS, BackendResult, LookupKnowledgeArgs, QueryLogsArgs, parse_since
from rootproof.tools.refs import NO_EVIDENCE_PATH, ref_text

FIXTURE = Path(__file__).parents[1] / "data" / "scenarios" / "mini-row-lock"
SCENARIO = load_scenario(FIXTURE)
NOW = SCENARIO.now
BACKEND = SnapshotBackend(SCENARIO)


def call(tool: str, backend: SnapshotBackend = BACKEND, now: datetime = NOW, **args: Any) -> BackendResult:
    """Call through the argument model, and check every returned path resolves and renders."""
    result = backend.call(tool, TOOLS[tool].args_model.model_validate(args), now=now, run_id="run-1")
    paths = ref_paths_with_sources(result)
    texts = {p: ref_text(tool, result.json(), p) for p in paths}
    assert all(isinstance(t, str) and t for t in texts.values())
    assert set(result.ref_sources) <= set(paths)
    assert all(src != result.data_source for src in result.ref_sources.values())
    if "no_evidence" in result.json():
        assert list(paths) == [NO_EVIDENCE_PATH]  # nothing else citable
    else:
        assert NO_EVIDENCE_PATH not in paths and paths
    return result


def texts(tool: str, result: BackendResult) -> list[str]:
    return [ref_text(tool, result.json(), p) for p in ref_paths_with_sources(result)]


# --- query parsing ------------------------------------------------------------------------------


def test_parse_query() -> None:
    assert parse_query('HikariPool "Not  Available" timeout hikaripool').terms == (
        "hikaripool",
        "not available",
        "timeout",
    )
    assert parse_query('"unterminated phrase').terms == ("unterminated phrase",)
    assert parse_query("ＥＲＲＯＲ").terms == ("error",)  # NFKC: full-width letters
    assert parse_query("  ").empty
    assert parse_query('""').empty


# --- query_logs ---------------------------------------------------------------------------------


def test_logs_window_ends_at_now_and_orders_newest_first() -> None:
    r = call("query_logs")
    assert r.json()["window"] == {"from": "2026-07-22T17:11:00.000Z", "to": "2026-07-22T17:41:00.000Z"}
    assert r.json()["total_matches"] == 4
    assert [e["ts"] for e in r.json()["entries"]] == [
        "2026-07-22T17:40:30.000Z",
        "2026-07-22T17:40:10.000Z",
        "2026-07-22T17:39:30.500Z",
        "2026-07-22T17:39:02.113Z",
    ]
    assert r.json()["entries"][3] == {
        "ts": "2026-07-22T17:39:02.113Z",
        "level": "ERROR",
        "service": "order-service",
        "scope": "APPLICATION",
        "source": "order-service.log",
        "message": "HikariPool-1 - Connection is not available, request timed out after 30000ms.",
    }
    assert texts("query_logs", r)[3] == (
        "2026-07-22T17:39:02.113Z ERROR order-service [order-service.log] "
        "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    )
    # a longer window reaches the older entries; the +02:00 entry is 15:40:50Z
    assert call("query_logs", since="2h").json()["total_matches"] == 5
    assert call("query_logs", since="3h").json()["total_matches"] == 6
    # the run's clock decides the window, not the wall clock
    early = call("query_logs", now=NOW - timedelta(minutes=1, seconds=30))
    assert [e["ts"] for e in early.json()["entries"]] == ["2026-07-22T17:39:02.113Z"]


def test_terms_and_phrases_order_by_distinct_matches_then_newest() -> None:
    r = call("query_logs", query='hikaripool "NOT AVAILABLE" 9120')
    assert [e["ts"][11:19] for e in r.json()["entries"]] == ["17:39:02", "17:40:30", "17:39:30"]
    assert r.json()["total_matches"] == 3
    # a phrase must occur as a whole
    none = call("query_logs", query='"pool not"')
    assert none.json()["entries"] == [] and none.json()["total_matches"] == 0
    # NFKC + case-insensitive
    assert call("query_logs", query="ｈｉｋａｒｉｐｏｏｌ").json()["total_matches"] == 2


def test_service_scope_and_level_filters() -> None:
    assert [e["service"] for e in call("query_logs", service="postgres").json()["entries"]] == ["postgres"]
    assert [e["scope"] for e in call("query_logs", scope="DATABASE").json()["entries"]] == ["DATABASE"]
    assert [e["level"] for e in call("query_logs", level="WARN").json()["entries"]] == ["WARN", "ERROR"]
    assert [e["level"] for e in call("query_logs", level="ERROR").json()["entries"]] == ["ERROR"]
    assert call("query_logs", level="DEBUG").json()["total_matches"] == 4
    assert (
        call("query_logs", service="order-service", level="ERROR", query="hikaripool").json()["total_matches"]
        == 1
    )


def test_limit_offset_page_the_ordered_matches() -> None:
    r = call("query_logs", limit=2, offset=1)
    assert r.json()["total_matches"] == 4
    assert [e["ts"][11:19] for e in r.json()["entries"]] == ["17:40:10", "17:39:30"]
    past = call("query_logs", offset=10)
    assert past.json()["total_matches"] == 4 and past.json()["entries"] == []
    assert "4 matches, none at offset 10" in past.json()["no_evidence"]


def test_logs_no_evidence_says_what_where_and_when() -> None:
    r = call("query_logs", query="deadlock", service="order-service", level="ERROR")
    assert r.json()["no_evidence"] == (
        "query_logs found no match for query 'deadlock' (service=order-service, scope=ALL, level=ERROR, since=30m) "
        "in window 2026-07-22T17:11:00.000Z..2026-07-22T17:41:00.000Z"
    )
    assert r.data_source == "snapshot" and r.ref_sources == {}


def test_logs_data_source_per_ref() -> None:
    r = call("query_logs")
    assert r.data_source == "snapshot"
    assert r.ref_sources == {"$.entries[0]": "mock"}  # the pool-stats entry is marked mock
    assert "Pool stats" in r.json()["entries"][0]["message"]
    paged = call("query_logs", offset=1)
    assert paged.ref_sources == {}


# --- query_metrics ------------------------------------------------------------------------------


def test_metric_glob_labels_and_summary() -> None:
    r = call("query_metrics", metric="pg_locks_*")
    # the billing series has no point in the window and is omitted
    assert [(s["metric"], s["labels"]) for s in r.json()["series"]] == [
        ("pg_locks_waiting", {"datname": "orders"}),
        ("pg_locks_granted", {"datname": "orders"}),
    ]
    waiting = r.json()["series"][0]
    assert waiting["points"] == [
        ["2026-07-22T17:20:00.000Z", 0],
        ["2026-07-22T17:30:00.000Z", 2],
        ["2026-07-22T17:35:00.000Z", 14],
        ["2026-07-22T17:40:00.000Z", 12],
    ]
    assert waiting["summary"] == {"first": 0, "last": 12, "min": 0, "max": 14, "delta": 12, "mean": 7.0}
    assert texts("query_metrics", r)[0] == (
        'pg_locks_waiting{datname="orders"} first=0 last=12 min=0 max=14 delta=12 mean=7.0 unit=count '
        "window=2026-07-22T17:11:00.000Z..2026-07-22T17:41:00.000Z"
    )
    billing = call("query_metrics", metric="pg_locks_waiting", labels={"datname": "billing"}, since="1h")
    assert [s["summary"] for s in billing.json()["series"]] == [
        {"first": 3, "last": 3, "min": 3, "max": 3, "delta": 0, "mean": 3.0}
    ]
    # a narrower window summarises only its points
    short = call("query_metrics", metric="pg_locks_waiting", labels={"datname": "orders"}, since="8m")
    assert short.json()["series"][0]["summary"] == {
        "first": 14,
        "last": 12,
        "min": 12,
        "max": 14,
        "delta": -2,
        "mean": 13.0,
    }


def test_metric_float_summary_and_mock_series() -> None:
    r = call("query_metrics", metric="http_request_duration_seconds_p95", labels={"route": "/orders"})
    assert r.json()["series"][0]["summary"] == {
        "first": 0.1,
        "last": 9.1,
        "min": 0.1,
        "max": 9.1,
        "delta": 9.0,
        "mean": 3.2,
    }
    assert r.data_source == "snapshot" and r.ref_sources == {"$.series[0]": "mock"}


def test_metric_no_evidence() -> None:
    r = call("query_metrics", metric="redis_*", labels={"instance": "a"})
    assert r.json()["series"] == []
    assert r.json()["no_evidence"] == (
        "query_metrics found no match for metric 'redis_*' (labels=instance=a, since=30m) "
        "in window 2026-07-22T17:11:00.000Z..2026-07-22T17:41:00.000Z"
    )
    assert call("query_metrics", metric="pg_locks_waiting", labels={"datname": "nope"}).json()["series"] == []


# --- inspect_postgres ---------------------------------------------------------------------------


def test_postgres_rows() -> None:
    r = call("inspect_postgres", kind="activity")
    rows = r.json()["rows"]
    assert r.json()["kind"] == "activity" and r.json()["total_matches"] == 2
    assert rows[0]["xact_start"] == "2026-07-22T17:34:10.000Z" and rows[0]["state"] == "idle in transaction"
    assert "data_source" not in rows[1]
    assert r.ref_sources == {"$.rows[1]": "mock"}
    assert texts("inspect_postgres", r)[0].startswith('{"application_name":"order-service","pid":4242,')
    locks = call("inspect_postgres", kind="locks")
    assert texts("inspect_postgres", locks) == [
        '{"blocking_pids":[4242],"granted":false,"locktype":"transactionid","mode":"ShareLock","pid":5120}'
    ]
    filtered = call("inspect_postgres", kind="activity", query="4242")
    assert [row["pid"] for row in filtered.json()["rows"]] == [4242]
    assert call("inspect_postgres", kind="activity", limit=1, offset=1).json()["rows"][0]["pid"] == 5120
    for kind in ("database_stats", "top_queries"):
        assert call("inspect_postgres", kind=kind).json()["rows"]


def test_postgres_empty_and_missing_rows_are_no_evidence(tmp_path: Path) -> None:
    r = call("inspect_postgres", kind="replication")
    assert r.json()["rows"] == []
    assert r.json()["no_evidence"] == (
        "inspect_postgres found no match for query '' (kind=replication) as of 2026-07-22T17:41:00.000Z"
    )


def test_postgres_settings() -> None:
    r = call("inspect_postgres", kind="settings")
    assert r.json()["settings"]["max_connections"] == "100"
    assert ref_text("inspect_postgres", r.json(), "$.settings.log_lock_waits") == "log_lock_waits = on"
    assert ref_text("inspect_postgres", r.json(), "$.settings.work_mem") == "work_mem = 4096"
    only = call("inspect_postgres", kind="settings", query="timeout")
    assert list(only.json()["settings"]) == ["deadlock_timeout"]


def test_postgres_log_lines_windowed_by_their_own_timestamps() -> None:
    r = call("inspect_postgres", kind="log")
    lines = r.json()["lines"]
    assert r.json()["total_matches"] == 5  # the 17:05 checkpoint is outside the window
    assert lines[0].startswith("2026-07-22 19:38:00.000 +02 [5200]")  # 17:38Z, newest
    assert lines[1] == "\tcontinuation of the previous statement"  # keeps its parent's time
    assert [line.split("app@orders ")[1][:6] for line in lines[2:]] == ["LOG:  ", "DETAIL", "STATEM"]
    assert texts("inspect_postgres", r) == lines
    detail = call("inspect_postgres", kind="log", query='"holding the lock" 4242')
    assert detail.json()["lines"] == [
        "2026-07-22 17:36:01.512 UTC [5120] app@orders DETAIL:  Process holding the lock: 4242. Wait queue: 5120."
    ]
    older = call("inspect_postgres", kind="log", since="1h", query="checkpoint")
    assert len(older.json()["lines"]) == 1
    none = call("inspect_postgres", kind="log", query="deadlock detected")
    assert none.json()["no_evidence"].startswith(
        "inspect_postgres found no match for query 'deadlock detected' (kind=log, since=30m) in window "
    )


# --- inspect_redis ------------------------------------------------------------------------------


def test_redis_info_section_mock() -> None:
    r = call("inspect_redis", kind="info")
    assert r.data_source == "mock" and r.ref_sources == {}
    assert (
        ref_text("inspect_redis", r.json(), "$.info.clients.connected_clients") == "connected_clients:10000"
    )
    assert ref_text("inspect_redis", r.json(), "$.info.server.redis_version") == "redis_version:7.0.15"
    only = call("inspect_redis", kind="info", query="rejected")
    assert only.json()["info"] == {"stats": {"rejected_connections": 812}}


def test_redis_clients_keep_key_order_and_entry_marking() -> None:
    r = call("inspect_redis", kind="clients")
    assert (
        texts("inspect_redis", r)[0]
        == "id=7 addr=10.0.0.5:51422 name= age=3600 idle=3590 flags=N db=0 cmd=NULL"
    )
    assert r.data_source == "mock" and r.ref_sources == {"$.rows[1]": "snapshot"}


def test_redis_slowlog_config_and_log() -> None:
    slow = call("inspect_redis", kind="slowlog")
    # the 16:30 entry is outside the window; a line without a time is always shown
    assert slow.json()["lines"] == [
        "id=14 timestamp=1784741700 duration=15021 command=KEYS * client=10.0.0.5:51422",
        "free-form slowlog line without a time",
    ]
    assert len(call("inspect_redis", kind="slowlog", since="2h").json()["lines"]) == 3
    config = call("inspect_redis", kind="config")
    assert ref_text("inspect_redis", config.json(), "$.settings.appendonly") == "appendonly = no"
    log = call("inspect_redis", kind="log")
    assert log.json()["lines"] == [
        "1:M 22 Jul 2026 17:36:12.004 # Error accepting a client connection: max number of clients reached"
    ]
    assert call("inspect_redis", kind="log", since="2h").json()["total_matches"] == 2


# --- inspect_nginx ------------------------------------------------------------------------------


def test_nginx_logs() -> None:
    err = call("inspect_nginx", kind="error_log", query="upstream timed out")
    assert len(err.json()["lines"]) == 1
    access = call("inspect_nginx", kind="access_log")
    assert [line.split('"')[1] for line in access.json()["lines"]] == [
        "GET /health HTTP/1.1",
        "POST /pay HTTP/1.1",
    ]
    assert call("inspect_nginx", kind="access_log", query="504").json()["total_matches"] == 1
    assert call("inspect_nginx", kind="error_log", since="1m").json()["lines"] == []


def test_nginx_config_and_status() -> None:
    r = call("inspect_nginx", kind="config")
    assert r.json()["config"][0] == "http {"
    assert ref_text("inspect_nginx", r.json(), "$.config[4]") == (
        "5:         location /pay { proxy_pass http://pay; proxy_read_timeout 60s; }"
    )
    # the config comes whole (line numbers are indexes) when anything matches, else no_evidence
    assert (
        call("inspect_nginx", kind="config", query="proxy_read_timeout").json()["config"]
        == r.json()["config"]
    )
    assert "no_evidence" in call("inspect_nginx", kind="config", query="ssl_certificate").json()
    status = call("inspect_nginx", kind="status")
    assert ref_text("inspect_nginx", status.json(), "$.status.active") == "active: 412"
    assert call("inspect_nginx", kind="status", query="writing").json()["status"] == {"writing": 398}


# --- missing sections, errors -------------------------------------------------------------------

KINDS = [
    ("query_logs", {}),
    ("query_metrics", {"metric": "*"}),
    *[
        ("inspect_postgres", {"kind": k})
        for k in ("activity", "locks", "settings", "database_stats", "replication", "top_queries", "log")
    ],
    *[("inspect_redis", {"kind": k}) for k in ("info", "clients", "slowlog", "config", "log")],
    *[("inspect_nginx", {"kind": k}) for k in ("error_log", "access_log", "config", "status")],
]


@pytest.mark.parametrize(("tool", "args"), KINDS, ids=[f"{t}-{a.get('kind', '')}" for t, a in KINDS])
def test_every_kind_with_data_finds_evidence(tool: str, args: dict[str, Any]) -> None:
    r = call(tool, since="3h", **args)
    # the fixture's replication view is present but empty
    assert ("no_evidence" in r.json()) == (args.get("kind") == "replication")


@pytest.mark.parametrize(("tool", "args"), KINDS, ids=[f"{t}-{a.get('kind', '')}" for t, a in KINDS])
def test_missing_sections_are_no_evidence(tool: str, args: dict[str, Any]) -> None:
    empty = dataclasses.replace(SCENARIO, responses=ToolResponses(data_source="mock"))
    r = call(tool, backend=SnapshotBackend(empty), **args)
    assert r.json()["no_evidence"].startswith(f"{tool} found no match for ")
    assert "the snapshot holds no" in r.json()["no_evidence"]
    assert r.data_source == "mock"


def test_backend_errors() -> None:
    with pytest.raises(BackendError, match="does not serve 'lookup_knowledge'"):
        BACKEND.call("lookup_knowledge", LookupKnowledgeArgs(query="x"), now=NOW, run_id="r")
    with pytest.raises(BackendError, match="timezone-aware"):
        BACKEND.call("query_logs", QueryLogsArgs(), now=NOW.replace(tzinfo=None), run_id="r")
    with pytest.raises(BackendError, match="arguments are not QueryMetricsArgs"):
        BACKEND.call("query_metrics", QueryLogsArgs(), now=NOW, run_id="r")


# --- a property: any query's results lie in the window and come in the specified order -------------

WORDS = ["timeout", "lock", "pool", "connection refused", "OOM", "disk", "ошибка", "超时"]
BASE = datetime(2026, 7, 22, 17, 41, tzinfo=UTC)


@st.composite
def log_entries(draw: st.DrawFn) -> LogEntry:
    words = draw(st.lists(st.sampled_from(WORDS), max_size=4))
    return LogEntry(
        ts=BASE + timedelta(seconds=draw(st.integers(min_value=-3 * 3600, max_value=600))),
        service=draw(st.sampled_from(["api", "db"])),
        level=draw(st.sampled_from(["DEBUG", "INFO", "WARN", "ERROR", "FATAL"])),
        scope=draw(st.sampled_from(["APPLICATION", "DATABASE"])),
        source="app.log",
        message=" ".join(words) or "nothing",
    )


@settings(max_examples=150, deadline=None)
@given(
    entries=st.lists(log_entries(), max_size=30),
    terms=st.lists(st.sampled_from(WORDS), max_size=3),
    since=st.sampled_from(["5m", "30m", "1h", "2h"]),
    limit=st.integers(min_value=1, max_value=10),
    offset=st.integers(min_value=0, max_value=12),
)
def test_property_results_in_window_and_ordered(
    entries: list[LogEntry], terms: list[str], since: str, limit: int, offset: int
) -> None:
    scenario: Scenario = dataclasses.replace(SCENARIO, responses=ToolResponses(logs=tuple(entries)))
    query = " ".join(f'"{t}"' if " " in t else t for t in terms)
    r = call(
        "query_logs",
        backend=SnapshotBackend(scenario),
        now=BASE,
        query=query,
        since=since,
        limit=limit,
        offset=offset,
    )
    start = BASE - parse_since(since)
    parsed = parse_query(query)

    def score(e: dict[str, Any]) -> int:
        return parsed.score(f"{e['ts']} {e['level']} {e['service']} [{e['source']}] {e['message']}")

    def full(e: LogEntry) -> str:
        return f"{e.ts} {e.level} {e.service} [{e.source}] {e.message}"

    expected = [e for e in entries if start <= e.ts <= BASE and (parsed.empty or parsed.score(full(e)) > 0)]
    assert r.json()["total_matches"] == len(expected)
    got = r.json()["entries"]
    assert len(got) == max(0, min(limit, len(expected) - offset))
    for e in got:
        ts = datetime.fromisoformat(e["ts"])
        assert start <= ts <= BASE
    keys = [(score(e), e["ts"]) for e in got]
    assert keys == sorted(keys, reverse=True)
