"""The evidence-source table: which components a ref's source can observe, and what client errors name."""

from __future__ import annotations

from pathlib import Path

import pytest

from rootproof.evidence_sources import CLIENT_ERRORS, SOURCE_RULES, names_component, observed_components
from rootproof.taxonomy import COMPONENTS

DOC = Path(__file__).resolve().parents[1] / "docs" / "guard-rules.md"


def log(service: str, source: str, message: str, level: str = "ERROR") -> str:
    return f"2026-03-12T09:58:00.000Z {level} {service} [{source}] {message}"


@pytest.mark.parametrize(
    ("tool", "kind", "text", "want"),
    [
        ("inspect_postgres", "activity", '{"pid":1}', {"postgresql", "connection_pool"}),
        ("inspect_postgres", "locks", '{"pid":1}', {"postgresql"}),
        ("inspect_postgres", "log", "2026-08-03 09:38:02.517 UTC [5120] LOG:  x", {"postgresql"}),
        ("inspect_redis", "info", "connected_clients:10000", {"redis"}),
        ("inspect_nginx", "error_log", "2026/11/30 07:08:33 [error] 1#1: x", {"nginx"}),
        ("lookup_knowledge", None, "[redis-maxclients] Redis: max clients", set()),
        ("query_metrics", None, 'pg_locks_count{mode="ShareLock"} first=0 last=9', {"postgresql"}),
        ("query_metrics", None, "pg_stat_activity_count first=1 last=2", {"postgresql", "connection_pool"}),
        ("query_metrics", None, "redis_connected_clients first=1 last=2", {"redis"}),
        ("query_metrics", None, "hikaricp_connections_pending first=0 last=20", {"connection_pool"}),
        ("query_metrics", None, "jvm_gc_pause_seconds_max first=0 last=3", {"jvm"}),
        ("query_metrics", None, "node_filesystem_avail_bytes first=9 last=0", {"disk"}),
        ("query_metrics", None, "node_cpu_utilisation:ratio first=0.2 last=0.9", {"host"}),
        ("query_metrics", None, "process_cpu_usage first=0.2 last=0.9", {"host"}),
        ("query_metrics", None, "kafka_consumergroup_lag_sum first=0 last=9", {"message_queue"}),
        ("query_metrics", None, "mysql_global_status_threads_connected first=0 last=9", {"mysql"}),
        ("query_metrics", None, "kube_pod_container_status_restarts_total first=0 last=9", {"kubernetes"}),
        ("query_metrics", None, "probe_ssl_earliest_cert_expiry first=0 last=9", {"tls"}),
        ("query_metrics", None, "coredns_forward_healthcheck_failures_total first=0 last=9", {"dns"}),
        ("query_metrics", None, "http_requests_total:rate5m first=0 last=9", {"application"}),
        ("query_logs", None, log("postgres-orders", "postgresql-15-main.log", "LOG: x"), {"postgresql"}),
        ("query_logs", None, log("redis-cart", "redis-server.log", "x"), {"redis"}),
        ("query_logs", None, log("mariadb-points", "mariadb-error.log", "x"), {"mysql"}),
        ("query_logs", None, log("ip-10-70-3-21", "kern.log", "x"), {"host", "disk", "network"}),
        ("query_logs", None, log("coredns", "coredns.log", "x"), {"dns"}),
        ("query_logs", None, log("search-api", "gc.log", "Pause Full"), {"jvm"}),
        ("query_logs", None, log("config-deployer", "config-deployer.log", "x"), {"configuration"}),
        (
            "query_logs",
            None,
            log("order-service", "order-service.log", "x"),
            {"application", "connection_pool", "jvm"},
        ),
        ("query_logs", None, "not a log ref", set()),
    ],
)
def test_observed_components(tool: str, kind: str | None, text: str, want: set[str]) -> None:
    assert observed_components(tool, kind, text) == frozenset(want)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            log(
                "session-service",
                "session-service.log",
                "redis.exceptions.ConnectionError: max number of clients reached",
            ),
            {"redis"},
        ),
        (
            log(
                "order-service",
                "order-service.log",
                "HikariPool-1 - Connection is not available, request timed out after 30000ms",
            ),
            {"connection_pool"},
        ),
        (
            log(
                "payment-gateway",
                "p.log",
                "java.net.UnknownHostException: api.stripe.com: Temporary failure in name resolution",
            ),
            {"dns"},
        ),
        (
            log(
                "billing-api",
                "b.log",
                'psycopg.OperationalError: connection to server at "10.40.1.5" failed: FATAL:  sorry, too many clients already',
            ),
            {"postgresql"},
        ),
        (log("ops-shell", "ops-shell.log", "ERROR 1040 (08004): Too many connections"), {"mysql"}),
        (
            log("reconciler", "r.log", "tls: failed to verify certificate: x509: certificate has expired"),
            {"tls"},
        ),
        # Below WARN, a message names nothing; nor does text inside an untrusted span.
        (
            log(
                "session-service",
                "s.log",
                "redis.exceptions.ConnectionError: max number of clients reached",
                "INFO",
            ),
            set(),
        ),
        (
            log(
                "web",
                "access.log",
                '1.2.3.4 - - [12/Mar/2026:09:58:00 +0000] "GET /redis HTTP/1.1" 500 1 "-" "redis.exceptions"',
            ),
            set(),
        ),
        (log("web", "app.log", "GET /redis.exceptions.ConnectionError 500 in 3 ms"), set()),
        (
            "2026/11/30 07:08:33 [error] 1#1: *3 upstream timed out (110: Connection timed out) while reading response header from upstream",
            {"nginx"},
        ),
        ("2026-08-03 09:38:02.517 UTC [5120] LOG:  redis", set()),
    ],
)
def test_names_component(text: str, want: set[str]) -> None:
    assert names_component(text) == frozenset(want)


