"""The live PostgreSQL backend: `inspect_postgres` over one read-only session.

One connection per target, opened lazily, guarded by a lock and reopened after a failure. It
is opened with `options='-c default_transaction_read_only=on -c statement_timeout=…'`,
`connect_timeout` and `application_name=rootproof`, in autocommit (no transaction is ever
left open), and both settings are verified before the first statement. What each kind reads is
in `postgres_sql` (SQL) and `postgres_log` (the server log). Results have the snapshot
backend's shapes, ref texts, query semantics and no-evidence wording, with
`data_source: live:<target>`.

Errors are mapped here: a failed connect (refused, authentication, timeout), a statement
timeout or a lost connection is `BackendUnavailable`; an answered but failed statement
(missing view or function, privileges) or an unreadable log file is `BackendQueryError`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from pydantic import BaseModel, ValidationError

from rootproof.backends.live import postgres_sql as q
from rootproof.backends.live.postgres_log import parse_records, read_tail, zone_of
from rootproof.backends.query import TimeWindow, order_matches, parse_query
from rootproof.errors import BackendError, BackendQueryError, BackendUnavailable, ConfigError
from rootproof.scenarios.types import format_timestamp
from rootproof.targets import PostgresTarget, TargetCheck, secret_of
from rootproof.tools.base import BackendResult, InspectPostgresArgs, window_start
from rootproof.tools.refs import canonical_json, fmt_value
from rootproof.tools.results import LinesResult, RowsResult, SettingsResult, Window

__all__ = ["PostgresBackend", "masked_dsn"]

_TOOL = "inspect_postgres"
_ROW_SQL = {"activity": q.ACTIVITY, "locks": q.LOCKS, "database_stats": q.DATABASE_STATS}


class _NotReadOnly(BackendUnavailable):
    """The session could not be made read-only: nothing is run on it."""


def masked_dsn(params: Mapping[str, Any]) -> str:
    """A connection string for messages: `postgresql://user@host:port/dbname`, never a password."""
    user = params.get("user") or ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{params.get('dbname') or user or ''}"


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
        self._secrets = [s for s in (self._password, self._params.get("password")) if s]
        self._shown = masked_dsn(self._params)
        self._timeout_ms = max(1, int(target.timeout_s * 1000))
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._log_tz: tzinfo = UTC
        self._found_log: tuple[Path | None, str] | None = None  # discovered (path, why none)

    # -- the session -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(str(secret), "***")
        return " ".join(text.split())

    def _where(self) -> str:
        return f"postgres target {self._target.name} ({self._shown})"

    def _connect(self) -> psycopg.Connection[dict[str, Any]]:
        params = dict(self._params)
        if self._password is not None:
            params["password"] = self._password
        own = f"-c default_transaction_read_only=on -c statement_timeout={self._timeout_ms}"
        params["options"] = f"{params['options']} {own}" if params.get("options") else own
        params["application_name"] = "rootproof"
        params["connect_timeout"] = max(2, math.ceil(self._target.timeout_s))
        try:
            conn = psycopg.connect(autocommit=True, row_factory=dict_row, **params)
        except psycopg.Error as exc:
            raise BackendUnavailable(f"{self._where()}: cannot connect: {self._scrub(str(exc))}") from None
        try:
            self._verify(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _verify(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        """Read-only and the statement timeout must hold; `set_config` once if they do not."""
        check = q.SESSION_SQL
        want = str(self._timeout_ms)
        row = conn.execute(check).fetchone() or {}
        if row.get("dro") != "on" or row.get("st") != want:
            conn.execute(
                "SELECT set_config('default_transaction_read_only', 'on', false), set_config('statement_timeout', %s, false)",
                (f"{self._timeout_ms}ms",),
            )
            row = conn.execute(check).fetchone() or {}
        if row.get("ro") != "on" or row.get("dro") != "on":
            raise _NotReadOnly(f"{self._where()}: session not read-only (transaction_read_only={row.get('ro')})")
        if row.get("st") != want:
            raise _NotReadOnly(f"{self._where()}: statement_timeout did not take ({row.get('st')} ms, wanted {want})")
        self._log_tz = zone_of(str(row.get("tz") or ""))

    def _session(self) -> psycopg.Connection[dict[str, Any]]:
        """The open session (connects on first use and after a failure). Call with the lock held."""
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self._drop()
        if self._conn is None:
            self._conn = self._connect()
            self._found_log = None
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

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
        rows = self._session().execute(statement, dict(params)).fetchall()
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
        with self._lock:
            try:
                out, scanned, nbytes = self._answer(args, now)
            except psycopg.Error as exc:
                raise self._mapped(exc) from None
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
            return self._settings(args, now)
        note = ""
        if args.kind in _ROW_SQL:
            rows = self._fetch(_ROW_SQL[args.kind], {"cap": q.MAX_ROWS, "qmax": q.MAX_QUERY_CHARS})
            if args.kind == "locks" and not rows:
                note = "; no session waits on a lock"
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
        conn = self._session()
        row = conn.execute(q.STATEMENT_TIMEOUT_DB).fetchone()
        if row is None:
            try:
                row = conn.execute(q.STATEMENT_TIMEOUT_FILE).fetchone()
            except pgerr.InsufficientPrivilege:
                row = None
        if row is None:
            row = conn.execute(q.STATEMENT_TIMEOUT_BOOT).fetchone()
        return (row or {}).get("value")

    def _replication(self) -> tuple[list[dict[str, Any]], str]:
        standby = self._session().execute("SELECT pg_is_in_recovery() AS r").fetchone() or {}
        if standby.get("r"):
            return self._fetch(q.REPLICATION_STANDBY, {"cap": q.MAX_ROWS}), ""
        rows = self._fetch(q.REPLICATION_PRIMARY, {"cap": q.MAX_ROWS})
        return rows, "" if rows else "; the server is a primary with no standby connected (pg_stat_replication is empty)"

    def _top_queries(self) -> tuple[list[dict[str, Any]], str]:
        conn = self._session()
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
            rows = self._fetch(statement, {"cap": q.MAX_ROWS, "qmax": q.MAX_QUERY_CHARS})
        except pgerr.ObjectNotInPrerequisiteState:
            return [], (
                f"; pg_stat_statements is installed in database {ext['db']} but not loaded "
                "(add it to shared_preload_libraries and restart PostgreSQL)"
            )
        return rows, ""

    # -- the server log ----------------------------------------------------------------------------

    def _log_path(self) -> tuple[Path | None, str]:
        """The log file and, when there is none, why: the target's `log`, else pg_current_logfile()."""
        if self._target.log is not None:
            return self._target.log, ""
        if self._found_log is None:
            conn = self._session()
            try:
                row = conn.execute("SELECT pg_current_logfile() AS f, current_setting('data_directory') AS d").fetchone() or {}
            except pgerr.InsufficientPrivilege:
                self._found_log = (None, f"; the target {self._target.name} has no log configured and may not call pg_current_logfile()")
            else:
                name = row.get("f")
                if not name:
                    self._found_log = (
                        None,
                        f"; the target {self._target.name} has no log configured and pg_current_logfile() names none"
                        " (logging_collector is off)",
                    )
                else:
                    path = Path(str(name))
                    self._found_log = (path if path.is_absolute() else Path(str(row.get("d") or "")) / path, "")
        return self._found_log

    def _log(self, args: InspectPostgresArgs, now: datetime) -> tuple[LinesResult, int, int]:
        window = TimeWindow(start=window_start(now, args.since), end=now)
        path, why = self._log_path()
        records = []
        nbytes = 0
        if path is not None:
            try:
                text, nbytes, at_start = read_tail(path, max_bytes=self._target.max_bytes, not_before=window.start, default_tz=self._log_tz)
            except OSError as exc:
                raise BackendQueryError(f"{self._where()}: cannot read the server log {path}: {exc.strerror or exc}") from None
            records = parse_records(text, at_start=at_start, default_tz=self._log_tz)
        query = parse_query(args.query)
        candidates = []
        for r in records:
            if r.ts is not None and r.ts not in window:
                continue
            body = r.text
            score = 0 if query.empty else query.score(body)
            if query.empty or score:
                candidates.append((score, r.ts, body))
        ordered = order_matches(candidates)
        page = ordered[args.offset : args.offset + args.limit]
        no_evidence = None
        if not page:
            filters = f"kind=log, since={args.since}" + (
                f"; {len(ordered)} matches, none at offset {args.offset}" if ordered else ""
            )
            no_evidence = self._no_evidence(args, filters + why, f"in window {window.text()}")
        win = window.as_dict()
        out = LinesResult(
            kind="log", window=Window(from_=win["from"], to=win["to"]), total_matches=len(ordered), lines=page, no_evidence=no_evidence
        )
        return out, len(records), nbytes

    # -- targets check -----------------------------------------------------------------------------

    def check(self) -> TargetCheck:
        """Connect, verify the session is read-only, and list what is missing. Never raises."""
        name, kind = self._target.name, "postgres"
        try:
            with self._lock:
                try:
                    conn = self._session()
                except _NotReadOnly as exc:
                    return TargetCheck(name=name, kind=kind, usable=False, problem=str(exc))
                except BackendUnavailable as exc:
                    text = str(exc)
                    what = "authentication failed" if "authentication failed" in text else "unreachable"
                    return TargetCheck(name=name, kind=kind, usable=False, problem=f"{what}: {text}")
                ro = (conn.execute("SHOW transaction_read_only").fetchone() or {}).get("transaction_read_only")
                if ro != "on":
                    return TargetCheck(name=name, kind=kind, usable=False, problem="session not read-only")
                warnings = self._warnings(conn)
        except psycopg.Error as exc:
            with self._lock:
                err = self._mapped(exc)
            return TargetCheck(name=name, kind=kind, usable=False, problem=str(err))
        except Exception as exc:  # a check never raises
            return TargetCheck(name=name, kind=kind, usable=False, problem=f"{type(exc).__name__}: {self._scrub(str(exc))}")
        return TargetCheck(name=name, kind=kind, usable=True, warnings=warnings)

    def _warnings(self, conn: psycopg.Connection[dict[str, Any]]) -> list[str]:
        warnings: list[str] = []
        row = conn.execute(q.CHECK_SQL).fetchone() or {}
        if not row.get("ext"):
            warnings.append(f"pg_stat_statements is not installed in database {row.get('db')}: kind=top_queries finds nothing")
        elif "pg_stat_statements" not in str(row.get("spl") or ""):
            warnings.append("pg_stat_statements is not in shared_preload_libraries: kind=top_queries finds nothing")
        if not row.get("su") and not row.get("stats"):
            warnings.append(
                f"role {row.get('me')} is neither superuser nor a member of pg_read_all_stats: other sessions' queries are hidden"
            )
        path, why = self._log_path()
        if path is None:
            warnings.append(why.lstrip("; ") + ": kind=log finds nothing")
        else:
            try:
                with path.open("rb"):
                    pass
            except OSError as exc:
                warnings.append(f"the server log {path} is not readable: {exc.strerror or exc}")
        return warnings

    def close(self) -> None:
        """Close the session; idempotent."""
        with self._lock:
            self._drop()
