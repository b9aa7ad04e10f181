"""The live PostgreSQL backend: `inspect_postgres`, every call one read-only transaction.

One connection per target, opened lazily, reopened after a failure, guarded by a lock waited
for at most one call's bound ("busy" after that). Each call is `BEGIN READ ONLY` with `SET
LOCAL statement_timeout`, `transaction_read_only` checked inside it first: no session state,
so behind a pooler in transaction mode nothing leaks to other clients. The startup `options`
are still sent (`targets check` warns when they did not take effect). Connect parameters, the
watchdog and log discovery are in `postgres_session`, the SQL in `postgres_sql`, the log in
`postgres_log`. Results have the snapshot backend's shapes, ref texts and no-evidence wording.

Errors are mapped here: a failed connect (refused, authentication, timeout), a statement
timeout, a call past its bound or a lost connection is `BackendUnavailable`; an answered but
failed statement (missing view or function, privileges) or an unreadable log file is
`BackendQueryError`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from pydantic import BaseModel, ValidationError

from rootproof.backends.live import postgres_sql as q
from rootproof.backends.live.postgres_log import (
    in_window,
    of_database,
    open_regular,
    parse_records,
    read_tail,
    zone_of,
)
from rootproof.backends.live.postgres_session import Watchdog, connect_params, discover_log, masked_dsn, shut
from rootproof.backends.live.refusal import refusal_answer, refused_result
from rootproof.backends.query import TimeWindow, order_matches, parse_query
from rootproof.errors import BackendError, BackendQueryError, BackendRefused, BackendUnavailable, ConfigError
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import PostgresTarget, TargetCheck, secret_of
from rootproof.tools.base import BackendResult, InspectPostgresArgs, window_start
from rootproof.tools.refs import canonical_json, fmt_value
from rootproof.tools.results import LinesResult, RowsResult, SettingsResult, Window

__all__ = ["PostgresBackend", "masked_dsn"]

_TOOL = "inspect_postgres"
_ROW_SQL = {"activity": q.ACTIVITY, "locks": q.LOCKS, "database_stats": q.DATABASE_STATS, **q.LOAD_BY}
_MIN_SCRUB = 4
"""Shorter secrets are not replaced in messages (a one-letter password would garble every word)."""
_T = TypeVar("_T")
_Conn = psycopg.Connection[dict[str, Any]]


class _NotReadOnly(BackendUnavailable):
    """The session could not be made read-only: nothing is run on it."""


class PostgresBackend:
    """`inspect_postgres` on one PostgreSQL target, read-only."""

    system: ClassVar[str] = "postgres"
    tools: ClassVar[tuple[str, ...]] = ("inspect_postgres",)

    def __init__(self, target: PostgresTarget, *, environ: Mapping[str, str]) -> None:
        self._target = target
        self._password = secret_of(target, environ)
        try:
            self._params: dict[str, Any] = conninfo_to_dict(target.dsn)
        except psycopg.ProgrammingError:
            raise ConfigError(f"targets: {target.name}: dsn: not a libpq URL or key=value string") from None
        self._secrets = [str(s) for s in (self._password, self._params.get("password")) if s and len(str(s)) >= _MIN_SCRUB]
        self._shown = masked_dsn(self._params)
        self._timeout_ms = max(1, int(target.timeout_s * 1000))
        self._deadline_s = target.timeout_s + min(5.0, max(1.0, target.timeout_s / 2))  # the watchdog's
        self._cancel_s = min(2.0, max(0.5, target.timeout_s / 2))
        self._lock_wait_s = self._deadline_s + self._cancel_s + 1
        self._lock = threading.Lock()
        self._conn: _Conn | None = None
        self._active: _Conn | None = None  # the connection of the transaction in progress
        self._startup_ok: bool | None = None  # did the startup options take effect (last seen)
        self._log_tz: tzinfo = UTC
        self._found_log: tuple[Path | None, str] | None = None  # discovered (path, why none)

    # -- the session -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(str(secret), "***")
        return " ".join(text.split())

    def _where(self) -> str:
        return f"postgres target {self._target.name} ({self._shown})"

    def _connect(self) -> _Conn:
        params = connect_params(self._params, self._password, self._target.timeout_s)
        try:
            conn = psycopg.connect(autocommit=False, row_factory=dict_row, prepare_threshold=None, **params)
        except psycopg.Error as exc:
            reason = self._scrub(str(exc))
            answer = refusal_answer(reason)
            if answer is not None:  # a connection limit said no: evidence (`call` returns it as a result)
                raise BackendRefused(f"{self._where()}: refused: {reason}", answer=answer) from None
            raise BackendUnavailable(f"{self._where()}: cannot connect: {reason}") from None
        conn.read_only = True  # every transaction starts with BEGIN READ ONLY
        return conn

    def _begin(self, conn: _Conn) -> None:
        """First in every transaction: the local statement timeout, then read-only and the timeout must hold."""
        conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(self._timeout_ms)))
        row = conn.execute(q.SESSION_SQL).fetchone() or {}
        if row.get("ro") != "on":
            raise _NotReadOnly(f"{self._where()}: transaction not read-only (transaction_read_only={row.get('ro')})")
        want = str(self._timeout_ms)
        if row.get("st") != want:
            raise _NotReadOnly(f"{self._where()}: statement_timeout did not take ({row.get('st')} ms, wanted {want})")
        self._startup_ok = row.get("dro") == "on" and row.get("st0") == want
        self._log_tz = zone_of(str(row.get("tz") or ""))

    def _run(self, work: Callable[[], _T]) -> _T:
        """`work` inside one read-only transaction on the session, bounded by the watchdog.
        Call with the lock held; driver errors come out mapped."""
        conn = self._session()
        dog = Watchdog(conn, after_s=self._deadline_s, cancel_s=self._cancel_s)
        try:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()  # never continue a transaction this call did not begin
            with dog, conn.transaction():
                self._begin(conn)
                self._active = conn
                return work()
        except psycopg.Error as exc:
            if dog.fired:  # the connection is dropped below
                raise BackendUnavailable(
                    f"{self._where()}: no answer within {self._deadline_s:g} s; the call was cancelled and its connection closed"
                ) from None
            raise self._mapped(exc) from None
        finally:
            self._active = None
            if dog.fired:
                self._drop()

    def _tx(self) -> _Conn:
        """The connection of the transaction in progress (statements run only inside `_run`)."""
        if self._active is None:
            raise BackendError("postgres backend: a statement outside a call's transaction")
        return self._active

    def _session(self) -> _Conn:
        """The open session (connects on first use and after a failure). Call with the lock held."""
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self._drop()
        if self._conn is None:
            self._conn = self._connect()
            self._found_log = None
        return self._conn

    def _acquire(self) -> None:
        if not self._lock.acquire(timeout=self._lock_wait_s):
            raise BackendUnavailable(f"{self._where()}: busy: an earlier call on this target has not returned")

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def _mapped(self, exc: psycopg.Error) -> BackendError:
        """The rootproof error for a driver error raised by a statement."""
        reason = self._scrub(str(exc)) or type(exc).__name__
        if isinstance(exc, pgerr.QueryCanceled):
            return BackendUnavailable(f"{self._where()}: statement timed out after {self._target.timeout_s:g} s: {reason}")
        state = getattr(exc, "sqlstate", None) or ""
        lost = isinstance(exc, psycopg.InterfaceError) or (
            isinstance(exc, psycopg.OperationalError) and not (state.startswith("55") and state != "55P03")
        )
        if lost or self._conn is None or self._conn.closed or self._conn.broken:
            self._drop()
            return BackendUnavailable(f"{self._where()}: {reason}")
        return BackendQueryError(f"{self._where()}: {type(exc).__name__}: {reason}")

    def _fetch(self, statement: str | sql.Composed, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        rows = self._tx().execute(statement, dict(params)).fetchall()
        return [q.plain_row(r) for r in rows]

    # -- the seam --------------------------------------------------------------------------------

    def call(self, tool: str, args: BaseModel, *, now: datetime, run_id: str) -> BackendResult:
        """Answer one `inspect_postgres` call; raises BackendUnavailable / BackendQueryError."""
        if tool != _TOOL:
            raise BackendError(f"the postgres backend serves inspect_postgres only, not {tool!r}")
        if not isinstance(args, InspectPostgresArgs):
            try:
                args = InspectPostgresArgs.model_validate(args.model_dump())
            except ValidationError as exc:
                raise BackendError(f"{tool}: arguments are not InspectPostgresArgs: {exc}") from exc
        if now.tzinfo is None:
            raise BackendError(f"{tool}: the run's clock must be timezone-aware (got {now.isoformat()})")
        now = now.astimezone(UTC)
        started = time.monotonic()
        self._acquire()
        try:
            out, scanned, nbytes = self._answer(args, now)
        except BackendRefused as exc:
            # A refusal is evidence: the server's answer is the call's (citable) result.
            shape = {"log": "lines", "settings": "settings"}.get(args.kind, "rows")
            out, scanned, nbytes = refused_result(args.kind, shape, exc.answer, now=now, since=args.since), 0, 0  # type: ignore[assignment]
        finally:
            self._lock.release()
        details: dict[str, Any] = {
            "target": self._target.name,
            "kind": args.kind,
            "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
            "bytes_read": nbytes,
            "lines_scanned" if args.kind == "log" else "rows_scanned": scanned,
        }
        data = out.to_json()
        details["total_matches"] = data.get("total_matches", len(data.get("settings") or {}))
        details["returned"] = len(data.get("rows") or data.get("lines") or data.get("settings") or [])
        return BackendResult(result=out, data_source=f"live:{self._target.name}", details=details)

    def _answer(self, args: InspectPostgresArgs, now: datetime) -> tuple[RowsResult | LinesResult | SettingsResult, int, int]:
        if args.kind == "log":
            return self._log(args, now)
        if args.kind == "settings":
            return self._run(lambda: self._settings(args, now))
        return self._run(lambda: self._row_kind(args, now))

    def _row_kind(self, args: InspectPostgresArgs, now: datetime) -> tuple[RowsResult, int, int]:
        note = ""
        if args.kind in _ROW_SQL:
            rows = self._fetch(_ROW_SQL[args.kind], {"cap": q.MAX_ROWS, "qmax": q.MAX_QUERY_CHARS, "db": self._own_database()})
            if args.kind == "locks" and not rows:
                note = "; no session waits on a lock"
            elif args.kind in q.LOAD_BY and not rows:
                note = "; no session but rootproof's own is active or in a transaction (no database load now)"
        elif args.kind == "replication":
            rows, note = self._replication()
        else:
            rows, note = self._top_queries()
        return self._rows(args, now, rows, note)

    @staticmethod
    def _no_evidence(args: InspectPostgresArgs, filters: str, where: str) -> str:
        return f"{_TOOL} found no match for query '{args.query}' ({filters}) {where}"

    def _rows(self, args: InspectPostgresArgs, now: datetime, rows: list[dict[str, Any]], note: str) -> tuple[RowsResult, int, int]:
        query = parse_query(args.query)
        texts = [canonical_json(r) for r in rows]
        matched = [r for r, t in zip(rows, texts, strict=True) if query.empty or query.score(t)]
        page = matched[args.offset : args.offset + args.limit]
        no_evidence = None
        if not page:
            filters = f"kind={args.kind}" + (f"; {len(matched)} matches, none at offset {args.offset}" if matched else "") + note
            no_evidence = self._no_evidence(args, filters, f"as of {format_timestamp(now)}")
        out = RowsResult(kind=args.kind, total_matches=len(matched), rows=page, no_evidence=no_evidence)
        return out, len(rows), sum(len(t.encode()) for t in texts)

    def _settings(self, args: InspectPostgresArgs, now: datetime) -> tuple[SettingsResult, int, int]:
        rows = self._fetch(q.SETTINGS_SQL, {"names": list(q.SETTINGS), "cap": len(q.SETTINGS)})
        query = parse_query(args.query)
        values = {str(r["name"]): r["value"] for r in rows}
        if "statement_timeout" in values:
            values["statement_timeout"] = self._server_statement_timeout()
        chosen = {k: v for k, v in values.items() if query.empty or query.score(f"{k} = {fmt_value(v)}")}
        no_evidence = None
        if not chosen:
            no_evidence = self._no_evidence(args, f"kind={args.kind}", f"as of {format_timestamp(now)}")
        size = sum(len(k) + len(str(v)) for k, v in values.items())
        return SettingsResult(kind="settings", settings=chosen, no_evidence=no_evidence), len(rows), size

    def _server_statement_timeout(self) -> Any:
        """statement_timeout as other sessions of this database get it (ours is the target's timeout):
        the database's `ALTER DATABASE … SET`, else the configuration file (if readable), else the default."""
        conn = self._tx()
        row = conn.execute(q.STATEMENT_TIMEOUT_DB).fetchone()
        if row is None:
            try:
                with conn.transaction():  # a savepoint: the refusal must not abort the call's transaction
                    row = conn.execute(q.STATEMENT_TIMEOUT_FILE).fetchone()
            except pgerr.InsufficientPrivilege:
                row = None
        if row is None:
            row = conn.execute(q.STATEMENT_TIMEOUT_BOOT).fetchone()
        return (row or {}).get("value")

    def _replication(self) -> tuple[list[dict[str, Any]], str]:
        standby = self._tx().execute("SELECT pg_is_in_recovery() AS r").fetchone() or {}
        if standby.get("r"):
            return self._fetch(q.REPLICATION_STANDBY, {"cap": q.MAX_ROWS}), ""
        rows = self._fetch(q.REPLICATION_PRIMARY, {"cap": q.MAX_ROWS})
        return rows, "" if rows else "; the server is a primary with no standby connected (pg_stat_replication is empty)"

    def _top_queries(self) -> tuple[list[dict[str, Any]], str]:
        conn = self._tx()
        ext = conn.execute(
            "SELECT n.nspname, current_database() AS db FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            " WHERE e.extname = 'pg_stat_statements' LIMIT 1"
        ).fetchone()
        if ext is None:
            db = (conn.execute("SELECT current_database() AS db").fetchone() or {}).get("db")
            return [], (
                f"; pg_stat_statements is not installed in database {db} "
                "(CREATE EXTENSION pg_stat_statements, with pg_stat_statements in shared_preload_libraries)"
            )
        statement = sql.SQL(q.TOP_QUERIES).format(schema=sql.Identifier(str(ext["nspname"])))
        try:
            with conn.transaction():
                rows = self._fetch(statement, {"cap": q.MAX_ROWS, "qmax": q.MAX_QUERY_CHARS})
        except pgerr.ObjectNotInPrerequisiteState:
            return [], (
                f"; pg_stat_statements is installed in database {ext['db']} but not loaded "
                "(add it to shared_preload_libraries and restart PostgreSQL)"
            )
        return rows, ""

    # -- the server log ----------------------------------------------------------------------------

    def _log_path(self) -> tuple[Path | None, str]:
        """The log file (or None and why): the target's `log`, else what `discover_log` finds (a local
        server's regular file under its log_directory). Inside `_run` unless the target has `log`."""
        if self._target.log is not None:
            return self._target.log, ""
        if self._found_log is None:
            self._found_log = discover_log(self._tx(), self._target.name)
        return self._found_log

    def _own_database(self) -> str | None:
        """Whose sessions, locks and log records `kind=activity`, `locks` and `log` read: the
        target's database (its `dsn`'s dbname, else its user, as libpq defaults), or every
        database's (None) when that is a maintenance database (`postgres`, `template0`,
        `template1`): a monitoring connection watches the whole server."""
        name = self._params.get("dbname") or self._params.get("user")
        return None if not name or name in ("postgres", "template0", "template1") else str(name)

    def _log(self, args: InspectPostgresArgs, now: datetime) -> tuple[LinesResult, int, int]:
        window = TimeWindow(start=window_start(now, args.since), end=now)
        path, why = self._log_path() if self._target.log is not None else self._run(self._log_path)
        records = []
        nbytes = 0
        if path is not None:
            try:
                text, nbytes, at_start = read_tail(path, max_bytes=self._target.max_bytes, not_before=window.start, default_tz=self._log_tz)
            except OSError as exc:
                raise BackendQueryError(f"{self._where()}: cannot read the server log {path}: {exc.strerror or exc}") from None
            except BackendQueryError as exc:
                raise BackendQueryError(f"{self._where()}: cannot read the server log: {exc}") from None
            records = parse_records(text, at_start=at_start, default_tz=self._log_tz)
        records, others = of_database(records, self._own_database())
        candidates, undated = in_window(records, window, parse_query(args.query))
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        no_evidence = None
        if not page:
            filters = f"kind=log, since={args.since}" + (
                f"; {len(ordered)} matches, none at offset {args.offset}" if ordered else ""
            )
            if undated:
                filters += f"; {undated} records without a timestamp were left out (log_line_prefix lacks %m or %t)"
            if others:
                filters += f"; {others} record{'s' if others != 1 else ''} of other databases on this server left out"
            no_evidence = self._no_evidence(args, filters + why, f"in window {window.text()}")
        win = window.as_dict()
        out = LinesResult(
            kind="log", window=Window(from_=win["from"], to=win["to"]), total_matches=len(ordered), lines=page, no_evidence=no_evidence
        )
        return out, len(records), nbytes

    # -- targets check -----------------------------------------------------------------------------

    def check(self) -> TargetCheck:
        """Connect, verify a transaction is read-only, and list what is missing. Never raises."""
        name, kind = self._target.name, "postgres"
        try:
            self._acquire()
        except BackendUnavailable as exc:
            return TargetCheck(name=name, kind=kind, usable=False, problem=str(exc))
        try:
            warnings, path = self._run(self._warnings)
        except _NotReadOnly as exc:
            return TargetCheck(name=name, kind=kind, usable=False, problem=str(exc))
        except BackendUnavailable as exc:
            text = str(exc)
            what = "authentication failed" if "authentication failed" in text else "unreachable"
            return TargetCheck(name=name, kind=kind, usable=False, problem=f"{what}: {text}")
        except Exception as exc:  # a check never raises
            return TargetCheck(name=name, kind=kind, usable=False, problem=f"{type(exc).__name__}: {self._scrub(str(exc))}")
        finally:
            self._lock.release()
        if path is not None:
            try:
                open_regular(path).close()
            except OSError as exc:
                warnings.append(f"the server log {path} is not readable: {exc.strerror or exc}")
            except BackendQueryError as exc:
                warnings.append(f"the server log {exc}: kind=log cannot read it")
        return TargetCheck(name=name, kind=kind, usable=True, warnings=warnings)

    def _warnings(self) -> tuple[list[str], Path | None]:
        warnings: list[str] = []
        if self._startup_ok is False:
            warnings.append(
                "the startup options (default_transaction_read_only, statement_timeout) did not take effect"
                " (behind a pooler?): rootproof still runs every call in a read-only transaction with a local statement_timeout"
            )
        warnings += q.check_warnings(self._tx().execute(q.CHECK_SQL).fetchone() or {})
        path, why = self._log_path()
        if path is None:
            warnings.append(why.lstrip("; ") + ": kind=log finds nothing")
        return warnings, path

    def close(self) -> None:
        """Close the session; idempotent. A call still in progress has its socket shut instead."""
        if self._lock.acquire(timeout=self._lock_wait_s):
            try:
                self._drop()
            finally:
                self._lock.release()
        elif self._conn is not None:
            shut(self._conn)
