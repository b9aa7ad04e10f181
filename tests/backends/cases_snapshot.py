"""The snapshot backend's contract case: built-in scenarios, and a fixture with provider data
(load breakdowns, Performance Insights top-SQL rows, CloudWatch metrics, RDS events)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rootproof.backends.snapshot import SnapshotBackend
from rootproof.scenarios.loader import load_scenario

from .contract import ContractCase


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """Two snapshot cases (PostgreSQL and Redis tools, logs, metrics)."""
    pg = load_scenario("pg-row-lock")
    redis = load_scenario("redis-maxclients")
    nginx = load_scenario("nginx-upstream-timeout")
    rds = load_scenario(Path(__file__).parents[1] / "data" / "scenarios" / "rds-cpu-statement")
    yield [
        ContractCase(
            name="snapshot:pg-row-lock",
            backend=SnapshotBackend(pg),
            calls=[
                ("query_logs", {"query": "waiting ShareLock", "since": "30m"}),
                ("query_logs", {"level": "ERROR", "limit": 2}),
                ("query_metrics", {"metric": "pg_locks*"}),
                ("inspect_postgres", {"kind": "locks"}),
                ("inspect_postgres", {"kind": "activity"}),
            ],
            empty_calls=[("query_logs", {"query": "no-such-term-anywhere"})],
            data_sources=frozenset({"snapshot", "mock"}),
            now=lambda: pg.now,
        ),
        ContractCase(
            name="snapshot:redis-maxclients",
            backend=SnapshotBackend(redis),
            calls=[("inspect_redis", {"kind": "info"}), ("inspect_redis", {"kind": "clients", "limit": 5})],
            empty_calls=[("inspect_redis", {"kind": "info", "query": "no-such-field-anywhere"})],
            data_sources=frozenset({"snapshot", "mock"}),
            now=lambda: redis.now,
        ),
        ContractCase(
            name="snapshot:nginx-upstream-timeout",
            backend=SnapshotBackend(nginx),
            calls=[("inspect_nginx", {"kind": "error_log", "query": "upstream timed out"}), ("inspect_nginx", {"kind": "config"})],
            data_sources=frozenset({"snapshot", "mock"}),
            now=lambda: nginx.now,
        ),
        ContractCase(
            name="snapshot:rds-cpu-statement",
            backend=SnapshotBackend(rds),
            calls=[
                ("inspect_postgres", {"kind": "wait_events"}),
                ("inspect_postgres", {"kind": "load_by_user", "query": "report_reader"}),
                ("inspect_postgres", {"kind": "load_by_host", "limit": 1}),
                ("inspect_postgres", {"kind": "top_queries", "query": "customer_email"}),
                ("query_logs", {"scope": "CLOUD", "since": "1h"}),
                ("query_metrics", {"metric": "db.load.*"}),
                ("query_metrics", {"metric": "CPUUtilization", "labels": {"DBInstanceIdentifier": "orders-prod"}}),
            ],
            empty_calls=[
                ("inspect_postgres", {"kind": "wait_events", "query": "no-such-wait-anywhere"}),
                ("inspect_postgres", {"kind": "activity"}),
                ("query_logs", {"scope": "CLOUD", "service": "checkout-api"}),
            ],
            data_sources=frozenset({"snapshot", "mock"}),
            now=lambda: rds.now,
        ),
    ]
