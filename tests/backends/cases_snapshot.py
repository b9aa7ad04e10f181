"""The snapshot backend's contract case: the built-in pg-row-lock and redis-maxclients scenarios."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rootproof.backends.snapshot import SnapshotBackend
from rootproof.scenarios.loader import load_scenario

from .contract import ContractCase


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """Two snapshot cases (PostgreSQL and Redis tools, logs, metrics)."""
    pg = load_scenario("pg-row-lock")
    redis = load_scenario("redis-maxclients")
    nginx = load_scenario("nginx-upstream-timeout")
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
    ]
