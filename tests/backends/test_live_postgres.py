"""The live PostgreSQL backend against the real local server: row locks, read-only session,
unreachable targets, missing pg_stat_statements, the server log, secrets in messages."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.backends.live.postgres_log import parse_records
from rootproof.errors import BackendQueryError, BackendUnavailable, ConfigError
from rootproof.targets import PostgresTarget
from rootproof.tools.base import BackendResult, InspectPostgresArgs

from .pg_support import HOLDER_SQL, WAITER_SQL, private_database, row_lock, write_server_log

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with private_database() as url:
        yield url


def _backend(dsn: str, **kw: object) -> PostgresBackend:
    return PostgresBackend(PostgresTarget.model_validate({"name": "orders-db", "kind": "postgres", "dsn": dsn, **kw}), environ={})


def _call(backend: PostgresBackend, now: datetime | None = None, **args: object) -> BackendResult:
    return backend.call("inspect_postgres", InspectPostgresArgs.model_validate(args), now=now or datetime.now(UTC), run_id="t")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_real_row_lock_names_the_holder(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        with row_lock(dsn) as lock:
            out = _call(backend, kind="locks")
            rows = out.json()["rows"]
            activity = _call(backend, kind="activity", query="order-admin-console").json()["rows"]
        assert not lock.errors
    finally:
        backend.close()
    waiting = [r for r in rows if r["granted"] is False and r["pid"] == lock.waiter_pid]
    assert waiting and waiting[0]["blocking_pids"] == [lock.holder_pid]
    assert waiting[0]["locktype"] == "transactionid" and waiting[0]["mode"] == "ShareLock"
    assert waiting[0]["query"] == WAITER_SQL and waiting[0]["wait_event_type"] == "Lock"
    held = [r for r in rows if r["pid"] == lock.holder_pid]
    assert held and held[0]["granted"] is True and held[0]["query"] == HOLDER_SQL
    assert held[0]["state"] == "idle in transaction" and held[0]["transactionid"] == waiting[0]["transactionid"]
    assert f'"blocking_pids":[{lock.holder_pid}]' in json.dumps(waiting[0], separators=(",", ":"))
    assert any(r["pid"] == lock.holder_pid and r["state"] == "idle in transaction" for r in activity)
    assert out.data_source == "live:orders-db" and out.details["target"] == "orders-db"
    assert out.details["rows_scanned"] == len(rows) and out.details["elapsed_ms"] >= 0


def test_a_lock_queue_shows_each_waiter_and_each_blocker(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        with row_lock(dsn, waiters=2) as lock:
            rows = _call(backend, kind="locks").json()["rows"]
        assert not lock.errors
    finally:
        backend.close()
    first, second = lock.waiter_pids
    by = {(r["pid"], r["locktype"], r["granted"]): r for r in rows}
    assert by[(first, "transactionid", False)]["blocking_pids"] == [lock.holder_pid]
    assert by[(second, "tuple", False)]["blocking_pids"] == [first]  # queued behind the first waiter
    assert by[(first, "tuple", True)]["relname"] == "merchant_balances"  # the first waiter holds the tuple lock
    assert by[(lock.holder_pid, "transactionid", True)]["query"] == HOLDER_SQL
    assert rows[0]["granted"] is False and rows[1]["granted"] is False  # waits first


def test_every_transaction_is_read_only_with_a_local_statement_timeout(dsn: str) -> None:
    backend = _backend(dsn, timeout_s=3)
    try:
        _call(backend, kind="database_stats")
        conn = backend._session()
        assert conn.read_only is True and conn.autocommit is False
        with pytest.raises(pgerr.ReadOnlySqlTransaction), conn.transaction():
            conn.execute("INSERT INTO merchant_balances VALUES (1, 1)")
        with conn.transaction():
            row = conn.execute("SELECT current_setting('statement_timeout') AS st, current_setting('application_name') AS app").fetchone()
        assert row == {"st": "3s", "app": "rootproof"}  # the startup options, honoured by a direct connection
        check = backend.check()
        assert check.usable and check.problem is None
        assert not any("startup options" in w for w in check.warnings)
        _call(backend, kind="settings")
        assert conn.info.transaction_status.name == "IDLE"  # no transaction is left open after a call
    finally:
        backend.close()
        backend.close()  # idempotent


def test_own_session_is_not_in_activity_and_settings_show_the_database_value(dsn: str) -> None:
    name = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET statement_timeout = '42s'").format(sql.Identifier(name)))
    backend = _backend(dsn, timeout_s=2)
    try:
        rows = _call(backend, kind="activity", limit=200).json()["rows"]
        own = backend._session().info.backend_pid
        assert own not in {r["pid"] for r in rows}
        settings = _call(backend, kind="settings").json()["settings"]
        assert settings["statement_timeout"] == "42s"  # the database's, not rootproof's 2s
        assert settings["deadlock_timeout"] == "1s" and settings["max_connections"].isdigit()
        assert set(_call(backend, kind="settings", query="work_mem").json()["settings"]) == {"work_mem", "maintenance_work_mem"}
    finally:
        backend.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} RESET statement_timeout").format(sql.Identifier(name)))


def test_a_statement_timeout_is_backend_unavailable(dsn: str) -> None:
    backend = _backend(dsn, timeout_s=1)
    blocker = psycopg.connect(dsn)
    try:
        _call(backend, kind="activity")  # connected and verified before the view is locked
        blocker.execute("LOCK TABLE pg_catalog.pg_settings IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="timed out after 1 s"):
            _call(backend, kind="settings")
        assert time.monotonic() - started < 3
    finally:
        blocker.rollback()
        blocker.close()
    try:
        assert _call(backend, kind="settings").json()["settings"]  # the session survives
    finally:
        backend.close()


def test_a_dead_target_is_unavailable_quickly() -> None:
    port = _closed_port()
    backend = _backend(f"postgresql://app@127.0.0.1:{port}/orders", timeout_s=3)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as err:
        _call(backend, kind="activity")
    assert time.monotonic() - started < 3
    assert f"postgresql://app@127.0.0.1:{port}/orders" in str(err.value) and "refused" in str(err.value)
    check = backend.check()
    assert not check.usable and check.problem and check.problem.startswith("unreachable")
    backend.close()


def test_a_missing_database_is_unavailable_with_a_clear_message(dsn: str) -> None:
    params = conninfo_to_dict(dsn)
    backend = _backend(f"postgresql://{params.get('user', 'postgres')}@127.0.0.1:5432/rootproof_no_such_db", timeout_s=3)
    with pytest.raises(BackendUnavailable, match='database "rootproof_no_such_db" does not exist'):
        _call(backend, kind="locks")
    backend.close()


def test_secrets_never_reach_messages(dsn: str) -> None:
    port = _closed_port()
    target = PostgresTarget.model_construct(name="orders-db", kind="postgres", dsn=f"postgresql://app:dsn-pw-0451@127.0.0.1:{port}/orders", password_env="PGPW")  # built in code, past the file's checks: the backend still masks it
    backend = PostgresBackend(target, environ={"PGPW": "env-pw-9917"})
    with pytest.raises(BackendUnavailable) as err:
        _call(backend, kind="activity")
    check = backend.check()
    for text in (str(err.value), check.problem or "", repr(check)):
        assert "dsn-pw-0451" not in text and "env-pw-9917" not in text
    assert "postgresql://app@127.0.0.1" in str(err.value)
    live = PostgresBackend(PostgresTarget(name="orders-db", kind="postgres", dsn=dsn, password_env="PGPW"), environ={"PGPW": "env-pw-9917"})
    try:  # trust auth ignores the password; nothing returned carries it
        for kind in ("activity", "settings", "database_stats", "locks"):
            out = _call(live, kind=kind)
            assert "env-pw-9917" not in json.dumps(out.json()) + json.dumps(out.details)
    finally:
        live.close()


def test_missing_pg_stat_statements_is_no_evidence(dsn: str) -> None:
    backend = _backend(dsn)
    try:
        data = _call(backend, kind="top_queries").json()
        assert data["rows"] == [] and "pg_stat_statements is not installed in database" in data["no_evidence"]
        assert "CREATE EXTENSION pg_stat_statements" in data["no_evidence"]
        assert any("pg_stat_statements is not installed" in w for w in backend.check().warnings)
        with psycopg.connect(dsn, autocommit=True) as conn:
            preloaded = "pg_stat_statements" in str(conn.execute("SHOW shared_preload_libraries").fetchone())
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        data = _call(backend, kind="top_queries").json()
        if not preloaded:
            assert data["rows"] == [] and "not loaded" in data["no_evidence"] and "shared_preload_libraries" in data["no_evidence"]
    finally:
        backend.close()


def test_the_log_is_read_newest_first_and_bounded(tmp_path: Path) -> None:
    log = tmp_path / "pg.log"
    lines = write_server_log(log)
    backend = _backend("postgresql://nobody@127.0.0.1:1/postgres", log=log)  # a log read needs no connection
    out = _call(backend, kind="log", since="1h")
    data = out.json()
    assert data["total_matches"] == 3 and data["lines"][0].startswith(lines[-1][:23])
    deadlock = data["lines"][1]
    assert "ERROR:  deadlock detected" in deadlock and "\tProcess 2857: UPDATE t SET v=v+1 WHERE id=1;" in deadlock
    assert deadlock.endswith("STATEMENT:  UPDATE t SET v=v+1 WHERE id=2;")
    assert "checkpoint" not in json.dumps(data)  # two hours old
    assert out.details["bytes_read"] == log.stat().st_size
    big = tmp_path / "big.log"
    filler = "".join(f"2020-01-01 00:00:{i % 60:02d}.000 UTC [1] LOG:  old line {i}\n" for i in range(5000))
    big.write_text(filler + log.read_text())
    bounded = _call(_backend("postgresql://nobody@127.0.0.1:1/postgres", log=big, max_bytes=4096), kind="log", since="7d")
    assert bounded.details["bytes_read"] <= 4096 and bounded.json()["lines"][0].startswith(lines[-1][:23])
    missing = _backend("postgresql://nobody@127.0.0.1:1/postgres", log=tmp_path / "nope.log")
    with pytest.raises(BackendQueryError, match="nope.log"):
        _call(missing, kind="log")


def test_real_postgresql_logs_keep_their_continuation_lines(shared_data: Path) -> None:
    text = (shared_data / "real-logs" / "postgresql-deadlock.log").read_text()
    records = parse_records(text)
    assert len(records) == 3
    detected, error, duration = (r.text for r in records)
    assert "detected deadlock while waiting for ShareLock" in detected and "DETAIL:  Process holding the lock: 2857" in detected
    assert detected.splitlines()[-1].endswith("STATEMENT:  UPDATE t SET v=v+1 WHERE id=2;")
    assert len(error.splitlines()) == 8 and "HINT:  See server log" in error and "\tProcess 2851: UPDATE" in error
    assert "duration: 697.916 ms" in duration and records[2].ts == datetime(2026, 11, 30, 7, 4, 58, 980000, tzinfo=UTC)
    queue = parse_records((shared_data / "real-logs" / "postgresql-row-lock-queue.log").read_text())
    assert [len(r.lines) for r in queue] == [4, 3, 3, 2, 1, 1]
    backend = _backend("postgresql://nobody@127.0.0.1:1/postgres", log=shared_data / "real-logs" / "postgresql-extended-protocol.log")
    out = _call(backend, now=datetime(2026, 11, 30, 7, 30, tzinfo=UTC), kind="log", since="1h", query='"due to statement timeout"')
    assert out.json()["lines"] == [
        "2026-11-30 07:05:28.386 UTC [3042] app@appdb ERROR:  canceling statement due to statement timeout\n"
        "2026-11-30 07:05:28.386 UTC [3042] app@appdb STATEMENT:  SELECT pg_sleep($1)"
    ]


def test_concurrent_calls_share_one_session(dsn: str) -> None:
    backend = _backend(dsn)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                _call(backend, kind="database_stats")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        pid = backend._session().info.backend_pid
        backend.close()
        _call(backend, kind="database_stats")  # reopened lazily after close
        assert backend._session().info.backend_pid != pid
    finally:
        backend.close()


def test_bad_configuration_is_a_config_error_at_construction() -> None:
    with pytest.raises(ConfigError, match="orders-db: dsn: not a libpq URL"):
        _backend("host=127.0.0.1 port")
    target = PostgresTarget(name="orders-db", kind="postgres", dsn="postgresql://app@127.0.0.1/orders", password_env="NO_SUCH_PW")
    with pytest.raises(ConfigError, match="NO_SUCH_PW is not set"):
        PostgresBackend(target, environ={})


def test_the_log_reads_the_targets_database_and_the_server_wide_records(tmp_path: Path) -> None:
    """Issue 30, point 6: the records of another database on the same server (its lock waits,
    its deadlocks) are not this target's evidence; a refused connection (FATAL) and a record of
    no database concern the whole server and stay."""
    now = datetime(2026, 11, 30, 7, 30, tzinfo=UTC)
    log = tmp_path / "pg.log"
    log.write_text(
        "2026-11-30 07:20:00.000 UTC [2701] LOG:  checkpoint complete: wrote 12 buffers\n"
        "2026-11-30 07:21:00.000 UTC [2806] app@orders LOG:  process 2806 still waiting for ShareLock on transaction 728 after 1000.152 ms\n"
        "2026-11-30 07:22:00.000 UTC [2851] billing@billing ERROR:  deadlock detected\n"
        "2026-11-30 07:22:00.000 UTC [2851] billing@billing DETAIL:  Process 2851 waits for ShareLock on transaction 731; blocked by process 2857.\n"
        "2026-11-30 07:23:00.000 UTC [2972] billing@billing FATAL:  remaining connection slots are reserved for non-replication superuser connections\n"
    )
    own = _call(_backend("postgresql://app@127.0.0.1:1/orders", log=log), now=now, kind="log", since="1h").json()["lines"]
    assert len(own) == 3 and not any("deadlock" in line for line in own), own
    assert any("@orders" in line for line in own) and any("FATAL" in line for line in own) and any("checkpoint" in line for line in own)
    empty = _call(_backend("postgresql://app@127.0.0.1:1/orders", log=log), now=now, kind="log", since="1h", query='"deadlock detected"').json()
    assert empty["lines"] == [] and "1 record of other databases on this server left out" in empty["no_evidence"], empty
    # A maintenance database's connection watches the whole server.
    every = _call(_backend("postgresql://monitor@127.0.0.1:1/postgres", log=log), now=now, kind="log", since="1h").json()["lines"]
    assert len(every) == 4 and any("deadlock detected" in line for line in every)


def test_sessions_and_locks_of_another_database_on_the_server_are_not_this_targets(dsn: str) -> None:
    """A row lock held in another database of the same server: this target's `locks` and
    `activity` views show none of it (its waiters cannot be this database's), while a DSN on the
    maintenance database sees the whole server."""
    with private_database() as other, row_lock(other) as lock:
        own = _backend(dsn)
        whole = _backend(make_conninfo(dsn, dbname="postgres"))
        try:
            assert _call(own, kind="locks").json()["rows"] == []
            pids = {r["pid"] for r in _call(own, kind="activity", limit=50).json()["rows"]}
            assert lock.holder_pid not in pids and not set(lock.waiter_pids) & pids
            waiting = {r["pid"] for r in _call(whole, kind="locks").json()["rows"]}
            assert set(lock.waiter_pids) <= waiting and lock.holder_pid in waiting
        finally:
            own.close()
            whole.close()
