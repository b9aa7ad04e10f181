"""`SqlTraceStore`: the SQLAlchemy implementation of `rootproof.run.records.TraceSink`.

One engine per store, a session (and transaction) per call, so one store is shared by threads.
SQLite (the default; WAL and a 5 s busy timeout), PostgreSQL (`postgresql+psycopg://`) and
MariaDB/MySQL (`mysql+pymysql://`) are supported. Every SQLAlchemy or driver error becomes a
`StoreError` here (a `StoreOpenError` when the store cannot be opened at all: bad URL, unknown
dialect, missing driver, unreachable server, schema behind), with a message that names the store
(password hidden) and never the statement's parameters (they can hold reasoning text).

A store opened `read_only=True` never writes: no migration (the schema must be current), no
orphan sweep, and a SQLite file is opened in SQLite's read-only mode. A writable open sweeps
orphans best-effort: a store that refuses the write (read-only file, read-only replica) still
opens, and the sweep happens at the next writable open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from rootproof.errors import StoreError, StoreOpenError
from rootproof.run.records import (
    EvalCaseRecord,
    EvalRunRecord,
    EventRecord,
    InvocationRecord,
    ReasoningAuditRecord,
    RunRecord,
    StepRecord,
    utcnow,
)
from rootproof.store.models import (
    VERSION_TABLE,
    AgentReasoningAudit,
    AgentStep,
    AlertGroup,
    Base,
    ChatSession,
    DiagnosisRun,
    EvalCaseResult,
    EvalRun,
    NotificationDeadLetter,
    RunAlertFingerprint,
    RunEvent,
    ServiceReplica,
    ToolInvocation,
    WebSession,
)

__all__ = ["RunFilter", "SqlTraceStore", "needs_read_only", "upgrade"]

log = logging.getLogger(__name__)

SCRIPT_LOCATION = "rootproof.store:migrations"
"""Where Alembic finds the migrations: package data of `rootproof.store`."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another process's write lock before failing (the threads
of one process take turns on the store's own lock first, so this covers other processes only)."""

ORPHAN_ERROR = "orphaned"
"""The `error` of a run the orphan sweep marked FAILED."""

CONNECT_TIMEOUT_S = 10
"""Seconds to wait for a PostgreSQL or MariaDB server to accept a connection (unless the URL sets one)."""

_SUPPORTED = "sqlite:///PATH, postgresql+psycopg://USER@HOST/DB or mysql+pymysql://USER@HOST/DB"
_INSTALL_HINT = {
    "postgresql": "pip install 'rootproof[postgres]' (psycopg)",
    "mysql": "pip install 'rootproof[mysql]' (PyMySQL)",
    "mariadb": "pip install 'rootproof[mysql]' (PyMySQL)",
}
_REASONING_METADATA = ("step_index", "reasoning_available", "content_source", "content_bytes")

_R = TypeVar("_R")


def _json_dumps(value: Any) -> str:
    # Keep CJK readable in the database (utf8mb4 everywhere) instead of \\uXXXX escapes.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _safe_url(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _reason(exc: BaseException) -> str:
    """The driver's message (first line), never SQL parameters."""
    orig = getattr(exc, "orig", None)
    source = orig if isinstance(orig, BaseException) else exc
    text = str(source).strip().splitlines()[0] if str(source).strip() else type(source).__name__
    return f"{type(source).__name__}: {text[:300]}"


_ESCAPE_HINT = "percent-encode special characters in the user and password (@ as %40, : as %3A, / as %2F)"


def _parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:
        scheme = url.split("://", 1)[0] if "://" in url else "(none)"
        raise StoreOpenError(
            f"trace store URL is not a SQLAlchemy URL (scheme {scheme!r}); expected {_SUPPORTED}"
        ) from None
    except ValueError:  # a port that is not a number; the text may hold a piece of the password
        raise StoreOpenError(f"trace store URL has a port that is not a number; {_ESCAPE_HINT}") from None
    if parsed.host and "@" in parsed.host:
        # `user:p@ss@host`: the driver would name `ss@host`, a piece of the password, as the host.
        raise StoreOpenError(f"trace store URL has '@' in its host part; {_ESCAPE_HINT}")
    return parsed


def _sqlite_memory(url: URL) -> bool:
    db = url.database or ""
    return db in ("", ":memory:") or url.query.get("mode") == "memory"


def _read_only_url(url: URL) -> URL:
    """The same SQLite file opened in SQLite's read-only mode; other URLs unchanged.

    In a folder this process cannot write, the file is also opened `immutable`: SQLite could not
    create the `-shm` file a WAL reader needs, and nobody can change the file there anyway.
    """
    if url.get_backend_name() != "sqlite" or _sqlite_memory(url):
        return url
    db = url.database or ""
    query = {"mode": "ro", "uri": "true"}
    if not db.startswith("file:"):
        path = Path(db).expanduser().resolve()
        if not os.access(path.parent, os.W_OK):
            query["immutable"] = "1"
        db = "file:" + quote(str(path))
    return url.set(database=db).update_query_dict(query)


