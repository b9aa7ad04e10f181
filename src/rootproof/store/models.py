"""SQLAlchemy 2 declarative models of the trace store.

The migrations in `rootproof/store/migrations/versions/` create these tables; a test compares
the migrated schema with these models on every supported backend (SQLite, PostgreSQL, MariaDB).
Column attributes carry the same names as the fields of the records in `rootproof.run.records`,
so rows and records convert field by field.

Portability rules, applied through the column types below:

- long text is LONGTEXT on MariaDB/MySQL (TEXT there holds 64 KiB; 32 000 CJK characters are ~96 KB);
- datetimes are timezone-aware in Python and stored as UTC (TIMESTAMPTZ on PostgreSQL,
  DATETIME(6) on MariaDB, ISO text on SQLite);
- surrogate keys are BIGINT autoincrement (INTEGER on SQLite, where only that autoincrements);
- MariaDB tables are InnoDB, utf8mb4 with binary collation, so identifiers compare exactly as
  on PostgreSQL and SQLite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

__all__ = [
    "AgentReasoningAudit",
    "AgentStep",
    "AlertGroup",
    "Base",
    "BigIntPK",
    "ChatSession",
    "DiagnosisRun",
    "EvalCaseResult",
    "EvalRun",
    "JSONDoc",
    "LongText",
    "NotificationDeadLetter",
    "RunAlertFingerprint",
    "RunEvent",
    "TABLE_OPTIONS",
    "ServiceReplica",
    "ToolInvocation",
    "UTCDateTime",
    "VERSION_TABLE",
    "WebSession",
]

LongText: TypeEngine[str] = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
"""Unbounded text: TEXT on PostgreSQL and SQLite, LONGTEXT on MariaDB/MySQL."""

JSONDoc: sa.JSON = sa.JSON(none_as_null=True)
"""A JSON document; Python None is SQL NULL (not the JSON literal `null`), so `IS NULL` finds it."""

VERSION_TABLE = "rootproof_alembic_version"
"""Alembic's version table, named apart from `alembic_version` so the store can share a database."""

BigIntPK: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""BIGINT autoincrement key; INTEGER on SQLite, whose rowid alias autoincrements only as INTEGER."""

TABLE_OPTIONS: dict[str, str] = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
"""Per-table options; only MariaDB/MySQL reads them."""


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware datetime stored as UTC.

    PostgreSQL keeps the instant (TIMESTAMPTZ); MariaDB (DATETIME(6)) and SQLite have no zone,
    so the value is written as naive UTC and read back with UTC attached.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        """DATETIME(6) on MariaDB/MySQL (DATETIME alone drops microseconds)."""
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Convert to UTC; drop the zone where the column has none."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware datetime")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Attach UTC to naive values; normalise aware ones to UTC."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _created_at() -> Mapped[datetime]:
    return mapped_column(UTCDateTime(), nullable=False, server_default=sa.func.now())


class Base(DeclarativeBase):
    """Declarative base of the trace store tables."""


class ChatSession(Base):
    """A conversation: many runs share one `session_id`."""

    __tablename__ = "chat_session"
    __table_args__ = (TABLE_OPTIONS,)

    session_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    """The principal that opened the session (API key role, `cli`)."""
    created_at: Mapped[datetime] = _created_at()


class DiagnosisRun(Base):
    """One request: every field of `RunRecord`, including its terminal record."""

    __tablename__ = "diagnosis_run"
    __table_args__ = (
        sa.Index("idx_run_session", "session_id"),
        sa.Index("idx_run_started", "started_at"),
        sa.Index("idx_run_status", "status"),
        sa.Index("idx_run_kind_started", "kind", "started_at"),
        sa.Index("idx_run_alert_source", "alert_source"),
        sa.Index("idx_run_group_hash", "group_hash"),
        sa.Index("uq_run_retry_of", "retry_of", unique=True),
        sa.Index("idx_run_principal_started", "principal", "started_at"),
        TABLE_OPTIONS,
    )

    run_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        sa.String(64), sa.ForeignKey("chat_session.session_id", name="fk_run_session"), nullable=False
    )
    question: Mapped[str] = mapped_column(LongText, nullable=False)
    language: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    route: Mapped[str | None] = mapped_column(sa.String(64))
    model: Mapped[str | None] = mapped_column(sa.String(255))
    scenario_id: Mapped[str | None] = mapped_column(sa.String(255))
    principal: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    lifecycle_state: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    status: Mapped[str | None] = mapped_column(sa.String(32))
    """SUCCESS | CANCELLED | TIMED_OUT | FAILED; NULL while the run is not terminal."""
    release_outcome: Mapped[str | None] = mapped_column(sa.String(32))
    fallback_type: Mapped[str | None] = mapped_column(sa.String(64))
    conclusion: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    content: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    prompt_audit: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    alert: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    targets_checksum: Mapped[str | None] = mapped_column(sa.String(80))
    """`sha256:<hex>` of the targets file of a live run; NULL for snapshot and knowledge runs."""
    self_evaluation: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    budget_usage: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    tokens: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    error: Mapped[str | None] = mapped_column(LongText)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    deadline_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    duration_ms: Mapped[int | None] = mapped_column(sa.BigInteger)
    executor: Mapped[str | None] = mapped_column(sa.String(128))
    """The service replica and worker running the run (`host:pid`); not a `RunRecord` field, so
    saving the record never overwrites it."""
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """When a cancellation was asked for (any replica); the persisted half of cross-replica
    cancellation (pub/sub delivers at most once)."""
    # The service's own columns (set once by the service, never by saving a `RunRecord`):
    kind: Mapped[str | None] = mapped_column(sa.String(16))
    """chat | alertmanager | grafana for the service's runs; NULL for the command line's."""
    alert_source: Mapped[str | None] = mapped_column(sa.String(128))
    """A webhook's `receiver` (the sender's name for the route the alert took)."""
    group_hash: Mapped[str | None] = mapped_column(sa.String(64))
    """sha256 (hex) of the webhook's `groupKey` alone (`GET /api/runs?group_key=`)."""
    retry_of: Mapped[str | None] = mapped_column(sa.String(64))
    """The run this one replaces (its worker was lost); unique: a run has at most one successor."""
    received_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """When the alert reached the service (a retried alert keeps its first run's)."""
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """When a receiver first answered 2xx to its notification."""
    notified_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    """When the notifications of an alert's final run were queued (at least once: a replica
    that dies before this is set leaves them to the job's retry)."""


