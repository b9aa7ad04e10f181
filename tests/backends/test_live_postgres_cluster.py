"""The live PostgreSQL backend on a private primary and streaming standby started for this module
(PostgreSQL 15 binaries, tmp folder, free ports, stopped afterwards): pg_stat_statements preloaded,
replication from both sides, the server log found through pg_current_logfile() (and refused
when it names a file outside log_directory or the server is not on this host)."""

from __future__ import annotations

import ipaddress
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from rootproof.backends.live.postgres import PostgresBackend
from rootproof.targets import PostgresTarget
from rootproof.tools.base import BackendResult, InspectPostgresArgs
from tests.services import unavailable

from .pg_support import FreezableProxy
from .procs import free_port

pytestmark = [pytest.mark.services, pytest.mark.slow]

BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass
class Cluster:
    primary: str
    standby: str


def _as_postgres(*cmd: str) -> None:
    prefix = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
    subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not (BIN / "initdb").exists() or (os.geteuid() == 0 and not shutil.which("runuser")):
        unavailable(f"no PostgreSQL binaries at {BIN} to start a private cluster")
    base = Path(tempfile.mkdtemp(prefix="rootproof-pg-"))  # not under pytest's 0700 folder: postgres owns it
    if os.geteuid() == 0:
        pg = pwd.getpwnam("postgres")
        os.chown(base, pg.pw_uid, pg.pw_gid)
    primary, standby = base / "primary", base / "standby"
    p1, p2 = free_port(), free_port()
    started: list[Path] = []
    try:
        _as_postgres(str(BIN / "initdb"), "-D", str(primary), "--auth=trust", "-U", "postgres", "-E", "UTF8")
        with (primary / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {p1}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{base}'\n"
                "shared_preload_libraries = 'pg_stat_statements'\nlogging_collector = on\n"
                "log_directory = 'log'\nlog_filename = 'postgresql.log'\nlog_destination = 'stderr,jsonlog'\nlog_line_prefix = '%m [%p] %q%u@%d '\nwal_level = replica\n"
                "max_wal_senders = 4\nfsync = off\nlog_timezone = 'UTC'\n"
            )
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(primary), "-l", str(base / "primary.out"), "-w", "start")
        started.append(primary)
        _as_postgres(str(BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(p1), "-U", "postgres", "-D", str(standby), "-R", "-X", "stream")
        with (standby / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {p2}\ncluster_name = 'standby-1'\nlogging_collector = off\n")
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(standby), "-l", str(base / "standby.out"), "-w", "start")
        started.append(standby)
    except (subprocess.SubprocessError, OSError) as exc:
        for data in started:
            _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)
        detail = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else ""
        unavailable(f"could not start a private PostgreSQL cluster: {exc} {detail}")
    try:
        yield Cluster(primary=f"postgresql://postgres@127.0.0.1:{p1}/postgres", standby=f"postgresql://postgres@127.0.0.1:{p2}/postgres")
    finally:
        for data in reversed(started):
            _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def _call(backend: PostgresBackend, **args: object) -> BackendResult:
    return backend.call("inspect_postgres", InspectPostgresArgs.model_validate(args), now=datetime.now(UTC), run_id="t")


def _backend(dsn: str, name: str = "users-db") -> PostgresBackend:
    return PostgresBackend(PostgresTarget(name=name, kind="postgres", dsn=dsn), environ={})


