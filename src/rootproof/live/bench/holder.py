"""Holder processes: the clients that hold a live fault, and the rig's own database and Redis helpers.

`python -m rootproof.live.bench.holder <kind> --state FILE ...` runs one holder in a session of
its own (started and recorded by `faults.py` as `pids/fault_<scenario>.pid`, so `rootproof live
down` and the next preflight's stale-run cleanup stop it). It writes `--state` (JSON, atomically)
once the fault is held, then waits; SIGTERM or SIGINT make it roll back, close its connections
and exit 0.

- `row-lock`: one session (`--app`, e.g. `stock-recount`, as a batch job names itself) BEGINs,
  UPDATEs the `--skus` inventory rows and stays `idle in transaction`. State: `pid`,
  `backend_start`, `skus`, `application_name`.
- `deadlock`: two sessions (`--app`) lock two SKUs in opposite order, `--rounds` times,
  `--interval` seconds apart; PostgreSQL (deadlock_timeout 1 s) aborts one side with 40P01 each
  round and the holder logs the error as the sync job would, one JSON line to `--log` in the order
  service's record shape (`ts`, `level`, `service`, `message`, fields, `exception`). Then it stays
  alive with both sessions idle (not in a transaction) until SIGTERM. State: `deadlocks`,
  `pids`, `skus`, `aborted` (which side's SKU order was aborted, per round), `application_name`.
- `redis-clients`: opens idle Redis connections (named `--name`) one after another over
  `--ramp-s` seconds until Redis refuses one with `max number of clients reached`, then keeps
  taking every slot that frees until none has for `--settle-s` seconds (so no short-lived client
  keeps one), and holds them idle. State: `client_ids`, `idle_since`, `refused`.

The module is the benchmark's rig, not the harness: like the live backends it talks to
PostgreSQL and Redis through psycopg and redis-py (tests/test_layering.py allows it), and
`faults.py` and `recovery.py` use its helpers (`pg_rows`, `pg_exec`, `redis_connection`) for
their checks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import psycopg
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["KINDS", "RedisClient", "main", "pg_exec", "pg_rows", "redis_connection"]

KINDS = ("row-lock", "deadlock", "redis-clients")
LOCK_SQL = "UPDATE inventory SET stock = stock, updated_at = now() WHERE sku = %s"
"""What the holders' transactions do to an inventory row: touch it (and so lock it) without changing the stock."""


# -- the rig's helpers (also used by faults.py and recovery.py) -------------------------------