def needs_read_only(url: str) -> bool:
    """True when `url` names an existing SQLite file this process may not write (or not beside it)."""
    try:
        parsed = make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return False  # opening reports the bad URL
    if (
        parsed.get_backend_name() != "sqlite"
        or _sqlite_memory(parsed)
        or (parsed.database or "").startswith("file:")
    ):
        return False
    path = Path(parsed.database or "").expanduser()
    return path.is_file() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        with contextlib.suppress(sqlite3.OperationalError):  # a read-only file keeps its journal mode
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _create_engine(url: URL) -> Engine:
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {"json_serializer": _json_dumps, "hide_parameters": True}
    if backend == "sqlite":
        if _sqlite_memory(url):
            # One shared connection, or every pooled connection would see its own empty database.
            kwargs |= {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        elif not (url.database or "").startswith("file:"):
            try:
                Path(url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreOpenError(
                    f"cannot create the folder of the trace store {url.database}: {exc}"
                ) from exc
    else:
        kwargs["pool_pre_ping"] = True
        if "connect_timeout" not in url.query:
            # A dead host must fail in seconds, not hang the command.
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        if backend in ("mysql", "mariadb") and "charset" not in url.query:
            url = url.update_query_dict({"charset": "utf8mb4"})
    try:
        engine = sa.create_engine(url, **kwargs)
    except sa.exc.NoSuchModuleError:
        raise StoreOpenError(
            f"unknown database dialect {url.drivername!r} in trace store URL {_safe_url(url)}; expected {_SUPPORTED}"
        ) from None
    except ImportError as exc:
        hint = _INSTALL_HINT.get(backend, "install the driver")
        raise StoreOpenError(
            f"the driver for {url.drivername!r} is not installed ({exc}); install it: {hint}"
        ) from exc
    except (sa.exc.ArgumentError, TypeError, ValueError) as exc:
        raise StoreOpenError(f"trace store URL {_safe_url(url)} is invalid: {exc}") from exc
    if backend == "sqlite":
        sa.event.listen(engine, "connect", _on_sqlite_connect)
    return engine


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


def _head_revision() -> str | None:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


MIGRATION_WAIT_S = 15.0
"""The longest wait for another process's migration of the same database, seconds."""
MIGRATION_SETTLE_S = 2.0
"""A schema unchanged this long while waiting has no migrator but us, seconds."""


def _schema_state(engine: Engine) -> tuple[str | None, tuple[str, ...]]:
    """The revision and the table names of the database, or (None, ()) when it cannot be read."""
    with contextlib.suppress(sa.exc.SQLAlchemyError):
        revision = _current_revision(engine)
        return revision, tuple(sorted(sa.inspect(engine).get_table_names()))
    return None, ()


def _check_connection(engine: Engine) -> None:
    try:
        with engine.connect():
            pass
    except sa.exc.SQLAlchemyError as exc:
        raise StoreOpenError(
            f"cannot open the trace store at {_safe_url(engine.url)}: {_reason(exc)}"
        ) from exc


def _upgrade_engine(engine: Engine) -> None:
    _check_connection(engine)
    try:
        cfg = _alembic_config()
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":  # replicas starting together migrate one at a time
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(7402518)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    except sa.exc.SQLAlchemyError as exc:
        # Another process may be creating the schema at the same moment (`serve --workers N` on a
        # new SQLite file): fine once it is at head. Wait while the schema still changes (tables
        # appear, the revision moves), at most MIGRATION_WAIT_S; a schema that stays as it is for
        # MIGRATION_SETTLE_S has no other migrator, and the failure is ours.
        deadline = time.monotonic() + MIGRATION_WAIT_S
        seen, settled_at = _schema_state(engine), time.monotonic() + MIGRATION_SETTLE_S
        while True:
            if seen[0] == _head_revision():
                return
            if time.monotonic() > min(deadline, settled_at):
                break
            time.sleep(0.2)
            state = _schema_state(engine)
            if state != seen:
                seen, settled_at = state, time.monotonic() + MIGRATION_SETTLE_S
        raise StoreOpenError(
            f"cannot upgrade the trace store schema at {_safe_url(engine.url)}: {_reason(exc)}"
        ) from exc


def upgrade(url: str) -> None:
    """Upgrade the trace store schema at `url` to the newest revision (`rootproof db upgrade`).

    Raises:
        StoreError: the URL is invalid, the database is unreachable or a migration failed.
    """
    engine = _create_engine(_parse_url(url))
    try:
        _upgrade_engine(engine)
    finally:
        engine.dispose()


def _values(record: Any) -> dict[str, Any]:
    """A record's fields as column values; datetimes must be timezone-aware."""
    values = {f.name: getattr(record, f.name) for f in fields(record)}
    for name, value in values.items():
        if isinstance(value, datetime) and value.tzinfo is None:
            raise StoreError(
                f"{type(record).__name__}.{name} is a naive datetime ({value.isoformat()}); "
                "pass a timezone-aware datetime (rootproof.run.records.utcnow())"
            )
    return values


def _record(cls: type[_R], row: Any) -> _R:
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls)})  # type: ignore[arg-type]


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _row_dict(cls: type[Any], row: Any) -> dict[str, Any]:
    """A row as a JSON-able dict with the fields of the record class `cls`."""
    return {f.name: _jsonable(getattr(row, f.name)) for f in fields(cls)}


@dataclass(frozen=True)
class RunFilter:
    """What `list_service_runs` selects (None: any)."""

    kinds: tuple[str, ...] | None = None
    owner: str | None = None
    """Only this principal's chat sessions and the alert runs (an operator's view)."""
    alert_source: str | None = None
    group_hash: str | None = None
    fingerprint: str | None = None
    status: str | None = None
    release_outcome: str | None = None
    fallback_type: str | None = None
    since: datetime | None = None
    until: datetime | None = None


