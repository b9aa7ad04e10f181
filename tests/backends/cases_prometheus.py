"""The live Prometheus backend's contract case: a private Prometheus scraping the PostgreSQL and
Redis exporters (tests/backends/prom_env.py), queried with the wall clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from rootproof.backends.live.prometheus import PrometheusBackend
from rootproof.targets import PrometheusTarget

from .contract import ContractCase
from .prom_env import running_prom_env


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """One case: a plain name, globs with labels, and metrics that do not exist."""
    with running_prom_env() as env:
        backend = PrometheusBackend(PrometheusTarget(kind="prometheus", name="prom", url=env.url), environ={})
        try:
            yield [
                ContractCase(
                    name="live:prometheus",
                    backend=backend,
                    calls=[
                        ("query_metrics", {"metric": "pg_up", "since": "5m"}),
                        ("query_metrics", {"metric": "pg_stat_database_*", "labels": {"datname": "test"}, "since": "10m"}),
                        ("query_metrics", {"metric": "redis_connected_clients*", "labels": {"job": "redis"}}),
                        ("query_metrics", {"metric": "up", "since": "2h"}),
                    ],
                    empty_calls=[
                        ("query_metrics", {"metric": "rootproof_no_such_metric_total"}),
                        ("query_metrics", {"metric": "pg_up", "labels": {"job": "no-such-job"}}),
                        ("query_metrics", {"metric": "no_such_*_glob"}),
                    ],
                    data_sources=frozenset({"live:prom"}),
                    now=lambda: datetime.now(UTC),
                )
            ]
        finally:
            backend.close()
