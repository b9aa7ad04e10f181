"""A private PostgreSQL 15: `initdb` and `pg_ctl` as the `postgres` OS user when rootproof runs as root.

The cluster lives in `<run>/postgres/data`, listens on 127.0.0.1 and a free port, with its unix
socket in `<run>/postgres/sock` and its log (logging collector, one file, no rotation) in
`<run>/postgres/log/postgresql.log`, prefixed `%m [%p] %q%u@%d %a ` (time, pid, user, database,
application) as the live backend's log reader expects. `log_lock_waits` with a 1 s
`deadlock_timeout` makes lock waits and deadlocks visible; `pg_stat_statements` is preloaded.
Durability is off (`fsync`, `full_page_writes`): the cluster is thrown away with the run.

Authentication: local (socket) connections are trusted, which is how the environment and the
fault injector reach the superuser (`superuser_dsn()`); TCP takes SCRAM passwords, kept in
`<run>/secrets/`. Roles: `rootproof` (the diagnosis: `pg_monitor`, read-only by default),
`orders_app` (the order service), `exporter` (prometheus-postgres-exporter: `pg_monitor`).

Database `orders`: `inventory` (20 SKUs with ample stock), `orders`, `order_items`.

The server is stopped with SIGINT (PostgreSQL's fast shutdown: SIGTERM is its smart mode, which
waits for every session to end).
"""

from __future__ import annotations

import os
import pwd
import secrets
import signal
import subprocess
import time
from pathlib import Path

from rootproof.errors import LiveEnvironmentError
from rootproof.live.components.base import Component, Health, Started, log_tail
from rootproof.live.layout import RunSpec
from rootproof.live.procs import ProcessRecord, read_stat

__all__ = ["ROLES", "PostgresComponent", "app_dsn", "postmaster_pid", "readonly_dsn", "superuser_dsn"]

ROLES = ("rootproof", "orders_app", "exporter")
"""The login roles made in the cluster, each with a password file `<run>/secrets/<role>.password`."""
SKUS = 20
"""Rows of `inventory` (`SKU-0001` … `SKU-0020`)."""

_SCHEMA = """
SET pg_stat_statements.track_utility = off;
CREATE ROLE rootproof LOGIN PASSWORD '{rootproof}' IN ROLE pg_monitor;
ALTER ROLE rootproof SET default_transaction_read_only = on;
CREATE ROLE orders_app LOGIN PASSWORD '{orders_app}';
CREATE ROLE exporter LOGIN PASSWORD '{exporter}' IN ROLE pg_monitor;
CREATE DATABASE orders;
\\connect orders
SET pg_stat_statements.track_utility = off;
CREATE EXTENSION pg_stat_statements;
CREATE TABLE inventory (
    sku text PRIMARY KEY,
    name text NOT NULL,
    price_cents integer NOT NULL CHECK (price_cents > 0),
    stock integer NOT NULL CHECK (stock >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE orders (
    id bigserial PRIMARY KEY,
    customer text NOT NULL,
    status text NOT NULL DEFAULT 'confirmed',
    total_cents integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE order_items (
    order_id bigint NOT NULL REFERENCES orders (id),
    sku text NOT NULL REFERENCES inventory (sku),
    qty integer NOT NULL CHECK (qty > 0),
    price_cents integer NOT NULL,
    PRIMARY KEY (order_id, sku)
);
INSERT INTO inventory (sku, name, price_cents, stock)
    SELECT 'SKU-' || lpad(i::text, 4, '0'), 'item ' || i, 100 + 7 * i, 1000000 FROM generate_series(1, {skus}) AS i;
GRANT SELECT, INSERT, UPDATE ON inventory, orders, order_items TO orders_app;
GRANT USAGE ON SEQUENCE orders_id_seq TO orders_app;
ANALYZE;
SELECT pg_stat_statements_reset();
"""


def superuser_dsn(spec: RunSpec, dbname: str = "orders") -> str:
    """libpq key=value DSN of the superuser over the run's unix socket (no password: local trust).
    For the environment and the fault injector only, never for the diagnosis."""
    return f"host={spec.paths.pg_sock} port={spec.port('postgres')} dbname={dbname} user=postgres"


def readonly_dsn(spec: RunSpec) -> str:
    """The diagnosis' DSN (role `rootproof`, password in `<run>/secrets/rootproof.password`)."""
    return f"postgresql://rootproof@127.0.0.1:{spec.port('postgres')}/orders"


def app_dsn(spec: RunSpec) -> str:
    """The order service's SQLAlchemy URL (role `orders_app`; password from its file)."""
    return f"postgresql+psycopg://orders_app@127.0.0.1:{spec.port('postgres')}/orders"


def _as_pg_user(spec: RunSpec, argv: list[str]) -> list[str]:
    if spec.pg_os_user is None:
        return argv
    return [spec.binaries["runuser"], "-u", spec.pg_os_user, "--", *argv]


