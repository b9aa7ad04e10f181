"""The live PostgreSQL backend under faults, against real servers: a private PgBouncer in
transaction mode (nothing leaks to other clients), a frozen link (a freezable TCP relay), a
call that never returned (the lock), a FIFO as the log, undated and jsonlog log records, a
SQL_ASCII database, a one-letter password."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.backends.live.postgres_log import parse_records
from rootproof.errors import BackendQueryError, BackendUnavailable
from rootproof.targets import PostgresTarget, TargetCheck
from rootproof.tools.base import BackendResult, InspectPostgresArgs
from tests.services import unavailable

from .pg_support import SERVER, FreezableProxy, private_database
from .procs import free_port

pytestmark = pytest.mark.services

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
NOWHERE = "postgresql://nobody@127.0.0.1:1/postgres"  # a log read needs no connection


@pytest.fixture(scope="module")
def dsn() -> Iterator[str]:
    with private_database() as url:
        yield url


def _backend(dsn: str, **kw: object) -> PostgresBackend:
    return PostgresBackend(PostgresTarget.model_validate({"name": "orders-db", "kind": "postgres", "dsn": dsn, **kw}), environ={})


def _call(backend: PostgresBackend, **args: object) -> BackendResult:
    return backend.call("inspect_postgres", InspectPostgresArgs.model_validate(args), now=datetime.now(UTC), run_id="t")


def _in_thread(work: Callable[[], object], wait_s: float) -> tuple[bool, dict[str, object]]:
    """Run `work` in a daemon thread; (finished within wait_s, {"out" or "err": …})."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["out"] = work()
        except BaseException as exc:
            box["err"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait_s)
    return not thread.is_alive(), box


@pytest.fixture
def pooled(dsn: str) -> Iterator[str]:
    """A private PgBouncer (transaction pooling, one server connection, startup options dropped)
    in front of the private database; yields its conninfo, stopped by its pid afterwards."""
    if not os.access(PGBOUNCER, os.X_OK):
        unavailable(f"pgbouncer is not installed ({PGBOUNCER}; apt-get install pgbouncer)")
    params = conninfo_to_dict(dsn)
    user, db = str(params.get("user") or "postgres"), str(params["dbname"])
    base = Path(tempfile.mkdtemp(prefix="rootproof-pgb-"))
    port = free_port()
    (base / "users.txt").write_text(f'"{user}" ""\n')
    (base / "pgbouncer.ini").write_text(
        f"[databases]\n{db} = host={params.get('host') or '127.0.0.1'} port={params.get('port') or 5432} dbname={db} user={user}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\n"
        f"auth_file = {base / 'users.txt'}\npool_mode = transaction\ndefault_pool_size = 1\nmax_client_conn = 20\n"
        f"ignore_startup_parameters = options\nlogfile = {base / 'pgbouncer.log'}\n"
    )
    cmd = [PGBOUNCER, str(base / "pgbouncer.ini")]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        pg = pwd.getpwnam("postgres")
        for path in (base, *base.iterdir()):
            os.chown(path, pg.pw_uid, pg.pw_gid)
        cmd += ["-u", "postgres"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (base / "pgbouncer.log").read_text() if (base / "pgbouncer.log").exists() else ""
                    pytest.fail(f"pgbouncer did not start: {proc.stderr.read() if proc.stderr else b''!r} {log}")
                time.sleep(0.1)
        yield f"host=127.0.0.1 port={port} user={user} dbname={db}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(base, ignore_errors=True)


def test_behind_pgbouncer_in_transaction_mode_nothing_leaks_to_other_clients(pooled: str) -> None:
    backend = _backend(pooled, timeout_s=1)
    try:
        for _ in range(3):  # more statements than psycopg's prepare threshold: none may be prepared
            for kind in ("database_stats", "settings", "activity", "locks", "log"):
                _call(backend, kind=kind)
        # An application client of the same pooler gets the same (only) server connection.
        with psycopg.connect(pooled, autocommit=True) as app:
            row = app.execute(
                "SELECT current_setting('default_transaction_read_only'), current_setting('transaction_read_only'),"
                " current_setting('statement_timeout')"
            ).fetchone()
            assert row == ("off", "off", "0")
            app.execute("INSERT INTO merchant_balances VALUES (9001, 1)")
            app.execute("SELECT pg_sleep(1.3)")  # longer than rootproof's statement_timeout of 1 s
            app.execute("DELETE FROM merchant_balances WHERE merchant_id = 9001")
            app.execute("SET default_transaction_read_only = off")  # a session state rootproof must not trust
        assert _call(backend, kind="database_stats").json()["rows"]
        check = backend.check()
        assert check.usable, check.problem
        assert any("startup options" in w and "pooler" in w for w in check.warnings)
        conn = backend._session()
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), conn.transaction():
            conn.execute("INSERT INTO merchant_balances VALUES (9002, 1)")  # its transactions stay read-only
    finally:
        backend.close()


