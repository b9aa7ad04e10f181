"""The live PostgreSQL backend's contract case: a private database on the local server with a
real row lock held, and a server log file in PostgreSQL's own format written by the test."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.targets import PostgresTarget

from .contract import ContractCase
from .pg_support import private_database, row_lock, write_server_log


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """One case: every kind the local server can answer, while a row lock is held."""
    with private_database() as dsn, tempfile.TemporaryDirectory() as tmp, row_lock(dsn):
        log = Path(tmp) / "postgresql-15-main.log"
        write_server_log(log, db=str(conninfo_to_dict(dsn)["dbname"]))
        target = PostgresTarget(name="orders-db", kind="postgres", dsn=dsn, log=log, timeout_s=5)
        backend = PostgresBackend(target, environ={})
        try:
            yield [
                ContractCase(
                    name="live:postgres",
                    backend=backend,
                    calls=[
                        ("inspect_postgres", {"kind": "activity"}),
                        ("inspect_postgres", {"kind": "activity", "query": "order-admin-console", "limit": 2}),
                        ("inspect_postgres", {"kind": "locks"}),
                        ("inspect_postgres", {"kind": "locks", "query": "ShareLock", "limit": 1}),
                        ("inspect_postgres", {"kind": "settings"}),
                        ("inspect_postgres", {"kind": "settings", "query": "deadlock_timeout max_connections"}),
                        ("inspect_postgres", {"kind": "database_stats"}),
                        ("inspect_postgres", {"kind": "wait_events"}),  # the waiter (Lock) and the holder (Client)
                        ("inspect_postgres", {"kind": "wait_events", "query": "transactionid"}),
                        ("inspect_postgres", {"kind": "load_by_user"}),
                        ("inspect_postgres", {"kind": "load_by_host", "limit": 1}),
                        ("inspect_postgres", {"kind": "log"}),
                        ("inspect_postgres", {"kind": "log", "query": '"still waiting" deadlock', "limit": 1, "offset": 1}),
                    ],
                    empty_calls=[
                        ("inspect_postgres", {"kind": "activity", "query": "no-such-term-anywhere"}),
                        ("inspect_postgres", {"kind": "locks", "offset": 500}),
                        ("inspect_postgres", {"kind": "settings", "query": "no-such-setting-anywhere"}),
                        ("inspect_postgres", {"kind": "top_queries"}),
                        ("inspect_postgres", {"kind": "log", "query": "checkpoint", "since": "1h"}),
                    ],
                    data_sources=frozenset({"live:orders-db"}),
                    now=lambda: datetime.now(UTC),
                )
            ]
        finally:
            backend.close()
