"""The PostgreSQL backend's connection discipline: connect parameters, a per-call watchdog, and
where the server's own log may be read from.

Nothing here is session state on the server. The startup `options` (read-only default, the
statement timeout) are sent because they are harmless where honoured, but a pooler in
transaction mode (PgBouncer's `ignore_startup_parameters = options`) drops them, and any
`SET`/`set_config(…, false)` would stay on a pooled server connection that then serves
other clients. So every call is one `BEGIN READ ONLY` transaction with `SET LOCAL
statement_timeout` (see `postgres.PostgresBackend`), prepared statements are off (a pooler
may switch server connections between transactions), and the client side is bounded by TCP
keepalives, `tcp_user_timeout` and the `Watchdog`.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import errors as pgerr

from rootproof.backends.live.postgres_sql import LOG_SQL

__all__ = ["Watchdog", "connect_params", "discover_log", "log_file", "masked_dsn", "on_this_host", "shut"]


def masked_dsn(params: Mapping[str, Any]) -> str:
    """A connection string for messages: `postgresql://user@host:port/dbname`, never a password."""
    user = params.get("user") or ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{params.get('dbname') or user or ''}"


def connect_params(params: Mapping[str, Any], password: str | None, timeout_s: float) -> dict[str, Any]:
    """The libpq parameters for one rootproof session on top of the target's DSN."""
    out = dict(params)
    if password is not None:
        out["password"] = password
    timeout_ms = max(1, int(timeout_s * 1000))
    own = f"-c default_transaction_read_only=on -c statement_timeout={timeout_ms}"
    out["options"] = f"{out['options']} {own}" if out.get("options") else own
    out["application_name"] = "rootproof"
    out["client_encoding"] = "UTF8"  # a SQL_ASCII database would otherwise hand back bytes
    out["connect_timeout"] = max(2, math.ceil(timeout_s))
    # A dead peer is noticed on the client side too: keepalives on an idle socket, and
    # tcp_user_timeout for data sent but never acknowledged (ignored on unix sockets).
    out.setdefault("keepalives", 1)
    out.setdefault("keepalives_idle", max(1, math.ceil(timeout_s)))
    out.setdefault("keepalives_interval", max(1, math.ceil(timeout_s / 3)))
    out.setdefault("keepalives_count", 3)
    out.setdefault("tcp_user_timeout", timeout_ms)
    return out


def shut(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket down (both ways) so a call blocked on it returns at once.

    Safe from another thread: the socket is shut through a duplicate descriptor; the
    connection itself is closed later by the thread that owns it.
    """
    try:
        fd = os.dup(conn.pgconn.socket)
    except (OSError, psycopg.Error):
        return
    try:
        with socket.socket(fileno=fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Watchdog:
    """Bounds one call on a connection: after `after_s` it sends a cancel request (waiting at
    most `cancel_s` for it) and shuts the socket down; `fired` tells the caller it happened."""

    def __init__(self, conn: psycopg.Connection[Any], *, after_s: float, cancel_s: float) -> None:
        self._conn = conn
        self._cancel_s = cancel_s
        self._mutex = threading.Lock()
        self._done = False
        self._finished = threading.Event()
        self.fired = False
        self._timer = threading.Timer(after_s, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._mutex:
            self._done = True
        self._timer.cancel()
        if self.fired:  # let it finish with the connection before the caller closes it
            self._finished.wait(self._cancel_s + 1)

    def _fire(self) -> None:
        with self._mutex:
            if self._done:
                return
            self.fired = True
        try:
            try:
                self._conn.cancel_safe(timeout=self._cancel_s)
            except Exception:  # a cancel that cannot be delivered is what a frozen link gives
                pass
            shut(self._conn)
        finally:
            self._finished.set()


def on_this_host(conn: psycopg.Connection[Any]) -> tuple[bool, str]:
    """Whether the server answered over a unix socket or a loopback address, and the host shown."""
    host = conn.info.host or ""
    if not host or host.startswith(("/", "@")):
        return True, host or "unix socket"
    try:
        addr = conn.info.hostaddr or host
    except psycopg.NotSupportedError:
        addr = host
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback, host
    except ValueError:
        return False, host


def log_file(row: Mapping[str, Any], target: str) -> tuple[Path | None, str]:
    """The server log named by `pg_current_logfile()` (a `postgres_sql.LOG_SQL` row) if it may be
    read: under data_directory/log_directory and a regular file; else None and why."""
    name, data = row.get("f"), Path(str(row.get("d") or ""))
    if not name:
        return None, (
            f"; the target {target} has no log configured and pg_current_logfile() names none"
            " (logging_collector is off): set `log:` for the target"
        )
    logdir = Path(str(row.get("ld") or "log"))
    logdir = logdir if logdir.is_absolute() else data / logdir
    path = Path(str(name))
    path = path if path.is_absolute() else data / path
    real, real_dir = Path(os.path.realpath(path)), Path(os.path.realpath(logdir))
    if not real.is_relative_to(real_dir) or real == real_dir:
        return None, f"; pg_current_logfile() names {path}, not under the server's log_directory {logdir}: set `log:` for the target {target}"
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        return None, f"; pg_current_logfile() names {path}, not readable on this host ({exc.strerror}): set `log:` for the target {target}"
    if not stat.S_ISREG(mode):
        return None, f"; pg_current_logfile() names {path}, not a regular file: set `log:` for the target {target}"
    return real, ""


def discover_log(conn: psycopg.Connection[Any], target: str) -> tuple[Path | None, str]:
    """The server log found through pg_current_logfile() on `conn` (inside a transaction; a
    refusal rolls back only its savepoint), when the server runs on this host; else None and why."""
    local, host = on_this_host(conn)
    if not local:
        return None, (
            f"; the target {target} has no log configured and its server ({host}) is not on this host:"
            " set `log:` for the target to read its server log"
        )
    try:
        with conn.transaction():
            row = conn.execute(LOG_SQL).fetchone() or {}
    except pgerr.InsufficientPrivilege:
        return None, f"; the target {target} has no log configured and may not call pg_current_logfile(): set `log:` for the target"
    return log_file(row if isinstance(row, Mapping) else {}, target)