def test_a_frozen_server_is_unavailable_within_bounded_time(dsn: str) -> None:
    params = conninfo_to_dict(dsn)
    proxy = FreezableProxy((str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)))
    backend = _backend(make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port)), timeout_s=2)
    try:
        _call(backend, kind="database_stats")
        opts = {o.keyword: o.val for o in backend._session().pgconn.info}
        assert opts[b"keepalives"] == b"1" and opts[b"tcp_user_timeout"] == b"2000" and opts[b"keepalives_idle"] == b"2"
        proxy.frozen.set()
        started = time.monotonic()
        finished, box = _in_thread(lambda: _call(backend, kind="database_stats"), 3 * 2)
        elapsed = time.monotonic() - started
        assert finished, "the call was still blocked after 3 x timeout_s"
        err = box.get("err")
        assert isinstance(err, BackendUnavailable) and "no answer within" in str(err), box
        assert elapsed < 3 * 2
        proxy.frozen.clear()
        assert _call(backend, kind="database_stats").json()["rows"]  # a fresh connection
    finally:
        proxy.close()  # unblocks a call still hanging (on the base commit)
        backend.close()


def test_a_call_that_never_returned_makes_the_target_busy_not_blocked(dsn: str) -> None:
    backend = _backend(dsn, timeout_s=1)
    backend._lock.acquire()  # an earlier call still holds the target
    try:
        finished, box = _in_thread(lambda: _call(backend, kind="activity"), 15)
        assert finished and isinstance(box.get("err"), BackendUnavailable), box
        assert "busy: an earlier call on this target has not returned" in str(box["err"])
        finished, box = _in_thread(backend.check, 15)
        check = box.get("out")
        assert finished and isinstance(check, TargetCheck) and not check.usable and "busy" in str(check.problem)
    finally:
        backend._lock.release()
    try:
        assert _call(backend, kind="activity").json()["rows"] is not None
    finally:
        backend.close()


def test_a_fifo_as_the_log_is_refused_at_once(tmp_path: Path, dsn: str) -> None:
    fifo = tmp_path / "postgresql.log"
    os.mkfifo(fifo)
    backend, live = _backend(NOWHERE, log=fifo), _backend(dsn, log=fifo)
    try:
        finished, box = _in_thread(lambda: _call(backend, kind="log"), 5)
        assert finished and isinstance(box.get("err"), BackendQueryError), box
        assert "not a regular file" in str(box["err"])
        finished, box = _in_thread(live.check, 10)
        check = box.get("out")
        assert finished and isinstance(check, TargetCheck) and check.usable
        assert any("not a regular file" in w for w in check.warnings)
    finally:
        for _ in range(3):  # release a reader blocked on the base commit
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        live.close()


def test_records_without_a_timestamp_never_pass_a_window(tmp_path: Path) -> None:
    log = tmp_path / "postgresql.log"
    recent = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S.000 UTC")
    log.write_text(
        "ERROR:  relation \"orders_archive\" does not exist\n"  # no log_line_prefix: when was this?
        f"{recent} [2806] app@orders ERROR:  relation \"orders\" does not exist\n"
    )
    data = _call(_backend(NOWHERE, log=log), kind="log", query="does not exist", since="1h").json()
    assert len(data["lines"]) == 1 and data["lines"][0].startswith(recent)
    empty = _call(_backend(NOWHERE, log=log), kind="log", query="orders_archive", since="1h").json()
    assert empty["lines"] == [] and "1 records without a timestamp were left out" in empty["no_evidence"]