class AlertGroup(Base):
    """An Alertmanager group being diagnosed: one run per `groupKey` within its window."""

    __tablename__ = "alert_group"
    __table_args__ = (TABLE_OPTIONS,)

    group_key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    """sha256 of the source and the payload's `groupKey` (never the raw key: it holds labels)."""
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


class RunAlertFingerprint(Base):
    """The fingerprints of a webhook run's alerts (`GET /api/runs?fingerprint=`)."""

    __tablename__ = "run_alert_fingerprint"
    __table_args__ = (sa.Index("idx_run_alert_fingerprint", "fingerprint"), TABLE_OPTIONS)

    run_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(128), primary_key=True)


class ServiceReplica(Base):
    """A `rootproof serve` process's heartbeat: runs whose executor's heartbeat is too old are
    closed by the other replicas' sweep."""

    __tablename__ = "service_replica"
    __table_args__ = (sa.Index("idx_service_replica_heartbeat", "heartbeat_at"), TABLE_OPTIONS)

    instance_id: Mapped[str] = mapped_column(sa.String(160), primary_key=True)
    """`host:pid:random`, the `executor` of the runs it takes."""
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


class NotificationDeadLetter(Base):
    """A notification of an alert run that was not delivered after its last attempt (never the
    receiver's URL: only its configured name)."""

    __tablename__ = "notification_dead_letter"
    __table_args__ = (sa.Index("idx_dead_letter_run", "run_id"), TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    receiver: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    attempts: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    last_status: Mapped[int | None] = mapped_column(sa.Integer)
    detail: Mapped[str] = mapped_column(LongText, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


class WebSession(Base):
    """A browser sign-in (`POST /login`): every replica reads it, logout deletes it."""

    __tablename__ = "web_session"
    __table_args__ = (sa.Index("idx_web_session_expires", "expires_at"), TABLE_OPTIONS)

    token_hash: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    """SHA-256 (hex) of the session cookie's token; the token itself is never stored."""
    principal: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    """The signed-in key's public name (`key:1a2b3c4d5e6f`); its role is the key's at each request."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)


class AgentStep(Base):
    """One model step of an agent: bounded summaries, never whole prompts."""

    __tablename__ = "agent_step"
    __table_args__ = (sa.Index("idx_step_run_step", "run_id", "step_index"), TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    session_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    step_index: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    agent_name: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    model_input: Mapped[str] = mapped_column(LongText, nullable=False)
    model_output: Mapped[str] = mapped_column(LongText, nullable=False)
    has_text: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    has_tool_call: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    duration_ms: Mapped[int] = mapped_column(sa.BigInteger, nullable=False)
    input_tokens: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    output_tokens: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    created_at: Mapped[datetime] = _created_at()


class ToolInvocation(Base):
    """One tool call (the audited fields plus status, refusal code, scope key, data source)."""

    __tablename__ = "tool_invocation"
    __table_args__ = (
        sa.UniqueConstraint("invocation_id", name="uq_invocation_id"),
        sa.Index("idx_invocation_run", "run_id"),
        TABLE_OPTIONS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    invocation_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    session_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    step_index: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    tool_name: Mapped[str] = mapped_column(sa.String(128), nullable=False)
    input_params: Mapped[dict[str, Any]] = mapped_column(JSONDoc, nullable=False)
    scope_key: Mapped[str | None] = mapped_column(LongText)
    status: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    refusal_code: Mapped[str | None] = mapped_column(sa.String(64))
    message: Mapped[str | None] = mapped_column(LongText)
    evidence_status: Mapped[str | None] = mapped_column(sa.String(64))
    data_source: Mapped[str | None] = mapped_column(sa.String(64))
    evidence_refs: Mapped[list[Any]] = mapped_column(JSONDoc, nullable=False)
    output_preview: Mapped[str] = mapped_column(LongText, nullable=False)
    retrieval_layer: Mapped[str | None] = mapped_column(sa.String(64))
    l0_match_count: Mapped[int | None] = mapped_column(sa.Integer)
    l1_match_count: Mapped[int | None] = mapped_column(sa.Integer)
    retrieval_details: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    relevance_level: Mapped[str | None] = mapped_column(sa.String(64))
    dedup_reason: Mapped[str | None] = mapped_column(LongText)
    duration_ms: Mapped[int] = mapped_column(sa.BigInteger, nullable=False)
    result_bytes: Mapped[int] = mapped_column(sa.BigInteger, nullable=False)
    success: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    error_message: Mapped[str | None] = mapped_column(LongText)
    created_at: Mapped[datetime] = _created_at()


class AgentReasoningAudit(Base):
    """Provider reasoning and assistant text per model step, the reasoning audit table.

    Sensitive: kept apart from the trace, never in events, evidence, logs or later turns.
    """

    __tablename__ = "agent_reasoning_audit"
    __table_args__ = (
        sa.Index("idx_reasoning_run_step", "run_id", "step_index"),
        sa.Index("idx_reasoning_session_created", "session_id", "created_at"),
        TABLE_OPTIONS,
    )

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    step_index: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    agent_name: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    reasoning_available: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    reasoning_content: Mapped[str | None] = mapped_column(LongText)
    assistant_text: Mapped[str | None] = mapped_column(LongText)
    content_source: Mapped[str | None] = mapped_column(sa.String(64))
    content_bytes: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    created_at: Mapped[datetime] = _created_at()


class RunEvent(Base):
    """One public event of a run; `seq` orders the stream and resumes it (`Last-Event-ID`)."""

    __tablename__ = "run_event"
    __table_args__ = (sa.UniqueConstraint("run_id", "seq", name="uq_run_event_run_seq"), TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    seq: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    type: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    data: Mapped[dict[str, Any]] = mapped_column(JSONDoc, nullable=False)
    created_at: Mapped[datetime] = _created_at()


class EvalRun(Base):
    """One evaluation run: created → running → passed | failed | infra_invalid | cancelled."""

    __tablename__ = "eval_run"
    __table_args__ = (sa.Index("idx_eval_run_started", "started_at"), TABLE_OPTIONS)

    eval_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    state: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    git_sha: Mapped[str | None] = mapped_column(sa.String(64))
    suite_version: Mapped[str | None] = mapped_column(sa.String(64))
    model: Mapped[str | None] = mapped_column(sa.String(255))
    settings: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class EvalCaseResult(Base):
    """One scenario (or query) result inside an evaluation run."""

    __tablename__ = "eval_case_result"
    __table_args__ = (sa.Index("idx_eval_case_eval", "eval_id", "case_id"), TABLE_OPTIONS)

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    eval_id: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    case_id: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    run_id: Mapped[str | None] = mapped_column(sa.String(64))
    passed: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    score: Mapped[float] = mapped_column(sa.Double, nullable=False)
    outcome: Mapped[str | None] = mapped_column(sa.String(64))
    failure_class: Mapped[str | None] = mapped_column(sa.String(64))
    dimensions: Mapped[dict[str, Any] | None] = mapped_column(JSONDoc)
    hard_gates: Mapped[list[Any]] = mapped_column(JSONDoc, nullable=False)
    tool_audit: Mapped[list[Any] | None] = mapped_column(JSONDoc)
    duration_ms: Mapped[int] = mapped_column(sa.BigInteger, nullable=False)
