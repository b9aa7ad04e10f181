"""The live logs backend's contract case: jsonl, logfmt and regex-format files written by the test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from rootproof.backends.live.logs import LogsBackend

from .contract import ContractCase
from .logs_fixtures import write_all


@contextmanager
def case() -> Iterator[list[ContractCase]]:
    """One case over three file targets (three formats)."""
    folder = Path(tempfile.mkdtemp(prefix="rootproof-logs-"))
    try:
        targets = write_all(folder, datetime.now(UTC))
        backend = LogsBackend(targets, environ={})
        yield [
            ContractCase(
                name="live:logs",
                backend=backend,
                calls=[
                    ("query_logs", {"query": 'HikariPool "connection is not available"'}),
                    ("query_logs", {"level": "ERROR"}),
                    ("query_logs", {"service": "order-service", "query": "order"}),
                    ("query_logs", {"query": "timed out", "limit": 3, "scope": "APPLICATION"}),
                    ("query_logs", {"level": "WARN", "offset": 1, "limit": 2}),
                ],
                empty_calls=[
                    ("query_logs", {"query": "no-such-term-anywhere"}),
                    ("query_logs", {"service": "order-service", "level": "FATAL"}),
                    ("query_logs", {"scope": "DATABASE"}),
                ],
                data_sources=frozenset({"live:orders-app", "live:payments", "live:checkout"}),
                now=lambda: datetime.now(UTC),
            )
        ]
        backend.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