JSONLOG = [  # PostgreSQL 15 jsonlog: one object per record, keys as documented (log_destination = jsonlog)
    '{"timestamp":"2026-11-30 07:04:58.980 UTC","user":"app","dbname":"appdb","pid":3042,"remote_host":"127.0.0.1",'
    '"remote_port":51544,"session_id":"6584a1b2.be2","line_num":4,"ps":"SELECT","session_start":"2026-11-30 07:04:50 UTC",'
    '"vxid":"3/17","txid":0,"error_severity":"ERROR","state_code":"57014",'
    '"message":"canceling statement due to statement timeout","statement":"SELECT pg_sleep($1)",'
    '"application_name":"psql","backend_type":"client backend","query_id":0}',
    '{"timestamp":"2026-11-30 07:05:10.112 UTC","user":"app","dbname":"orders","pid":2851,"remote_host":"127.0.0.1",'
    '"remote_port":51560,"session_id":"6584a1c0.b23","line_num":9,"ps":"UPDATE","session_start":"2026-11-30 07:05:00 UTC",'
    '"vxid":"4/33","txid":731,"error_severity":"ERROR","state_code":"40P01","message":"deadlock detected",'
    '"detail":"Process 2851 waits for ShareLock on transaction 731; blocked by process 2857.\\n'
    'Process 2857 waits for ShareLock on transaction 730; blocked by process 2851.",'
    '"hint":"See server log for query details.","context":"while updating tuple (0,2) in relation \\"t\\"",'
    '"statement":"UPDATE t SET v=v+1 WHERE id=2;","application_name":"worker","backend_type":"client backend","query_id":0}',
    '{"timestamp":"2026-11-30 07:05:30.001 UTC","pid":2748,"session_id":"6584a100.abc","line_num":2,'
    '"session_start":"2026-11-30 07:00:00 UTC","txid":0,"error_severity":"LOG","message":"checkpoint starting: time",'
    '"backend_type":"checkpointer","query_id":0}',
]


def test_jsonlog_records_read_as_the_stderr_format_would_print_them(tmp_path: Path) -> None:
    records = parse_records("\n".join(JSONLOG) + "\n")
    assert [r.ts for r in records] == [
        datetime(2026, 11, 30, 7, 4, 58, 980000, tzinfo=UTC),
        datetime(2026, 11, 30, 7, 5, 10, 112000, tzinfo=UTC),
        datetime(2026, 11, 30, 7, 5, 30, 1000, tzinfo=UTC),
    ]
    assert records[0].text == (
        "2026-11-30 07:04:58.980 UTC [3042] app@appdb ERROR:  canceling statement due to statement timeout\n"
        "2026-11-30 07:04:58.980 UTC [3042] app@appdb STATEMENT:  SELECT pg_sleep($1)"
    )
    deadlock = records[1].text.splitlines()
    assert deadlock[0] == "2026-11-30 07:05:10.112 UTC [2851] app@orders ERROR:  deadlock detected"
    assert deadlock[1].endswith("DETAIL:  Process 2851 waits for ShareLock on transaction 731; blocked by process 2857.")
    assert deadlock[2] == "Process 2857 waits for ShareLock on transaction 730; blocked by process 2851."
    assert deadlock[3].endswith("HINT:  See server log for query details.") and deadlock[-1].endswith("STATEMENT:  UPDATE t SET v=v+1 WHERE id=2;")
    assert records[2].text == "2026-11-30 07:05:30.001 UTC [2748] LOG:  checkpoint starting: time"
    log = tmp_path / "postgresql.json"
    log.write_text("\n".join(JSONLOG) + "\n")
    backend = _backend(NOWHERE, log=log)
    now = datetime(2026, 11, 30, 7, 10, tzinfo=UTC)
    out = backend.call("inspect_postgres", InspectPostgresArgs(kind="log", query='"statement timeout"', since="15m"), now=now, run_id="t")
    assert out.json()["lines"] == [records[0].text]
    late = backend.call("inspect_postgres", InspectPostgresArgs(kind="log", since="5m"), now=now, run_id="t").json()
    assert late["lines"] == [records[2].text, records[1].text]  # the window holds by the JSON timestamps


def test_a_sql_ascii_database_is_usable() -> None:
    name = f"rootproof_test_ascii_{os.getpid()}"
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {SERVER} unreachable or refused CREATE DATABASE: {exc}")
    backend = _backend(make_conninfo(SERVER, dbname=name), timeout_s=3)
    try:
        check = backend.check()
        assert check.usable, check.problem
        rows = _call(backend, kind="database_stats").json()["rows"]
        assert any(r["datname"] == name for r in rows)
        assert isinstance(_call(backend, kind="settings").json()["settings"]["server_version"], str)
    finally:
        backend.close()
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_one_letter_password_does_not_garble_messages() -> None:
    port = free_port()
    target = PostgresTarget(name="orders-db", kind="postgres", dsn=f"postgresql://app@127.0.0.1:{port}/orders", password_env="PGPW")
    backend = PostgresBackend(target, environ={"PGPW": "s"})
    with pytest.raises(BackendUnavailable) as err:
        _call(backend, kind="activity")
    assert "refused" in str(err.value) and "***" not in str(err.value)
    assert f"postgresql://app@127.0.0.1:{port}/orders" in str(err.value)