def _run(spec: RunSpec, what: str, argv: list[str], *, stdin: str | None = None, timeout_s: float = 120) -> None:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, cwd=spec.paths.pg)
    except subprocess.TimeoutExpired as exc:
        raise LiveEnvironmentError("postgres", f"{what} did not finish in {timeout_s:g} s") from exc
    except OSError as exc:
        raise LiveEnvironmentError("postgres", f"{what} could not run: {exc}") from exc
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise LiveEnvironmentError("postgres", f"{what} failed (exit {done.returncode}): {tail}")


def _conf(spec: RunSpec) -> str:
    p = spec.paths
    return f"""
# rootproof live (run {spec.run_id})
port = {spec.port('postgres')}
listen_addresses = '127.0.0.1'
unix_socket_directories = '{p.pg_sock}'
max_connections = {spec.config.pg_max_connections}
shared_buffers = '32MB'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_preload_libraries = 'pg_stat_statements'
logging_collector = on
log_destination = 'stderr'
log_directory = '{p.pg_log_dir}'
log_filename = 'postgresql.log'
log_file_mode = 0640
log_rotation_age = 0
log_rotation_size = 0
log_line_prefix = '%m [%p] %q%u@%d %a '
log_timezone = 'UTC'
timezone = 'UTC'
log_lock_waits = on
deadlock_timeout = '1s'
"""


class PostgresComponent(Component):
    """PostgreSQL 15 from /usr/lib/postgresql/15/bin."""

    name = "postgres"
    binaries = ("initdb", "pg_ctl", "pg_isready", "psql")
    stop_signal = signal.SIGINT

    def log_file(self, spec: RunSpec) -> Path:
        return spec.paths.pg_log if spec.paths.pg_log.exists() else spec.paths.pg / "startup.log"

    def prepare(self, spec: RunSpec) -> None:
        p = spec.paths
        for folder in (p.pg, p.pg_log_dir, p.pg_sock):
            folder.mkdir(parents=True, exist_ok=True)
        if spec.pg_os_user is not None:
            user = pwd.getpwnam(spec.pg_os_user)
            for folder in (p.pg, p.pg_log_dir, p.pg_sock):
                os.chown(folder, user.pw_uid, user.pw_gid)
        for role in ROLES:
            path = p.secret(role)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(secrets.token_urlsafe(24) + "\n")
        argv = [spec.binaries["initdb"], "-D", str(p.pg_data), "-U", "postgres", "-E", "UTF8", "--locale=C"]
        argv += ["--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"]
        _run(spec, "initdb", _as_pg_user(spec, argv))
        with (p.pg_data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write(_conf(spec))

    def spawn(self, spec: RunSpec) -> Started:
        p = spec.paths
        before = postmaster_pid(p.pg_data)
        argv = [spec.binaries["pg_ctl"], "-D", str(p.pg_data), "-l", str(p.pg / "startup.log"), "-W", "start"]
        _run(spec, "pg_ctl start", _as_pg_user(spec, argv), timeout_s=30)
        # pg_ctl has forked the postmaster (in a session of its own) and returned: its pid is in
        # postmaster.pid as soon as it has started.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            pid = postmaster_pid(p.pg_data)
            if pid is not None and pid != before:
                record = ProcessRecord.of("postgres", pid, argv0="postgres")
                if record is not None:
                    return Started(record=record)
            time.sleep(0.02)
        raise LiveEnvironmentError("postgres", f"no postmaster started (see {p.pg / 'startup.log'}: {log_tail(p.pg / 'startup.log')})")

    def health(self, spec: RunSpec) -> Health:
        argv = [spec.binaries["pg_isready"], "-h", str(spec.paths.pg_sock), "-p", str(spec.port("postgres")), "-U", "postgres", "-d", "postgres", "-t", "2"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Health(ok=False, detail=f"pg_isready: {exc}")
        answer = (done.stdout or done.stderr).strip()
        return Health(ok=done.returncode == 0, detail=f"pg_isready: {answer.rsplit(' - ', 1)[-1] or done.returncode}")

    def after_ready(self, spec: RunSpec) -> None:
        passwords = {role: spec.paths.secret(role).read_text(encoding="utf-8").strip() for role in ROLES}
        sql = _SCHEMA.format(skus=SKUS, **passwords)
        argv = [spec.binaries["psql"], "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(spec.paths.pg_sock)]
        argv += ["-p", str(spec.port("postgres")), "-U", "postgres", "-d", "postgres", "-f", "-"]
        _run(spec, "creating the orders schema and roles (psql)", argv, stdin=sql)


def postmaster_pid(data: Path) -> int | None:
    """The pid of the postmaster running on data folder `data` (from its postmaster.pid, checked:
    a live process working in that folder), None when there is none."""
    pidfile = data / "postmaster.pid"
    try:
        first = pidfile.read_text(encoding="utf-8").splitlines()[0]
        pid = int(first)
    except (OSError, IndexError, ValueError):
        return None
    st = read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        return None
    try:
        if os.readlink(f"/proc/{pid}/cwd") != str(data.resolve()):
            return None
    except OSError:
        return None
    return pid