def test_every_row_names_taxonomy_components_and_every_tool_has_a_fallback() -> None:
    for rule in SOURCE_RULES:
        assert rule.components <= COMPONENTS
    for tool in (
        "inspect_postgres",
        "inspect_redis",
        "inspect_nginx",
        "lookup_knowledge",
        "query_metrics",
        "query_logs",
    ):
        assert [r for r in SOURCE_RULES if r.tool == tool][-1].pattern == ""
    assert {c for c, _, _ in CLIENT_ERRORS} <= COMPONENTS


def test_the_doc_lists_every_row_of_the_table() -> None:
    if not DOC.exists():
        pytest.skip("docs/guard-rules.md not written yet")
    text = DOC.read_text(encoding="utf-8")
    for rule in SOURCE_RULES:
        assert f"| `{rule.tool}` | {rule.doc} | {', '.join(sorted(rule.components)) or '—'} |" in text, (
            rule.doc
        )
    for comp, _, doc in CLIENT_ERRORS:
        assert f"| {comp} | {doc} |" in text, comp


def test_a_users_namespaced_component_is_observed_by_the_logs_and_metrics_named_after_it() -> None:
    from rootproof.evidence_sources import from_component, observes

    line = "2026-09-21T09:12:00.000Z ERROR ledger-service [ledger-service.log] LedgerLockWait: posting 4120 waited 30000 ms"
    other = "2026-09-21T09:12:00.000Z ERROR checkout [checkout.log] posting failed"
    naming = "2026-09-21T09:12:00.000Z ERROR checkout [checkout.log] acme ledger refused: ledger lock held"
    assert observes("acme.ledger", "query_logs", None, line)
    assert not observes("acme.ledger", "query_logs", None, other)
    assert observes("acme.ledger_postings", "query_metrics", None, "ledger_postings_waiting{} first=0 last=9")
    assert not observes("acme.ledger", "inspect_postgres", "activity", '{"pid":1}')
    assert from_component("acme.ledger", "query_logs", None, naming)
    assert not from_component("acme.ledger", "query_logs", None, other)
    # the built-in table is unchanged for built-in components
    assert observes("postgresql", "inspect_postgres", "locks", '{"pid":1}')
    assert not from_component("redis", "query_logs", None, other)
