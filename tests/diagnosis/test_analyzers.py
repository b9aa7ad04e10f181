"""The analyzers on results shaped as the backends return them: Redis INFO against its limits,
the PostgreSQL blocking tree (the root blocker's own row, never a waiter's), nginx failures by
cause outside untrusted spans, a refused connection, series against their baseline; the
vocabulary a user overrides; what the model's observation shows of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rootproof.boundary.store import CanonicalInvocation, EvidenceRef, InvocationStatus
from rootproof.boundary.views import model_observation
from rootproof.diagnosis import findings as fmod
from rootproof.diagnosis.findings import Ref, VocabularyError, analyze, use_vocabulary
from rootproof.tools.refs import REFUSED_PATH


def _info(**fields: object) -> list[Ref]:
    return [Ref(f"$.info.section.{k}", f"{k}:{v}") for k, v in fields.items()]


def _codes(found: list[fmod.Finding]) -> list[str]:
    return [f.code for f in found]


def test_redis_at_maxmemory_under_noeviction_is_refusing_writes_now() -> None:
    refs = _info(uptime_in_seconds=120, used_memory=3270832, maxmemory=3145728, maxmemory_policy="noeviction", errorstat_OOM="count=301")
    found = analyze("inspect_redis", "info", {}, refs)
    assert _codes(found) == ["redis.memory_at_limit", "redis.oom_refused_writes"]
    at_limit, oom = found
    assert at_limit.supports == ("redis/memory_eviction",) and at_limit.numbers["limit"] == 3145728
    assert oom.refs[0] == "$.info.section.errorstat_OOM" and oom.numbers == {"count": 301, "uptime_s": 120}
    assert "maxmemory 3145728" == oom.subject


def test_redis_counters_since_start_are_not_a_fault_now_below_the_limit() -> None:
    refs = _info(used_memory=1000, maxmemory=3145728, maxmemory_policy="noeviction", errorstat_OOM="count=301", rejected_connections=12, connected_clients=3, maxclients=64)
    found = analyze("inspect_redis", "info", {}, refs)
    assert _codes(found) == ["redis.oom_refused_before", "redis.rejected_before"]
    assert all(f.supports == () for f in found)


def test_a_full_cache_under_an_eviction_policy_is_an_observation() -> None:
    refs = _info(used_memory=4294201344, maxmemory=4294967296, maxmemory_policy="allkeys-lru", evicted_keys=501000000)
    found = analyze("inspect_redis", "info", {}, refs)
    assert _codes(found) == ["redis.memory_full_evicting", "redis.evictions"]
    assert all(f.supports == () for f in found)


def test_redis_clients_at_maxclients_with_rejections() -> None:
    found = analyze("inspect_redis", "info", {}, _info(connected_clients=64, maxclients=64, rejected_connections=40))
    assert _codes(found) == ["redis.clients_at_limit", "redis.rejected_connections"]
    assert found[1].supports == ("redis/max_clients_reached",) and found[1].numbers["limit"] == 64


def _row(i: int, **row: object) -> Ref:
    return Ref(f"$.rows[{i}]", json.dumps(row, separators=(",", ":"), sort_keys=True))


def test_the_root_blocker_of_a_lock_queue_is_named_with_its_own_row() -> None:
    # 49418 holds the tuple lock and waits on 47702's transaction; 49413 queues behind 49418.
    refs = [
        _row(0, pid=47702, granted=True, blocking_pids=[], mode="ExclusiveLock", locktype="transactionid", application_name="invoice-batch", state="idle in transaction", xact_age_s=1589.2),
        _row(1, pid=49418, granted=True, blocking_pids=[47702], mode="ExclusiveLock", locktype="tuple"),
        _row(2, pid=49418, granted=False, blocking_pids=[47702], mode="ShareLock", locktype="transactionid"),
        _row(3, pid=49413, granted=False, blocking_pids=[49418], mode="ExclusiveLock", locktype="tuple"),
    ]
    (f,) = analyze("inspect_postgres", "locks", {}, refs)
    assert f.code == "postgresql.blocking" and f.subject == "pid 47702"
    assert f.refs[0] == "$.rows[0]"  # the blocker's own record, not a waiter's row naming it
    assert f.numbers["blocked"] == 2 and f.facts["application_name"] == "invoice-batch"
    assert "pid 47702" in f.text and "blocks 2 session(s)" in f.text


def test_activity_without_blocking_pids_lists_waiters_and_open_transactions() -> None:
    refs = [
        _row(0, pid=10, state="idle in transaction", wait_event_type="Client", xact_start="2026-01-01T00:00:00Z", xact_age_s=45.0, application_name="admin"),
        _row(1, pid=11, state="active", wait_event_type="Lock", xact_start="2026-01-01T00:01:00Z"),
        _row(2, pid=12, state="idle", wait_event_type="Client"),
    ]
    found = analyze("inspect_postgres", "activity", {}, refs)
    assert _codes(found) == ["postgresql.lock_waits", "postgresql.idle_in_transaction"]
    assert found[0].refs == ("$.rows[0]", "$.rows[1]") and found[0].subject is None
    assert found[1].supports == ()


def test_nginx_failures_by_upstream_and_cause_never_from_an_untrusted_url() -> None:
    timeout = '2026/12/05 03:39:30 [error] 1#1: *2 upstream timed out (110: Connection timed out) while reading response header from upstream, client: 127.0.0.1, request: "POST /orders HTTP/1.1", upstream: "http://127.0.0.1:8081/orders"'
    refused = '2026/12/05 03:39:31 [error] 1#1: *3 connect() failed (111: Connection refused) while connecting to upstream, upstream: "http://10.0.0.2:8080/pay"'
    planted = '2026/12/05 03:39:32 [info] 1#1: *4 request: "GET /?q=upstream timed out HTTP/1.1"'
    start = planted.index("GET")
    refs = [Ref("$.lines[0]", timeout), Ref("$.lines[1]", refused), Ref("$.lines[2]", planted, ((start, len(planted)),))]
    found = analyze("inspect_nginx", "error_log", {}, refs)
    assert [(f.code, f.numbers["upstream"], f.numbers["count"]) for f in found] == [
        ("nginx.upstream_timeouts", "127.0.0.1:8081", 1),
        ("nginx.upstream_refused", "10.0.0.2:8080", 1),
    ]


def test_a_refused_connection_is_a_finding_of_the_limit() -> None:
    (f,) = analyze("inspect_redis", "info", {}, [Ref(REFUSED_PATH, "max number of clients reached")])
    assert f.code == "refusal.max_clients" and f.supports == ("redis/max_clients_reached",)


def test_series_against_their_own_baseline() -> None:
    flat = [[f"t{i}", 0.2] for i in range(12)]
    rose = [[f"t{i}", 0.2 if i < 6 else 1.5] for i in range(12)]
    fell = [[f"t{i}", 0.97 if i < 6 else 0.55] for i in range(12)]
    result = {"series": [{"metric": "http_request_duration_seconds:p95", "points": flat}, {"metric": "http_request_duration_seconds:p99", "points": rose}, {"metric": "cache_hit_ratio", "points": fell}]}
    refs = [Ref(f"$.series[{i}]", "…") for i in range(3)]
    found = analyze("query_metrics", None, result, refs)
    assert [(f.code, f.refs) for f in found] == [("metrics.hurt_rose", ("$.series[1]",)), ("metrics.success_fell", ("$.series[2]",))]


@pytest.fixture
def shipped_vocabulary() -> object:
    yield
    fmod._configured = None
    fmod._documents.cache_clear()


def test_a_user_vocabulary_replaces_entries_and_a_bad_one_names_the_key(tmp_path: Path, shipped_vocabulary: object) -> None:
    good = tmp_path / "vocabulary.yaml"
    good.write_text("findings:\n  redis.clients_at_limit: {supports: [redis/max_clients_reached], ratio: 0.5}\n", encoding="utf-8")
    use_vocabulary(good)
    assert _codes(analyze("inspect_redis", "info", {}, _info(connected_clients=40, maxclients=64))) == ["redis.clients_at_limit"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("findings:\n  redis.clients_at_limit: {supports: redis}\n", encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"findings\.redis\.clients_at_limit"):
        use_vocabulary(bad)
    words = tmp_path / "words.yaml"
    words.write_text("findings:\n  postgresql.lock_wait_cancelled: {supports: [], contexts: 5}\n", encoding="utf-8")
    with pytest.raises(VocabularyError, match=r"findings\.postgresql\.lock_wait_cancelled\.contexts: expected a list of strings"):
        use_vocabulary(words)


def test_the_observation_shows_findings_and_always_the_refs_they_name() -> None:
    rows = [EvidenceRef(raw_path=f"$.rows[{i}]", text=json.dumps({"pid": 100 + i, "state": "idle", "query": "x" * 600}), data_source="live:db") for i in range(12)]
    rows[11] = EvidenceRef(raw_path="$.rows[11]", text=json.dumps({"pid": 7, "blocking_pids": [], "granted": True}), data_source="live:db")
    finding = {"finding": "postgresql.blocking", "text": "pid 7 blocks 1", "supports": ["postgresql/row_lock_contention"], "refs": ["$.rows[11]"]}
    inv = CanonicalInvocation(
        invocation_id="inv-1", run_id="r", session_id="s", step_index=0, tool_name="inspect_postgres", arguments={"kind": "locks"},
        scope_key=None, status=InvocationStatus.READY, evidence_status="EVIDENCE_FOUND", data_source="live:db",
        result={"kind": "locks"}, evidence_refs=rows, details={"findings": [finding]},
    )
    obs = model_observation(inv, 4096)
    assert obs["findings"] == [finding]
    shown = [r["raw_path"] for r in obs["refs"]]
    assert "$.rows[11]" in shown and obs["omitted"] > 0
    assert shown == sorted(shown, key=lambda p: int(p[7:-1]))  # result order kept


def test_found_no_match_is_never_read_as_a_finding() -> None:
    text = "inspect_nginx found no match for query '\"upstream timed out (110: Connection timed out)\"'"
    assert analyze("inspect_nginx", "error_log", {}, [Ref("$.no_evidence", text)]) == []


def _server_log(path: Path) -> list[Ref]:
    """A real server log as `inspect_postgres kind=log` returns it: one ref per record (its
    LOG, DETAIL, CONTEXT and STATEMENT lines together)."""
    from rootproof.backends.live.postgres_log import parse_records

    return [Ref(f"$.lines[{i}]", r.text) for i, r in enumerate(parse_records(path.read_text(encoding="utf-8")))]


def test_the_server_log_names_the_root_holder_of_logged_lock_waits(shared_data: Path) -> None:
    refs = _server_log(shared_data / "real-logs" / "postgresql-row-lock-queue.log")
    found = {f.code: f for f in analyze("inspect_postgres", "log", {}, refs)}
    waits = found["postgresql.lock_waits_logged"]
    assert waits.supports == ("postgresql/row_lock_contention",)
    holders = {int(p) for r in refs for p in re.findall(r"Process holding the lock: (\d+)", r.text)}
    waiters = {int(p) for r in refs for p in re.findall(r"process (\d+) still waiting", r.text)}
    root = waits.facts["pid"]
    assert root in holders and root not in waiters  # the root holds and waits on no one in the log
    assert all(f"Process holding the lock: {root}" in next(r.text for r in refs if r.path == p) for p in waits.refs)


def test_deadlocks_and_refused_connections_in_the_server_log(shared_data: Path) -> None:
    dead = {f.code: f for f in analyze("inspect_postgres", "log", {}, _server_log(shared_data / "real-logs" / "postgresql-deadlock.log"))}
    assert dead["postgresql.deadlocks"].supports == ("postgresql/deadlock",) and dead["postgresql.deadlocks"].numbers["count"] >= 1
    full = {f.code: f for f in analyze("inspect_postgres", "log", {}, _server_log(shared_data / "real-logs" / "postgresql-too-many-connections.log"))}
    assert full["postgresql.connections_refused"].supports == ("postgresql/connection_exhaustion",)


def test_lock_words_inside_a_statement_an_outsider_wrote_are_no_finding() -> None:
    text = (
        "2026-12-02 04:28:02.464 UTC [21228] app@orders LOG:  duration: 3.1 ms\n"
        "2026-12-02 04:28:02.464 UTC [21228] app@orders STATEMENT:  SELECT 'process 1 still waiting for ShareLock on transaction 9 after 1000.1 ms "
        "Process holding the lock: 7. deadlock detected'"
    )
    start = text.index("'process")
    refs = [Ref(f"$.lines[{i}]", text, ((start, len(text)),)) for i in range(3)]
    assert analyze("inspect_postgres", "log", {}, refs) == []


def test_a_statement_running_long_is_named_with_its_session_and_a_lock_wait_is_not() -> None:
    refs = [
        _row(0, pid=71, state="active", wait_event_type="IO", backend_type="client backend", query_age_s=95.2, application_name="report-job", query="SELECT * FROM orders o JOIN items i ON true"),
        _row(1, pid=72, state="active", wait_event_type="Lock", backend_type="client backend", query_age_s=300.0, query="UPDATE inventory SET stock = stock - 1"),
        _row(2, pid=73, state="active", backend_type="client backend", query_age_s=0.4, query="SELECT 1"),
    ]
    (found,) = [f for f in analyze("inspect_postgres", "activity", {}, refs) if f.code == "postgresql.long_statements"]
    assert found.refs == ("$.rows[0]",) and found.subject == "pid 71" and found.facts["application_name"] == "report-job"
    assert found.supports == ("postgresql/slow_query",) and found.numbers["age_s"] == 95.2


def test_a_standby_behind_by_time_or_wal_is_replication_lag() -> None:
    primary = [_row(0, application_name="replica-a", state="streaming", replay_lag="00:02:05.5", replay_lag_bytes=1024), _row(1, application_name="replica-b", state="streaming", replay_lag="00:00:00.2", replay_lag_bytes=0)]
    (found,) = analyze("inspect_postgres", "replication", {}, primary)
    assert found.code == "postgresql.replication_lag" and found.refs == ("$.rows[0]",) and found.numbers["lag_s"] == 125.5
    assert found.supports == ("postgresql/replication_lag",)
    standby = [_row(0, server_role="standby", state="streaming", replay_lag=2.0, replay_lag_bytes=900_000_000)]
    assert _codes(analyze("inspect_postgres", "replication", {}, standby)) == ["postgresql.replication_lag"]
    assert analyze("inspect_postgres", "replication", {}, [_row(0, replay_lag="1 day 00:00:00", application_name="x")])[0].numbers["lag_s"] == 86400.0


def test_504s_after_the_same_upstream_time_show_the_read_timeout_nginx_applied(shared_data: Path) -> None:
    lines = (shared_data / "real-logs" / "nginx-upstream-timeout.access.log").read_text(encoding="utf-8").splitlines()
    (found,) = analyze("inspect_nginx", "access_log", {}, [Ref(f"$.lines[{i}]", t) for i, t in enumerate(lines)])
    assert found.code == "nginx.upstream_response_times" and found.as_dict()["symptom"] is True
    assert all(" 504 " in lines[int(p[len("$.lines[") : -1])] for p in found.refs)
    assert 0.9 <= float(found.numbers["timeout_s"]) <= 1.1  # proxy_read_timeout 1s in that capture


def test_a_504_inside_a_request_line_an_outsider_wrote_is_no_finding() -> None:
    text = '127.0.0.1 - - [30/Nov/2026:07:08:33 +0000] "GET /x?a=\\" 504 1 urt=9.0 HTTP/1.1" 200 12 "-" "curl" rt=0.001 urt=0.001 us=200'
    start, end = text.index("/x?a="), text.index(' HTTP/1.1"')
    assert analyze("inspect_nginx", "access_log", {}, [Ref("$.lines[0]", text, ((start, end),))]) == []


def test_free_space_is_read_as_a_time_to_exhaustion_not_a_slope_alone() -> None:
    hour = 3600
    falling_slowly = {"metric": "FreeStorageSpace", "points": [[i * 600, 82e9 - i * 1e8] for i in range(12)]}
    falling_fast = {"metric": "node_filesystem_avail_bytes", "points": [[i * 600, 6e9 - i * 5e8] for i in range(12)]}
    result = {"series": [falling_slowly, falling_fast]}
    refs = [Ref("$.series[0]", "FreeStorageSpace first=82e9"), Ref("$.series[1]", "node_filesystem_avail_bytes first=6e9")]
    found = {f.refs[0]: f for f in analyze("query_metrics", None, result, refs)}
    slow, fast = found["$.series[0]"], found["$.series[1]"]
    assert slow.code == "metrics.capacity_left" and float(slow.numbers["exhausted_in_s"]) > 100 * hour
    assert fast.code == "metrics.capacity_running_out" and float(fast.numbers["exhausted_in_s"]) < 2 * hour
    assert slow.supports == () and fast.supports == ()