class SqlTraceStore:
    """The trace store on SQLite, PostgreSQL or MariaDB; implements `TraceSink`.

    Opening it upgrades the schema (unless `upgrade=False`, which instead checks that the schema
    is current) and sweeps runs orphaned by a killed process (best-effort). Opened `read_only`, it
    never writes. Thread-safe: one engine, a session per call. Every failure is a `StoreError`;
    one that prevents opening is a `StoreOpenError`.
    """

    def __init__(self, url: str, *, upgrade: bool = True, read_only: bool = False) -> None:
        """Open the store at the SQLAlchemy `url`.

        Args:
            url: e.g. `sqlite:///path/rootproof.db` (the folder is created),
                `postgresql+psycopg://user@host/db`, `mysql+pymysql://user@host/db`.
            upgrade: upgrade the schema to the newest revision; when False the schema must
                already be current (`rootproof db upgrade`).
            read_only: never write (for commands that only read): no upgrade, no sweep, a
                SQLite file opened read-only (it must exist).
        """
        parsed = _parse_url(url)
        self.read_only = read_only
        self._engine = _create_engine(_read_only_url(parsed) if read_only else parsed)
        self._url = _safe_url(parsed)
        self._dialect = self._engine.dialect.name
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        # SQLite has one writer at a time: the threads of this process take turns on a lock of
        # the store's instead of racing for SQLite's (a writer descheduled under load on few cores
        # would make the others wait out the busy timeout: "database is locked"). An in-memory
        # database is one shared connection: every access takes the lock.
        self._lock: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if parsed.get_backend_name() == "sqlite" else contextlib.nullcontext()
        )
        try:
            if upgrade and not read_only:
                _upgrade_engine(self._engine)
            else:
                self._check_schema()
            if not read_only:
                self._sweep_on_open()
        except BaseException:
            self._engine.dispose()
            raise

    @property
    def url(self) -> str:
        """The store URL with the password hidden."""
        return self._url

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tests and maintenance commands)."""
        return self._engine

    def __enter__(self) -> SqlTraceStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every pooled connection."""
        self._engine.dispose()

    # -- internals ---------------------------------------------------------------------------

    def _check_schema(self) -> None:
        head = _head_revision()
        try:
            current = _current_revision(self._engine)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreOpenError(f"cannot open the trace store at {self._url}: {_reason(exc)}") from exc
        if current != head:
            raise StoreOpenError(
                f"trace store schema at {self._url} is at revision {current or 'none (empty database)'}, "
                f"this rootproof needs {head}; run `rootproof db upgrade`"
            )

    @contextlib.contextmanager
    def _session(self, action: str) -> Iterator[Session]:
        """A session in a transaction; errors become StoreError naming `action`."""
        with self._lock:
            try:
                with self._sessions.begin() as session:
                    yield session
            except sa.exc.IntegrityError as exc:
                raise StoreError(f"trace store at {self._url} refused to {action}: {_reason(exc)}") from exc
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(f"trace store at {self._url} failed to {action}: {_reason(exc)}") from exc

    def _upsert(
        self, model: type[Base], values: dict[str, Any], key: str, *, update: bool = True
    ) -> sa.Executable:
        """INSERT, or on a duplicate `key` UPDATE the other columns (or keep the row)."""
        table = model.__table__
        assert isinstance(table, sa.Table)
        others = [k for k in values if k != key]
        if self._dialect in ("mysql", "mariadb"):
            my = mysql_dialect.insert(table).values(values)
            cols = others if update else [key]
            return my.on_duplicate_key_update({k: my.inserted[k] for k in cols})
        if self._dialect in ("postgresql", "sqlite"):
            ins = (pg_dialect.insert if self._dialect == "postgresql" else sqlite_dialect.insert)(
                table
            ).values(values)
            if not update:
                return ins.on_conflict_do_nothing(index_elements=[key])
            return ins.on_conflict_do_update(index_elements=[key], set_={k: ins.excluded[k] for k in others})
        raise StoreError(f"trace store dialect {self._dialect!r} is not supported; expected {_SUPPORTED}")

    # -- TraceSink ---------------------------------------------------------------------------

    def save_run(self, record: RunRecord) -> None:
        """Insert the run row, or update it while it is not terminal (by `run_id`); create its
        `chat_session` row if missing. A terminal run is final: a later save of it (a replica
        that resumes after its run was closed for it) changes nothing."""
        values = _values(record)
        session_row = {
            "session_id": record.session_id,
            "owner": record.principal,
            "created_at": record.started_at,
        }
        others = {k: v for k, v in values.items() if k != "run_id"}
        with self._session(f"save run {record.run_id}") as s:
            s.execute(self._upsert(ChatSession, session_row, "session_id", update=False))
            s.execute(self._upsert(DiagnosisRun, values, "run_id", update=False))
            s.execute(
                sa.update(DiagnosisRun)
                .where(DiagnosisRun.run_id == record.run_id, DiagnosisRun.status.is_(None))
                .values(others)
                .execution_options(synchronize_session=False)
            )

    def add_step(self, record: StepRecord) -> None:
        """Append an agent step."""
        values = _values(record)
        with self._session(f"add step {record.step_index} of run {record.run_id}") as s:
            s.execute(sa.insert(AgentStep).values(values))

    def add_invocation(self, record: InvocationRecord) -> None:
        """Append a tool invocation; `invocation_id` must be new."""
        values = _values(record)
        with self._session(f"add invocation {record.invocation_id} of run {record.run_id}") as s:
            s.execute(sa.insert(ToolInvocation).values(values))

    def add_reasoning(self, record: ReasoningAuditRecord) -> None:
        """Append a reasoning audit row."""
        values = _values(record)
        with self._session(f"add reasoning of step {record.step_index} of run {record.run_id}") as s:
            s.execute(sa.insert(AgentReasoningAudit).values(values))

    def add_event(self, record: EventRecord) -> None:
        """Append a public event; `(run_id, seq)` must be new. Once a run has its `done` event
        nothing is appended after it (a replica that resumes after its run was closed for it
        writes nothing more): such an event is dropped, with a log line. The run's row is
        locked first, as `close_run` does, so the two never interleave."""
        values = _values(record)
        with self._session(f"add event {record.seq} of run {record.run_id}") as s:
            s.execute(sa.select(DiagnosisRun.run_id).where(DiagnosisRun.run_id == record.run_id).with_for_update())
            done = s.scalar(sa.select(RunEvent.seq).where(RunEvent.run_id == record.run_id, RunEvent.type == "done").limit(1))
            if done is not None:
                log.warning("event %s of run %s dropped: the run already ended (done is event %s)", record.seq, record.run_id, done)
                return
            s.execute(sa.insert(RunEvent).values(values))

    # -- reading -----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run record, or None if the run is unknown."""
        with self._session(f"read run {run_id}") as s:
            row = s.get(DiagnosisRun, run_id)
            return None if row is None else _record(RunRecord, row)

    def list_runs(self, limit: int = 20) -> list[RunRecord]:
        """The `limit` most recently started runs, newest first."""
        stmt = sa.select(DiagnosisRun).order_by(DiagnosisRun.started_at.desc(), DiagnosisRun.run_id.desc())
        with self._session("list runs") as s:
            return [_record(RunRecord, row) for row in s.scalars(stmt.limit(limit))]

    def trace(self, run_id: str) -> dict[str, Any] | None:
        """Everything recorded for a run as JSON-able data (datetimes ISO 8601), or None if unknown.

        `reasoning` holds metadata only (step index, availability, content source, byte count);
        the reasoning and assistant texts are read through `reasoning()` alone.
        """
        with self._session(f"read the trace of run {run_id}") as s:
            run = s.get(DiagnosisRun, run_id)
            if run is None:
                return None
            steps = s.scalars(
                sa.select(AgentStep)
                .where(AgentStep.run_id == run_id)
                .order_by(AgentStep.step_index, AgentStep.id)
            )
            invocations = s.scalars(
                sa.select(ToolInvocation)
                .where(ToolInvocation.run_id == run_id)
                .order_by(ToolInvocation.step_index, ToolInvocation.id)
            )
            # Select the metadata columns only, so the texts never leave the database here.
            reasoning = s.execute(
                sa.select(*(getattr(AgentReasoningAudit, c) for c in _REASONING_METADATA))
                .where(AgentReasoningAudit.run_id == run_id)
                .order_by(AgentReasoningAudit.step_index, AgentReasoningAudit.id)
            )
            events = s.scalars(sa.select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.seq))
            return {
                "run": _row_dict(RunRecord, run),
                "steps": [_row_dict(StepRecord, r) for r in steps],
                "invocations": [_row_dict(InvocationRecord, r) for r in invocations],
                "reasoning": [dict(r._mapping) for r in reasoning],
                "events": [_row_dict(EventRecord, r) for r in events],
            }

    def reasoning(self, run_id: str) -> list[dict[str, Any]]:
        """The full reasoning audit rows of a run, by step (sensitive: reasoning and assistant texts)."""
        stmt = (
            sa.select(AgentReasoningAudit)
            .where(AgentReasoningAudit.run_id == run_id)
            .order_by(AgentReasoningAudit.step_index, AgentReasoningAudit.id)
        )
        with self._session(f"read the reasoning of run {run_id}") as s:
            return [{"id": r.id} | _row_dict(ReasoningAuditRecord, r) for r in s.scalars(stmt)]

    def events(self, run_id: str, after_seq: int = 0) -> list[EventRecord]:
        """The run's events with `seq > after_seq`, in `seq` order (replay and `Last-Event-ID` resume)."""
        stmt = (
            sa.select(RunEvent)
            .where(RunEvent.run_id == run_id, RunEvent.seq > after_seq)
            .order_by(RunEvent.seq)
        )
        with self._session(f"read the events of run {run_id}") as s:
            return [_record(EventRecord, r) for r in s.scalars(stmt)]

    # -- the service ---------------------------------------------------------------------------

    def session_owner(self, session_id: str) -> str | None:
        """Who opened a session (the principal of its first run), or None if it is unknown."""
        with self._session(f"read the owner of session {session_id}") as s:
            row = s.get(ChatSession, session_id)
            return None if row is None else row.owner

    def set_executor(self, run_id: str, executor: str) -> None:
        """Record which replica and worker runs a run (`host:pid`)."""
        stmt = sa.update(DiagnosisRun).where(DiagnosisRun.run_id == run_id).values(executor=executor)
        with self._session(f"record the executor of run {run_id}") as s:
            s.execute(stmt)

    def executor_of(self, run_id: str) -> str | None:
        """The replica and worker that took a run, or None."""
        with self._session(f"read the executor of run {run_id}") as s:
            return s.scalar(sa.select(DiagnosisRun.executor).where(DiagnosisRun.run_id == run_id))

    def request_cancel(self, run_id: str, *, now: datetime | None = None) -> bool:
        """Persist a cancellation request; True when the run exists and is not terminal."""
        stmt = (
            sa.update(DiagnosisRun)
            .where(DiagnosisRun.run_id == run_id, DiagnosisRun.status.is_(None))
            .values(cancel_requested_at=now or utcnow())
            .execution_options(synchronize_session=False)
        )
        with self._session(f"request the cancellation of run {run_id}") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    def cancel_requested(self, run_ids: list[str]) -> set[str]:
        """Which of `run_ids` have a persisted cancellation request."""
        if not run_ids:
            return set()
        stmt = sa.select(DiagnosisRun.run_id).where(
            DiagnosisRun.run_id.in_(run_ids), DiagnosisRun.cancel_requested_at.is_not(None)
        )
        with self._session("read cancellation requests") as s:
            return set(s.scalars(stmt))

    def claim_alert_group(self, group_key: str, run_id: str, *, window_s: float, now: datetime | None = None) -> str | None:
        """Claim an alert group for `run_id` for `window_s` seconds.

        Returns None when the claim is this run's (a new group, or the previous claim expired),
        else the run id that holds the group. Safe across replicas: the primary key decides a
        race between two inserts, and an expired claim is taken over by one conditional update.
        """
        now = now or utcnow()
        expires = now + timedelta(seconds=window_s)
        for _ in range(3):
            try:
                with self._session(f"claim alert group for run {run_id}") as s:
                    s.execute(sa.insert(AlertGroup).values(group_key=group_key, run_id=run_id, expires_at=expires))
                return None
            except StoreError:
                pass
            with self._session(f"read alert group for run {run_id}") as s:
                row = s.get(AlertGroup, group_key)
                if row is None:
                    continue
                if row.expires_at > now:
                    return row.run_id
                taken = s.execute(
                    sa.update(AlertGroup)
                    .where(AlertGroup.group_key == group_key, AlertGroup.expires_at == row.expires_at)
                    .values(run_id=run_id, expires_at=expires)
                    .execution_options(synchronize_session=False)
                )
                if getattr(taken, "rowcount", 0):
                    return None
        raise StoreError(f"trace store at {self._url} could not claim an alert group for run {run_id}")

    def release_alert_group(self, run_id: str) -> None:
        """Forget the alert group `run_id` holds (its run was never queued)."""
        with self._session(f"release the alert group of run {run_id}") as s:
            s.execute(sa.delete(AlertGroup).where(AlertGroup.run_id == run_id))

    def claim_session(self, session_id: str, owner: str) -> str:
        """Open `session_id` for `owner` unless it exists; returns its owner (one statement, so
        two principals racing for a new id cannot both pass an ownership check)."""
        row = {"session_id": session_id, "owner": owner, "created_at": utcnow()}
        with self._session(f"claim session {session_id}") as s:
            s.execute(self._upsert(ChatSession, row, "session_id", update=False))
            found = s.get(ChatSession, session_id)
            return found.owner if found is not None else owner

    def open_web_session(self, token_hash: str, principal: str, *, expires_at: datetime, now: datetime | None = None) -> None:
        """Record a browser sign-in by the SHA-256 of its token (never the token); sign-ins
        expired by `now` are deleted on the way (the index on `expires_at` keeps it cheap)."""
        now = now or utcnow()
        with self._session("record a browser sign-in") as s:
            s.execute(sa.delete(WebSession).where(WebSession.expires_at <= now).execution_options(synchronize_session=False))
            s.add(WebSession(token_hash=token_hash, principal=principal, created_at=now, expires_at=expires_at))

    def web_session(self, token_hash: str, *, now: datetime | None = None) -> str | None:
        """The principal of an unexpired browser sign-in, or None (unknown, expired or signed out)."""
        now = now or utcnow()
        stmt = sa.select(WebSession.principal).where(WebSession.token_hash == token_hash, WebSession.expires_at > now)
        with self._session("read a browser sign-in") as s:
            return s.scalar(stmt)

    def close_web_session(self, token_hash: str) -> bool:
        """Delete a browser sign-in (logout); True when there was one."""
        stmt = sa.delete(WebSession).where(WebSession.token_hash == token_hash).execution_options(synchronize_session=False)
        with self._session("delete a browser sign-in") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    # -- the service in operation ------------------------------------------------------------

    def close_run(
        self,
        run_id: str,
        *,
        status: str,
        release_outcome: str,
        fallback_type: str | None,
        content: dict[str, Any] | None,
        error: str,
        now: datetime | None = None,
        missing: RunRecord | None = None,
    ) -> RunRecord | None:
        """Close a run its executor will not finish, in one transaction: the terminal record
        (only if the run is not terminal yet: every terminal write is conditional) and the
        `content` (when given and the stream has none) and `done` events its stream lacks, with
        contiguous ids. `missing` is saved first when the run has no row. Returns the closed
        record, or None when the run was already terminal (or unknown)."""
        now = now or utcnow()
        with self._session(f"close run {run_id}") as s:
            row = s.execute(sa.select(DiagnosisRun).where(DiagnosisRun.run_id == run_id).with_for_update()).scalar_one_or_none()
            if row is None and missing is not None:
                s.execute(
                    self._upsert(
                        ChatSession,
                        {"session_id": missing.session_id, "owner": missing.principal, "created_at": missing.started_at},
                        "session_id",
                        update=False,
                    )
                )
                s.execute(self._upsert(DiagnosisRun, _values(missing), "run_id", update=False))
                row = s.execute(sa.select(DiagnosisRun).where(DiagnosisRun.run_id == run_id).with_for_update()).scalar_one_or_none()
            if row is None or row.status is not None:
                return None
            duration_ms = max(0, int((now - row.started_at).total_seconds() * 1000))
            # Conditional in the statement itself (SQLite has no row lock: there the UPDATE takes
            # the database's write lock, and a terminal write of another process in between
            # makes it change nothing).
            changed = s.execute(
                sa.update(DiagnosisRun)
                .where(DiagnosisRun.run_id == run_id, DiagnosisRun.status.is_(None))
                .values(
                    status=status,
                    lifecycle_state=status,
                    release_outcome=release_outcome,
                    fallback_type=fallback_type,
                    content=content,
                    error=error,
                    ended_at=now,
                    duration_ms=duration_ms,
                )
                .execution_options(synchronize_session=False)
            )
            if not getattr(changed, "rowcount", 0):
                return None
            s.expire(row)
            row = s.get(DiagnosisRun, run_id)
            assert row is not None
            events = s.execute(sa.select(RunEvent.seq, RunEvent.type).where(RunEvent.run_id == run_id).order_by(RunEvent.seq)).all()
            if not any(t == "done" for _, t in events):
                seq = events[-1][0] if events else 0
                if content is not None and not any(t in ("content", "error") for _, t in events):
                    seq += 1
                    s.add(RunEvent(run_id=run_id, seq=seq, type="content", data=content, created_at=now))
                done = {"release_outcome": release_outcome, "status": status, "duration_ms": row.duration_ms, "tokens": row.tokens}
                s.add(RunEvent(run_id=run_id, seq=seq + 1, type="done", data=done, created_at=now))
            s.flush()
            return _record(RunRecord, row)

    def claim_executor(self, run_id: str, executor: str) -> bool:
        """Take a run that no executor took yet and that is not terminal; True when taken."""
        stmt = (
            sa.update(DiagnosisRun)
            .where(DiagnosisRun.run_id == run_id, DiagnosisRun.executor.is_(None), DiagnosisRun.status.is_(None))
            .values(executor=executor)
            .execution_options(synchronize_session=False)
        )
        with self._session(f"claim run {run_id}") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    def tag_run(
        self,
        run_id: str,
        *,
        kind: str,
        alert_source: str | None = None,
        group_hash: str | None = None,
        received_at: datetime | None = None,
        fingerprints: list[str] | None = None,
        retry_of: str | None = None,
    ) -> None:
        """Record the service's columns of a run (what `GET /api/runs` filters on)."""
        values: dict[str, Any] = {"kind": kind, "alert_source": alert_source, "group_hash": group_hash, "received_at": received_at}
        if retry_of is not None:
            values["retry_of"] = retry_of
        with self._session(f"tag run {run_id}") as s:
            s.execute(sa.update(DiagnosisRun).where(DiagnosisRun.run_id == run_id).values(values).execution_options(synchronize_session=False))
            for fingerprint in sorted({f[:128] for f in fingerprints or []})[:1000]:
                s.execute(sa.insert(RunAlertFingerprint).values(run_id=run_id, fingerprint=fingerprint))

    def run_meta(self, run_id: str) -> dict[str, Any] | None:
        """The service's columns of a run: kind, alert_source, group_hash, executor, retry_of,
        received_at, delivered_at, notified_at (None when the run is unknown)."""
        cols = (
            DiagnosisRun.kind,
            DiagnosisRun.alert_source,
            DiagnosisRun.group_hash,
            DiagnosisRun.executor,
            DiagnosisRun.retry_of,
            DiagnosisRun.received_at,
            DiagnosisRun.delivered_at,
            DiagnosisRun.notified_at,
        )
        with self._session(f"read the service columns of run {run_id}") as s:
            row = s.execute(sa.select(*cols).where(DiagnosisRun.run_id == run_id)).first()
            return None if row is None else dict(row._mapping)

    def successor_of(self, run_id: str) -> str | None:
        """The run that replaced `run_id` (a retried alert), or None."""
        with self._session(f"read the successor of run {run_id}") as s:
            return s.scalar(sa.select(DiagnosisRun.run_id).where(DiagnosisRun.retry_of == run_id))

    def first_of(self, run_id: str) -> str:
        """The first run of an alert (`run_id` followed back along `retry_of`)."""
        with self._session(f"read the first run of {run_id}") as s:
            for _ in range(1000):
                previous = s.scalar(sa.select(DiagnosisRun.retry_of).where(DiagnosisRun.run_id == run_id))
                if previous is None:
                    break
                run_id = previous
        return run_id

    def attempts_of(self, run_id: str) -> int:
        """How many runs its alert has had up to `run_id` (1 + the runs it replaces)."""
        count, current = 0, run_id
        with self._session(f"count the attempts of run {run_id}") as s:
            while current is not None and count < 1000:
                count += 1
                current = s.scalar(sa.select(DiagnosisRun.retry_of).where(DiagnosisRun.run_id == current))
        return count

    def create_successor(self, lost: RunRecord, run_id: str) -> str:
        """A new run for the alert of `lost` (same session, question and alert; `retry_of` the
        lost run, the service's columns copied). One successor per run: when another replica
        created it first, that one's id is returned."""
        meta = self.run_meta(lost.run_id) or {}
        record = RunRecord(
            run_id=run_id,
            session_id=lost.session_id,
            question=lost.question,
            language=lost.language,
            scenario_id=lost.scenario_id,
            principal=lost.principal,
            alert=lost.alert,
            targets_checksum=lost.targets_checksum,
        )
        values = {
            **_values(record),
            "kind": meta.get("kind"),
            "alert_source": meta.get("alert_source"),
            "group_hash": meta.get("group_hash"),
            "received_at": meta.get("received_at") or lost.started_at,
            "retry_of": lost.run_id,
        }
        try:
            with self._session(f"record the successor of run {lost.run_id}") as s:
                s.execute(sa.insert(DiagnosisRun).values(values))
                prints = s.scalars(sa.select(RunAlertFingerprint.fingerprint).where(RunAlertFingerprint.run_id == lost.run_id)).all()
                for fingerprint in prints:
                    s.execute(sa.insert(RunAlertFingerprint).values(run_id=run_id, fingerprint=fingerprint))
            return run_id
        except StoreError:
            found = self.successor_of(lost.run_id)
            if found is None:
                raise
            return found

    def repoint_alert_group(self, old_run_id: str, new_run_id: str) -> bool:
        """Point the alert group held by `old_run_id` at `new_run_id` (only if it still points
        at the old one); True when it did."""
        stmt = (
            sa.update(AlertGroup)
            .where(AlertGroup.run_id == old_run_id)
            .values(run_id=new_run_id)
            .execution_options(synchronize_session=False)
        )
        with self._session(f"repoint the alert group of run {old_run_id}") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    def mark_delivered(self, run_id: str, *, now: datetime | None = None) -> bool:
        """Record the first delivery of a run's notification; True for the first one only."""
        stmt = (
            sa.update(DiagnosisRun)
            .where(DiagnosisRun.run_id == run_id, DiagnosisRun.delivered_at.is_(None))
            .values(delivered_at=now or utcnow())
            .execution_options(synchronize_session=False)
        )
        with self._session(f"record the delivery of run {run_id}") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    def mark_notified(self, run_id: str, *, now: datetime | None = None) -> bool:
        """Record that a run's notifications were queued; True for the first time only."""
        stmt = (
            sa.update(DiagnosisRun)
            .where(DiagnosisRun.run_id == run_id, DiagnosisRun.notified_at.is_(None))
            .values(notified_at=now or utcnow())
            .execution_options(synchronize_session=False)
        )
        with self._session(f"record the notifications of run {run_id}") as s:
            return bool(getattr(s.execute(stmt), "rowcount", 0))

    def add_dead_letter(self, run_id: str, receiver: str, *, attempts: int, last_status: int | None, detail: str) -> None:
        """Record a notification that was not delivered after its last attempt."""
        with self._session(f"record an undelivered notification of run {run_id}") as s:
            s.add(NotificationDeadLetter(run_id=run_id, receiver=receiver[:64], attempts=attempts, last_status=last_status, detail=detail[:2000], created_at=utcnow()))

    def dead_letters(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Undelivered notifications (of one run, or all), oldest first."""
        stmt = sa.select(NotificationDeadLetter).order_by(NotificationDeadLetter.id)
        if run_id is not None:
            stmt = stmt.where(NotificationDeadLetter.run_id == run_id)
        cols = ("run_id", "receiver", "attempts", "last_status", "detail", "created_at")
        with self._session("read undelivered notifications") as s:
            return [{c: _jsonable(getattr(r, c)) for c in cols} for r in s.scalars(stmt)]

    def heartbeat(self, instance_id: str, *, now: datetime | None = None) -> None:
        """Record that a service replica is alive."""
        now = now or utcnow()
        with self._session("record a replica heartbeat") as s:
            updated = s.execute(
                sa.update(ServiceReplica).where(ServiceReplica.instance_id == instance_id).values(heartbeat_at=now).execution_options(synchronize_session=False)
            )
            if not getattr(updated, "rowcount", 0):
                s.execute(self._upsert(ServiceReplica, {"instance_id": instance_id, "started_at": now, "heartbeat_at": now}, "instance_id"))

    def replica_alive(self, instance_id: str, timeout_s: float, *, now: datetime | None = None) -> bool:
        """Whether a replica sent a heartbeat within `timeout_s` seconds."""
        now = now or utcnow()
        stmt = sa.select(ServiceReplica.heartbeat_at).where(ServiceReplica.instance_id == instance_id)
        with self._session("read a replica heartbeat") as s:
            beat = s.scalar(stmt)
        return beat is not None and beat >= now - timedelta(seconds=timeout_s)

    def forget_replica(self, instance_id: str) -> None:
        """A replica that stopped cleanly (its runs are closed) leaves the heartbeat table."""
        with self._session("remove a replica heartbeat") as s:
            s.execute(sa.delete(ServiceReplica).where(ServiceReplica.instance_id == instance_id))

    def stalled_replicas(self, timeout_s: float, *, now: datetime | None = None) -> int:
        """How many replicas stopped sending heartbeats more than `timeout_s` ago (rows of
        replicas silent for over a day are deleted on the way)."""
        now = now or utcnow()
        with self._session("count stalled replicas") as s:
            s.execute(sa.delete(ServiceReplica).where(ServiceReplica.heartbeat_at < now - timedelta(days=1)).execution_options(synchronize_session=False))
            return int(s.scalar(sa.select(sa.func.count()).select_from(ServiceReplica).where(ServiceReplica.heartbeat_at < now - timedelta(seconds=timeout_s))) or 0)

    def lost_runs(self, timeout_s: float, *, now: datetime | None = None) -> list[tuple[str, str]]:
        """`(run_id, executor)` of the runs that are not terminal and whose executor has sent
        no heartbeat for `timeout_s` seconds (or none at all)."""
        now = now or utcnow()
        alive = sa.select(ServiceReplica.instance_id).where(ServiceReplica.heartbeat_at >= now - timedelta(seconds=timeout_s))
        stmt = sa.select(DiagnosisRun.run_id, DiagnosisRun.executor).where(
            DiagnosisRun.status.is_(None), DiagnosisRun.executor.is_not(None), DiagnosisRun.executor.not_in(alive)
        )
        with self._session("find runs of lost replicas") as s:
            return [(r[0], str(r[1])) for r in s.execute(stmt.limit(500))]

    def list_service_runs(self, where: RunFilter, *, limit: int, after: tuple[datetime, str] | None = None) -> list[dict[str, Any]]:
        """Runs newest first (by start, then id) that match `where`, after the cursor `after`."""
        cols = (
            DiagnosisRun.run_id,
            DiagnosisRun.session_id,
            DiagnosisRun.kind,
            DiagnosisRun.alert_source,
            DiagnosisRun.lifecycle_state,
            DiagnosisRun.status,
            DiagnosisRun.release_outcome,
            DiagnosisRun.fallback_type,
            DiagnosisRun.language,
            DiagnosisRun.scenario_id,
            DiagnosisRun.executor,
            DiagnosisRun.retry_of,
            DiagnosisRun.started_at,
            DiagnosisRun.ended_at,
            DiagnosisRun.received_at,
            DiagnosisRun.delivered_at,
        )
        stmt = sa.select(*cols).where(DiagnosisRun.kind.is_not(None))
        if where.kinds is not None:
            stmt = stmt.where(DiagnosisRun.kind.in_(where.kinds))
        if where.owner is not None:  # an operator: its own chat runs (their principal owns the session), every alert run
            stmt = stmt.where(
                sa.or_(DiagnosisRun.kind.in_(("alertmanager", "grafana")), sa.and_(DiagnosisRun.kind == "chat", DiagnosisRun.principal == where.owner))
            )
        for column, value in (
            (DiagnosisRun.alert_source, where.alert_source),
            (DiagnosisRun.group_hash, where.group_hash),
            (DiagnosisRun.status, where.status),
            (DiagnosisRun.release_outcome, where.release_outcome),
            (DiagnosisRun.fallback_type, where.fallback_type),
        ):
            if value is not None:
                stmt = stmt.where(column == value)
        if where.fingerprint is not None:
            stmt = stmt.where(DiagnosisRun.run_id.in_(sa.select(RunAlertFingerprint.run_id).where(RunAlertFingerprint.fingerprint == where.fingerprint)))
        if where.since is not None:
            stmt = stmt.where(DiagnosisRun.started_at >= where.since)
        if where.until is not None:
            stmt = stmt.where(DiagnosisRun.started_at < where.until)
        if after is not None:
            at, run_id = after
            stmt = stmt.where(sa.or_(DiagnosisRun.started_at < at, sa.and_(DiagnosisRun.started_at == at, DiagnosisRun.run_id < run_id)))
        stmt = stmt.order_by(DiagnosisRun.started_at.desc(), DiagnosisRun.run_id.desc()).limit(limit)
        with self._session("list runs") as s:
            return [dict(r._mapping) for r in s.execute(stmt)]

    def readiness(self) -> dict[str, Any]:
        """`{database: bool, migrations: bool, revision, head}` for readiness probes; never raises."""
        head = _head_revision()
        try:
            current = _current_revision(self._engine)
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not fail
            return {"database": False, "migrations": False, "revision": None, "head": head, "reason": _reason(exc)}
        return {"database": True, "migrations": current == head, "revision": current, "head": head}

    # -- maintenance -------------------------------------------------------------------------

    def _sweep_on_open(self) -> None:
        """Sweep orphans unless the store refuses writes; then the next writable open does it."""
        try:
            self.sweep_orphans()
        except StoreError as exc:
            log.info("orphan sweep skipped (%s); it runs at the next writable open", exc)

    def sweep_orphans(self, *, now: datetime | None = None, grace_s: float = 1.0) -> int:
        """Mark runs orphaned by a killed process; return how many.

        A run is orphaned when it is still non-terminal (`status` NULL), no service replica
        took it (`executor` NULL: the service's runs are closed by its heartbeat sweep, which
        knows whether their replica is alive) and its deadline plus `grace_s` has passed. It
        becomes `FAILED` / release_outcome `NONE` / fallback_type `INTERNAL_ERROR` / error
        `orphaned`, ended at `now`. Runs without a deadline, or whose deadline plus grace is
        still ahead (a live run of another process), are never touched.
        """
        now = now or utcnow()
        if now.tzinfo is None:
            raise StoreError(f"sweep_orphans(now={now.isoformat()}) needs a timezone-aware datetime")
        cutoff = now - timedelta(seconds=grace_s)
        stmt = (
            sa.update(DiagnosisRun)
            .where(
                DiagnosisRun.status.is_(None),
                DiagnosisRun.executor.is_(None),
                DiagnosisRun.deadline_at.is_not(None),
                DiagnosisRun.deadline_at < cutoff,
            )
            .values(
                status="FAILED",
                lifecycle_state="FAILED",
                release_outcome="NONE",
                fallback_type="INTERNAL_ERROR",
                error=ORPHAN_ERROR,
                ended_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        with self._session("sweep orphaned runs") as s:
            result = s.execute(stmt)
            return int(getattr(result, "rowcount", 0) or 0)

    # -- evaluation --------------------------------------------------------------------------

    def save_eval_run(self, record: EvalRunRecord) -> None:
        """Insert or update an evaluation run (by `eval_id`)."""
        values = _values(record)
        with self._session(f"save eval run {record.eval_id}") as s:
            s.execute(self._upsert(EvalRun, values, "eval_id"))

    def add_eval_case(self, record: EvalCaseRecord) -> None:
        """Append one case result to an evaluation run."""
        values = _values(record)
        with self._session(f"add case {record.case_id} of eval run {record.eval_id}") as s:
            s.execute(sa.insert(EvalCaseResult).values(values))

    def get_eval_run(self, eval_id: str) -> dict[str, Any] | None:
        """The evaluation run as JSON-able data with its `cases` (in insertion order), or None."""
        with self._session(f"read eval run {eval_id}") as s:
            row = s.get(EvalRun, eval_id)
            if row is None:
                return None
            cases = s.scalars(
                sa.select(EvalCaseResult).where(EvalCaseResult.eval_id == eval_id).order_by(EvalCaseResult.id)
            )
            return _row_dict(EvalRunRecord, row) | {"cases": [_row_dict(EvalCaseRecord, c) for c in cases]}

    def list_eval_runs(self, limit: int = 20) -> list[dict[str, Any]]:
        """The `limit` most recently started evaluation runs (without cases), newest first."""
        stmt = sa.select(EvalRun).order_by(EvalRun.started_at.desc(), EvalRun.eval_id.desc()).limit(limit)
        with self._session("list eval runs") as s:
            return [_row_dict(EvalRunRecord, r) for r in s.scalars(stmt)]