def test_top_queries_from_pg_stat_statements(cluster: Cluster) -> None:
    with psycopg.connect(cluster.primary, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for _ in range(3):
            conn.execute("SELECT pg_sleep(0.05)")
    backend = _backend(cluster.primary)
    try:
        data = _call(backend, kind="top_queries", query="pg_sleep").json()
        assert "no_evidence" not in data
        row = next(r for r in data["rows"] if "pg_sleep" in r["query"])
        assert row["calls"] >= 3 and row["mean_exec_time"] >= 40 and isinstance(row["queryid"], str)
        assert {"total_exec_time", "rows", "shared_blks_hit", "shared_blks_read", "usename", "datname"} <= set(row)
        all_rows = _call(backend, kind="top_queries", limit=200).json()["rows"]
        times = [r["total_exec_time"] for r in all_rows]
        assert times == sorted(times, reverse=True)
        check = backend.check()
        assert check.usable and not any("pg_stat_statements" in w for w in check.warnings)
    finally:
        backend.close()


def test_replication_seen_from_the_primary_and_the_standby(cluster: Cluster) -> None:
    primary, standby = _backend(cluster.primary), _backend(cluster.standby, "users-replica-1")
    try:
        deadline = time.monotonic() + 20
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            rows = _call(primary, kind="replication").json()["rows"]
            # streaming comes first; the replay position only with the standby's first feedback
            if rows and rows[0]["state"] == "streaming" and rows[0]["replay_lag_bytes"] is not None:
                break
            time.sleep(0.2)
        assert rows and rows[0]["application_name"] == "standby-1" and rows[0]["state"] == "streaming"
        assert isinstance(rows[0]["replay_lag_bytes"], int) and rows[0]["sync_state"] == "async"
        assert rows[0]["replay_lag"] is None or isinstance(rows[0]["replay_lag"], float)
        mine = _call(standby, kind="replication").json()["rows"]
        assert mine[0]["server_role"] == "standby" and mine[0]["state"] == "streaming"
        assert isinstance(mine[0]["replay_lsn"], str) and "/" in str(mine[0]["replay_lsn"])
    finally:
        primary.close()
        standby.close()


def test_the_log_is_found_through_pg_current_logfile(cluster: Cluster) -> None:
    with psycopg.connect(cluster.primary, autocommit=True, application_name="report-job") as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0 AS broken_report")
    backend = _backend(cluster.primary)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not lines:
            lines = _call(backend, kind="log", query='"division by zero"', since="10m").json()["lines"]
            time.sleep(0.1)
        assert lines and "ERROR:  division by zero" in lines[0]
        assert lines[0].splitlines()[-1].endswith("STATEMENT:  SELECT 1/0 AS broken_report")
        assert not any("log" in w for w in backend.check().warnings)
    finally:
        backend.close()


def _primary_port(cluster: Cluster) -> int:
    return int(cluster.primary.rsplit(":", 1)[1].split("/")[0])


def test_a_log_file_named_outside_log_directory_is_never_read(cluster: Cluster, tmp_path: Path) -> None:
    secret = tmp_path / "local_secret.txt"
    secret.write_text("2026-11-30 07:00:00.000 UTC [1] LOG:  api-token=local-secret-4471\n")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    with psycopg.connect(cluster.primary, autocommit=True) as conn:
        data = str((conn.execute("SHOW data_directory").fetchone() or [""])[0])
        saved = str((conn.execute("SELECT pg_read_file('current_logfiles')").fetchone() or [""])[0]).split()
        # A database superuser (or anyone who can write the data directory) names any local file.
        conn.execute(sql.SQL("COPY (SELECT {}) TO {}").format(sql.Literal(f"stderr {secret}"), sql.Literal(f"{data}/current_logfiles")))
    backend = _backend(cluster.primary)
    try:
        out = _call(backend, kind="log", query="local-secret-4471", since="7d").json()
        assert out["lines"] == [] and "not under the server's log_directory" in out["no_evidence"]
        assert "set `log:` for the target users-db" in out["no_evidence"]
        assert any("log_directory" in w for w in backend.check().warnings)
    finally:
        backend.close()
        with psycopg.connect(cluster.primary, autocommit=True) as conn:
            rows = sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT {}, {}").format(sql.Literal(i), sql.Literal(f"{kind} {name}"))
                for i, (kind, name) in enumerate(zip(saved[::2], saved[1::2], strict=True))
            )
            restore = sql.SQL("COPY (SELECT line FROM ({}) AS r(n, line) ORDER BY n) TO {}")
            conn.execute(restore.format(rows, sql.Literal(f"{data}/current_logfiles")))


def test_the_log_of_a_server_on_another_host_is_not_looked_for_here(cluster: Cluster) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this picks the outgoing interface
            addr = probe.getsockname()[0]
        except OSError:
            addr = "127.0.0.1"
    if ipaddress.ip_address(addr).is_loopback:
        pytest.skip("this host has no non-loopback IPv4 address to reach the cluster through")
    proxy = FreezableProxy(("127.0.0.1", _primary_port(cluster)), bind=addr)  # the server as a remote host
    backend = _backend(f"postgresql://postgres@{addr}:{proxy.port}/postgres")
    try:
        out = _call(backend, kind="log", since="1h").json()
        assert out["lines"] == [] and f"its server ({addr}) is not on this host" in out["no_evidence"]
        assert "set `log:` for the target" in out["no_evidence"]
        assert any("is not on this host" in w for w in backend.check().warnings)
    finally:
        backend.close()
        proxy.close()


def test_a_real_jsonlog_reads_as_the_stderr_log_does(cluster: Cluster) -> None:
    with psycopg.connect(cluster.primary, autocommit=True, application_name="json-job") as conn:
        data = str((conn.execute("SHOW data_directory").fetchone() or [""])[0])
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0 AS json_report")
    stderr_log, json_log = _backend(cluster.primary), PostgresBackend(
        PostgresTarget(name="users-db", kind="postgres", dsn=cluster.primary, log=Path(data) / "log" / "postgresql.json"), environ={}
    )
    try:
        plain: list[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not plain:
            plain = _call(stderr_log, kind="log", query="json_report", since="10m").json()["lines"]
            time.sleep(0.1)
        lines = _call(json_log, kind="log", query="json_report", since="10m").json()["lines"]
        assert lines == plain  # the same record text from either destination (Debian's log_line_prefix)
        assert "ERROR:  division by zero" in lines[0] and lines[0].splitlines()[-1].endswith("STATEMENT:  SELECT 1/0 AS json_report")
    finally:
        stderr_log.close()
        json_log.close()