def pg_rows(
    dsn: str, sql: str, params: Sequence[Any] = (), *, timeout_s: float = 5.0
) -> list[dict[str, Any]]:
    """Rows of one query in a fresh autocommit session (as dicts), bounded by `timeout_s`."""
    with psycopg.connect(
        dsn, autocommit=True, connect_timeout=max(1, int(timeout_s)), application_name="rootproof-bench"
    ) as conn:
        conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
        cur = conn.execute(sql, params)  # type: ignore[arg-type]
        if cur.description is None:
            return []
        names = [d.name for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def pg_exec(
    dsn: str,
    statements: Sequence[tuple[str, Sequence[Any]]],
    *,
    timeout_s: float = 5.0,
    application_name: str = "rootproof-bench",
) -> None:
    """Run `statements` in one transaction of a fresh session and commit (psycopg errors propagate)."""
    with psycopg.connect(
        dsn, connect_timeout=max(1, int(timeout_s)), application_name=application_name
    ) as conn:
        conn.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
        for sql, params in statements:
            conn.execute(sql, params)  # type: ignore[arg-type]
        conn.commit()


class RedisClient:
    """One raw redis-py connection, without retries (a refusal is one refusal: redis-py would
    otherwise retry a refused connect on its own), RESP2, no CLIENT SETINFO."""

    def __init__(self, url: str, *, name: str | None = None, timeout_s: float = 2.0) -> None:
        kwargs = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
        self._conn = redis.Connection(  # type: ignore[no-untyped-call]
            host=kwargs.get("host", "127.0.0.1"),
            port=int(kwargs.get("port", 6379)),
            db=int(kwargs.get("db", 0)),
            username=kwargs.get("username"),
            password=kwargs.get("password"),
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            retry_on_error=[],
            client_name=name,
            driver_info=None,
            protocol=2,
        )
        self._conn.connect()  # type: ignore[no-untyped-call]

    def command(self, *args: Any) -> Any:
        """Send one command and read its reply (bytes decoded)."""
        self._conn.send_command(*args)  # type: ignore[no-untyped-call]
        reply = self._conn.read_response()
        return reply.decode() if isinstance(reply, bytes) else reply

    def close(self) -> None:
        self._conn.disconnect()  # type: ignore[no-untyped-call]


def redis_connection(url: str, *, name: str | None = None, timeout_s: float = 2.0) -> RedisClient:
    """A connected `RedisClient` (redis-py's errors propagate: `max number of clients reached`, …)."""
    return RedisClient(url, name=name, timeout_s=timeout_s)


# -- holders ------------------------------------------------------------------------------------


class _Stop(BaseException):  # not an Exception: no library handler may swallow it
    pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(state) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _close(conn: psycopg.Connection[Any]) -> None:
    """Roll back and close (a session the recovery terminated cannot roll back: just close it)."""
    with contextlib.suppress(psycopg.Error):
        conn.rollback()
    conn.close()


def _wait_forever() -> None:
    while True:
        time.sleep(3600)


def _row_lock(ns: argparse.Namespace) -> None:
    conn = psycopg.connect(ns.dsn, application_name=ns.app, connect_timeout=5)
    try:
        row = conn.execute(
            "SELECT pg_backend_pid(), backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
        assert row is not None
        for sku in ns.skus:
            conn.execute(LOCK_SQL, (sku,))
        _write_state(
            ns.state,
            {"pid": row[0], "backend_start": row[1].isoformat(), "skus": ns.skus, "application_name": ns.app},
        )
        _wait_forever()
    finally:
        _close(conn)


class _JsonLog:
    """The sync job's log: one JSON object per line, in the order service's record shape."""

    def __init__(self, path: Path, service: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.service = path, service
        self.lock = threading.Lock()

    def write(self, level: str, message: str, **fields: Any) -> None:
        doc: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": level,
            "service": self.service,
            "message": message,
        }
        doc.update(fields)
        with self.lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")


def _deadlock(ns: argparse.Namespace) -> None:
    first, second = ns.skus[0], ns.skus[1]
    log = _JsonLog(ns.log, ns.app)
    sessions = [psycopg.connect(ns.dsn, application_name=ns.app, connect_timeout=5) for _ in range(2)]
    try:
        pids = []
        for conn in sessions:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            pids.append(int(row[0]))
            conn.commit()
        orders = [(first, second), (second, first)]
        state: dict[str, Any] = {
            "deadlocks": 0,
            "pids": pids,
            "skus": [first, second],
            "aborted": [],
            "application_name": ns.app,
            "rounds": ns.rounds,
        }
        for round_no in range(1, ns.rounds + 1):
            batch = f"sync-{os.getpid()}-{round_no}"
            outcome: dict[int, BaseException | None] = {}
            barrier = threading.Barrier(2, timeout=10)

            def side(
                i: int,
                batch: str = batch,
                barrier: threading.Barrier = barrier,
                outcome: dict[int, BaseException | None] = outcome,
            ) -> None:
                conn, (a, b) = sessions[i], orders[i]
                try:
                    conn.execute(LOCK_SQL, (a,))
                    barrier.wait()
                    if i == 1:
                        time.sleep(0.2)  # side 0 waits first, so its deadlock check runs first
                    conn.execute(LOCK_SQL, (b,))
                    conn.commit()
                    outcome[i] = None
                    log.write("INFO", f"sync batch {batch} committed: {a}, {b}", batch=batch, skus=[a, b])
                except psycopg.Error as exc:
                    conn.rollback()
                    outcome[i] = exc
                    diag = exc.diag
                    log.write(
                        "ERROR",
                        f"sync batch {batch} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                        batch=batch,
                        skus=[a, b],
                        error=f"{type(exc).__module__}.{type(exc).__name__}",
                        sqlstate=diag.sqlstate,
                        detail=diag.message_detail,
                        exception="".join(traceback.format_exception(exc)).rstrip(),
                    )

            threads = [threading.Thread(target=side, args=(i,), daemon=True) for i in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            for i, err in outcome.items():
                if isinstance(err, psycopg.errors.DeadlockDetected):
                    state["deadlocks"] += 1
                    state["aborted"].append(list(orders[i]))
            _write_state(ns.state.with_name(ns.state.name + ".progress"), state)
            if round_no < ns.rounds:
                time.sleep(ns.interval)
        state["done"] = True
        _write_state(ns.state, state)
        _wait_forever()
    finally:
        for conn in sessions:
            _close(conn)


def _redis_clients(ns: argparse.Namespace) -> None:
    held: list[tuple[RedisClient, int]] = []
    refused, last = 0, time.time()
    try:
        pause = ns.ramp_s / max(1, ns.expect)
        while True:  # the leak: a new client per job, never closed
            try:
                conn = redis_connection(ns.url, name=ns.name)
                held.append((conn, int(conn.command("CLIENT", "ID"))))
                last = time.time()
            except redis.RedisError as exc:
                if "max number of clients reached" not in str(exc):
                    raise
                refused += 1
                break
            time.sleep(pause)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < ns.settle_s:  # take every slot a short-lived client frees
            try:
                conn = redis_connection(ns.url, name=ns.name)
                held.append((conn, int(conn.command("CLIENT", "ID"))))
                quiet_since, last = time.monotonic(), time.time()
            except redis.RedisError as exc:
                if "max number of clients reached" not in str(exc):
                    raise
                refused += 1
            time.sleep(0.05)
        _write_state(
            ns.state,
            {
                "client_ids": [cid for _, cid in held],
                "idle_since": last,
                "refused": refused,
                "name": ns.name,
            },
        )
        _wait_forever()
    finally:
        for conn, _ in held:
            conn.close()


def main(argv: list[str] | None = None) -> int:
    """A holder's command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m rootproof.live.bench.holder", description="Hold a live fault until SIGTERM."
    )
    sub = parser.add_subparsers(dest="kind", required=True)
    for kind in KINDS:
        p = sub.add_parser(kind)
        p.add_argument(
            "--state", type=Path, required=True, help="where to write the state (JSON) once the fault is held"
        )
        if kind in ("row-lock", "deadlock"):
            p.add_argument("--dsn", required=True)
            p.add_argument("--app", required=True, help="application_name of the sessions")
            p.add_argument("--skus", type=lambda s: s.split(","), required=True)
        if kind == "deadlock":
            p.add_argument("--rounds", type=int, default=3)
            p.add_argument("--interval", type=float, default=2.0)
            p.add_argument("--log", type=Path, required=True)
        if kind == "redis-clients":
            p.add_argument("--url", required=True)
            p.add_argument("--name", required=True, help="CLIENT SETNAME of each leaked client")
            p.add_argument("--ramp-s", type=float, default=8.0, help="spread the leak over about this long")
            p.add_argument(
                "--expect", type=int, default=64, help="about how many clients the ramp opens (maxclients)"
            )
            p.add_argument("--settle-s", type=float, default=3.0)
    ns = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    run = {"row-lock": _row_lock, "deadlock": _deadlock, "redis-clients": _redis_clients}[ns.kind]
    try:
        run(ns)
    except _Stop:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
