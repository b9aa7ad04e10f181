"""Helpers for the live PostgreSQL backend tests: a private database, a real row lock, a log file,
a freezable TCP relay.

The server is `ROOTPROOF_TEST_PG_URL` (default `postgresql+psycopg://postgres@127.0.0.1:5432/test`,
as in conftest.py); without it the tests skip, or fail under `ROOTPROOF_REQUIRE_SERVICES=1`.
"""

from __future__ import annotations

import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.services import DEFAULT_PG_URL, unavailable

SERVER = os.environ.get("ROOTPROOF_TEST_PG_URL", DEFAULT_PG_URL).replace("postgresql+psycopg://", "postgresql://")


@contextmanager
def private_database() -> Iterator[str]:
    """Create `rootproof_test_<random>` with a table `merchant_balances`, yield its conninfo, drop it."""
    name = f"rootproof_test_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {} ENCODING 'UTF8' TEMPLATE template0").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {SERVER} unreachable or refused CREATE DATABASE: {exc}")
    dsn = make_conninfo(SERVER, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE merchant_balances (merchant_id int PRIMARY KEY, pending_cents bigint NOT NULL)")
            conn.execute("INSERT INTO merchant_balances VALUES (4471, 0), (4472, 0)")
        yield dsn
    finally:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@dataclass
class RowLock:
    """A holder idle in transaction after an UPDATE, and waiters blocked on the same row (a queue)."""

    holder_pid: int
    waiter_pids: list[int]
    holder_query: str
    errors: list[BaseException] = field(default_factory=list)

    @property
    def waiter_pid(self) -> int:
        """The first waiter (it waits on the holder's transaction; later ones on its tuple lock)."""
        return self.waiter_pids[0]


HOLDER_SQL = "UPDATE merchant_balances SET pending_cents = pending_cents - 125000 WHERE merchant_id = 4471"
WAITER_SQL = "UPDATE merchant_balances SET pending_cents = pending_cents + 100 WHERE merchant_id = 4471"


@contextmanager
def row_lock(dsn: str, waiters: int = 1) -> Iterator[RowLock]:
    """Hold a real row lock (holder: `order-admin-console`) with `waiters` sessions (`order-service`)
    blocked on it, each started once the one before waits."""
    holder = psycopg.connect(dsn, application_name="order-admin-console")
    conns = [psycopg.connect(dsn, application_name="order-service", autocommit=True) for _ in range(waiters)]
    lock = RowLock(holder_pid=holder.info.backend_pid, waiter_pids=[c.info.backend_pid for c in conns], holder_query=HOLDER_SQL)

    def wait(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        try:
            conn.execute("SET statement_timeout = '60s'")
            conn.execute(WAITER_SQL)
        except BaseException as exc:  # reported by the test
            lock.errors.append(exc)

    threads = [threading.Thread(target=wait, args=(c,), daemon=True) for c in conns]
    try:
        holder.execute(HOLDER_SQL)
        with psycopg.connect(dsn, autocommit=True) as probe:
            for pid, thread in zip(lock.waiter_pids, threads, strict=True):
                thread.start()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    row = probe.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                    if row and row[0] == "Lock":
                        break
                    time.sleep(0.05)
                else:
                    raise AssertionError(f"waiter {pid} never blocked on the row lock")
        yield lock
    finally:
        holder.rollback()
        for thread in threads:
            thread.join(timeout=10)
        holder.close()
        for c in conns:
            c.close()


def write_server_log(path: Path, now: datetime | None = None, db: str = "orders") -> list[str]:
    """A server log in PostgreSQL 15's own format (`%m [%p] %q%u@%d `), the last lines minutes
    before `now`; its sessions are in database `db` (a target reads its own database's records)."""
    now = now or datetime.now(UTC)

    def ts(minutes: float) -> str:
        return (now - timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"

    old, t1, t2, t3 = ts(120), ts(9), ts(5), ts(2)
    lines = [
        f"{old} [2748] LOG:  checkpoint starting: time",
        f"{t1} [2806] app@{db} LOG:  process 2806 still waiting for ShareLock on transaction 728 after 1000.152 ms",
        f"{t1} [2806] app@{db} DETAIL:  Process holding the lock: 2802. Wait queue: 2806.",
        f'{t1} [2806] app@{db} CONTEXT:  while updating tuple (0,1) in relation "merchant_balances"',
        f"{t1} [2806] app@{db} STATEMENT:  {WAITER_SQL}",
        f"{t2} [2851] app@{db} ERROR:  deadlock detected",
        f"{t2} [2851] app@{db} DETAIL:  Process 2851 waits for ShareLock on transaction 731; blocked by process 2857.",
        "\tProcess 2857 waits for ShareLock on transaction 730; blocked by process 2851.",
        "\tProcess 2851: UPDATE t SET v=v+1 WHERE id=2;",
        "\tProcess 2857: UPDATE t SET v=v+1 WHERE id=1;",
        f"{t2} [2851] app@{db} HINT:  See server log for query details.",
        f'{t2} [2851] app@{db} CONTEXT:  while updating tuple (0,2) in relation "t"',
        f"{t2} [2851] app@{db} STATEMENT:  UPDATE t SET v=v+1 WHERE id=2;",
        f"{t3} [2972] app@{db} FATAL:  remaining connection slots are reserved for non-replication superuser connections",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


class FreezableProxy:
    """A TCP relay on `bind` to `upstream` that can be frozen: while `frozen` is set it accepts
    connections and holds every byte (a server or link that stops answering, sockets still open)."""

    def __init__(self, upstream: tuple[str, int], bind: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._server = socket.create_server((bind, 0))
        self.host, self.port = bind, int(self._server.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                return
            self._sockets += [client, up]
            threading.Thread(target=self._pump, args=(client, up), daemon=True).start()

    def _pump(self, client: socket.socket, up: socket.socket) -> None:
        peers = {client: up, up: client}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.05)
                if self.frozen.is_set():
                    continue
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            client.close()
            up.close()

    def close(self) -> None:
        """Stop relaying and close every socket."""
        self._stop.set()
        self._server.close()
        for sock in self._sockets:
            sock.close()
