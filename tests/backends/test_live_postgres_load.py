"""The live PostgreSQL backend's load breakdowns (`wait_events`, `load_by_user`, `load_by_host`)
against the real local server: busy sessions are counted by what they wait on, by user and by
client host; idle sessions are not."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.targets import PostgresTarget
from rootproof.tools.base import InspectPostgresArgs
from rootproof.tools.refs import canonical_json, ref_text

from .pg_support import SERVER, private_database, row_lock

pytestmark = pytest.mark.services

CPU_SQL = (
    "DO $$ DECLARE t timestamptz := clock_timestamp(); "
    "BEGIN WHILE clock_timestamp() < t + interval '{s} s' LOOP END LOOP; END $$"
)
"""A statement that burns CPU for `s` seconds, waiting on nothing."""


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with private_database() as url:
        yield url


def _backend(dsn: str) -> PostgresBackend:
    return PostgresBackend(
        PostgresTarget(name="orders-db", kind="postgres", dsn=dsn, timeout_s=5), environ={}
    )


def _rows(backend: PostgresBackend, kind: str, **args: Any) -> list[dict[str, Any]]:
    out = backend.call(
        "inspect_postgres", InspectPostgresArgs(kind=kind, **args), now=datetime.now(UTC), run_id="t"
    )
    data = out.json()
    for i, row in enumerate(data["rows"]):  # each row is cited as its canonical JSON
        assert ref_text("inspect_postgres", data, f"$.rows[{i}]") == canonical_json(row)
    return list(data["rows"])


@contextmanager
def _busy(dsn: str, statement: str, sessions: int = 1, **connect: Any) -> Iterator[list[int]]:
    """`sessions` connections each running `statement` in a thread; yields their pids once all run it."""
    conns = [psycopg.connect(dsn, autocommit=True, **connect) for _ in range(sessions)]
    pids = [c.info.backend_pid for c in conns]
    errors: list[BaseException] = []

    def run(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute(statement)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in conns]
    try:
        for t in threads:
            t.start()
        with psycopg.connect(dsn, autocommit=True) as probe:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                active = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) AND state = 'active'", (pids,)
                ).fetchone()
                if active and active[0] == sessions:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"sessions {pids} never became active")
        yield pids
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_cancel_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        for t in threads:
            t.join(timeout=10)
        for c in conns:
            c.close()
    assert all(isinstance(e, psycopg.errors.QueryCanceled) for e in errors), errors


def _until(check: Callable[[], bool], seconds: float = 5) -> bool:
    """Sample again until `check` holds: the load is an instant sample, and a session running a
    loop may be caught between two statements."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def _load(rows: list[dict[str, Any]], key: str, value: str) -> int:
    return sum(int(r["db_load_avg"]) for r in rows if r[key] == value)


def test_wait_events_count_sessions_by_what_they_wait_on(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        with (
            row_lock(dsn) as lock,
            _busy(dsn, "SELECT pg_sleep(30)", sessions=2),
            _busy(dsn, CPU_SQL.format(s=30)),
        ):
            rows: list[dict[str, Any]] = []

            def seen() -> bool:
                rows[:] = _rows(backend, "wait_events")
                return _load(rows, "name", "CPU") >= 1

            assert _until(seen), rows
            assert _load(rows, "name", "Timeout:PgSleep") >= 2
            assert _load(rows, "name", "Lock:transactionid") >= 1  # the waiter
            assert _load(rows, "name", "Client:ClientRead") >= 1  # the holder, idle in transaction
            by_name = {r["name"]: r for r in rows}
            assert by_name["CPU"]["type"] == "CPU" and by_name["Lock:transactionid"]["type"] == "Lock"
            assert set(rows[0]) == {"name", "type", "db_load_avg"}
            loads = [r["db_load_avg"] for r in rows]
            assert loads == sorted(loads, reverse=True)  # most load first
            assert [r["name"] for r in _rows(backend, "wait_events", query="PgSleep")] == ["Timeout:PgSleep"]
        assert not lock.errors
    finally:
        backend.close()


@contextmanager
def _role(dsn: str) -> Iterator[str]:
    """A login role of its own (trust authentication), dropped afterwards."""
    name = f"rootproof_load_{secrets.token_hex(3)}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_load_by_user_and_by_host_count_busy_sessions_not_idle_ones(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        with _role(dsn) as role:
            as_role = make_conninfo(dsn, user=role)
            with psycopg.connect(as_role, autocommit=True) as idle:  # connected, doing nothing
                assert idle.info.backend_pid
                with _busy(as_role, "SELECT pg_sleep(30)", sessions=2):
                    by_user = _rows(backend, "load_by_user")
                    by_host = _rows(backend, "load_by_host", query="127.0.0.1")
                    assert _load(by_user, "name", role) == 2  # the idle session is no load
                    assert {r["name"] for r in _rows(backend, "load_by_user", query=role)} == {role}
                    assert set(by_user[0]) == {"name", "db_load_avg"}
                    assert _load(by_host, "id", "127.0.0.1") >= 2 and set(by_host[0]) == {"id", "db_load_avg"}
                assert _until(lambda: _load(_rows(backend, "load_by_user"), "name", role) == 0)
    finally:
        backend.close()


def test_no_load_from_a_user_is_no_evidence(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        out = backend.call(
            "inspect_postgres",
            InspectPostgresArgs(kind="load_by_user", query="no-such-user-anywhere"),
            now=datetime.now(UTC),
            run_id="t",
        )
        data = out.json()
        assert data["rows"] == [] and data["no_evidence"].startswith(
            "inspect_postgres found no match for query 'no-such-user-anywhere' (kind=load_by_user"
        )
    finally:
        backend.close()
