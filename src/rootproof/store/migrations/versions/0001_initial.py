"""Initial trace store: sessions, runs, steps, invocations, reasoning audit, events, evaluations.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Self-contained on purpose: a revision describes the schema as it was, so it uses plain
SQLAlchemy types instead of importing the (evolving) models.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPTS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _long_text() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def _dt() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _id() -> sa.Column[int]:
    return sa.Column(
        "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
    )


def _created_at() -> sa.Column[datetime]:
    return sa.Column("created_at", _dt(), nullable=False, server_default=sa.func.now())


def upgrade() -> None:
    """Create every table of the trace store."""
    op.create_table(
        "chat_session",
        sa.Column("session_id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        _created_at(),
        **_OPTS,
    )
    op.create_table(
        "diagnosis_run",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("chat_session.session_id", name="fk_run_session"),
            nullable=False,
        ),
        sa.Column("question", _long_text(), nullable=False),
        sa.Column("language", sa.String(16), nullable=False),
        sa.Column("route", sa.String(64)),
        sa.Column("model", sa.String(255)),
        sa.Column("scenario_id", sa.String(255)),
        sa.Column("principal", sa.String(128), nullable=False),
        sa.Column("lifecycle_state", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32)),
        sa.Column("release_outcome", sa.String(32)),
        sa.Column("fallback_type", sa.String(64)),
        sa.Column("conclusion", sa.JSON()),
        sa.Column("content", sa.JSON()),
        sa.Column("prompt_audit", sa.JSON()),
        sa.Column("self_evaluation", sa.JSON()),
        sa.Column("budget_usage", sa.JSON()),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("error", _long_text()),
        sa.Column("started_at", _dt(), nullable=False),
        sa.Column("deadline_at", _dt()),
        sa.Column("ended_at", _dt()),
        sa.Column("duration_ms", sa.BigInteger()),
        **_OPTS,
    )
    op.create_index("idx_run_session", "diagnosis_run", ["session_id"])
    op.create_index("idx_run_started", "diagnosis_run", ["started_at"])
    op.create_index("idx_run_status", "diagnosis_run", ["status"])

    op.create_table(
        "agent_step",
        _id(),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("model_input", _long_text(), nullable=False),
        sa.Column("model_output", _long_text(), nullable=False),
        sa.Column("has_text", sa.Boolean(), nullable=False),
        sa.Column("has_tool_call", sa.Boolean(), nullable=False),
        sa.Column("duration_ms", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        _created_at(),
        **_OPTS,
    )
    op.create_index("idx_step_run_step", "agent_step", ["run_id", "step_index"])

    op.create_table(
        "tool_invocation",
        _id(),
        sa.Column("invocation_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("tool_name", sa.String(128), nullable=False),
        sa.Column("input_params", sa.JSON(), nullable=False),
        sa.Column("scope_key", _long_text()),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("refusal_code", sa.String(64)),
        sa.Column("message", _long_text()),
        sa.Column("evidence_status", sa.String(64)),
        sa.Column("data_source", sa.String(64)),
        sa.Column("evidence_refs", sa.JSON(), nullable=False),
        sa.Column("output_preview", _long_text(), nullable=False),
        sa.Column("retrieval_layer", sa.String(64)),
        sa.Column("l0_match_count", sa.Integer()),
        sa.Column("l1_match_count", sa.Integer()),
        sa.Column("retrieval_details", sa.JSON()),
        sa.Column("relevance_level", sa.String(64)),
        sa.Column("dedup_reason", _long_text()),
        sa.Column("duration_ms", sa.BigInteger(), nullable=False),
        sa.Column("result_bytes", sa.BigInteger(), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("error_message", _long_text()),
        _created_at(),
        sa.UniqueConstraint("invocation_id", name="uq_invocation_id"),
        **_OPTS,
    )
    op.create_index("idx_invocation_run", "tool_invocation", ["run_id"])

    # Seed 004, field for field; no foreign keys (logical links to run, session and step only).
    op.create_table(
        "agent_reasoning_audit",
        _id(),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("agent_name", sa.String(64), nullable=False),
        sa.Column("reasoning_available", sa.Boolean(), nullable=False),
        sa.Column("reasoning_content", _long_text()),
        sa.Column("assistant_text", _long_text()),
        sa.Column("content_source", sa.String(64)),
        sa.Column("content_bytes", sa.Integer(), nullable=False),
        _created_at(),
        **_OPTS,
    )
    op.create_index("idx_reasoning_run_step", "agent_reasoning_audit", ["run_id", "step_index"])
    op.create_index("idx_reasoning_session_created", "agent_reasoning_audit", ["session_id", "created_at"])

    op.create_table(
        "run_event",
        _id(),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        _created_at(),
        sa.UniqueConstraint("run_id", "seq", name="uq_run_event_run_seq"),
        **_OPTS,
    )

    op.create_table(
        "eval_run",
        sa.Column("eval_id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("git_sha", sa.String(64)),
        sa.Column("suite_version", sa.String(64)),
        sa.Column("model", sa.String(255)),
        sa.Column("settings", sa.JSON()),
        sa.Column("summary", sa.JSON()),
        sa.Column("started_at", _dt(), nullable=False),
        sa.Column("ended_at", _dt()),
        **_OPTS,
    )
    op.create_index("idx_eval_run_started", "eval_run", ["started_at"])

    op.create_table(
        "eval_case_result",
        _id(),
        sa.Column("eval_id", sa.String(64), nullable=False),
        sa.Column("case_id", sa.String(255), nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("outcome", sa.String(64)),
        sa.Column("failure_class", sa.String(64)),
        sa.Column("dimensions", sa.JSON()),
        sa.Column("hard_gates", sa.JSON(), nullable=False),
        sa.Column("tool_audit", sa.JSON()),
        sa.Column("duration_ms", sa.BigInteger(), nullable=False),
        **_OPTS,
    )
    op.create_index("idx_eval_case_eval", "eval_case_result", ["eval_id", "case_id"])


def downgrade() -> None:
    """Drop every table of the trace store (children first)."""
    for table in (
        "eval_case_result",
        "eval_run",
        "run_event",
        "agent_reasoning_audit",
        "tool_invocation",
        "agent_step",
        "diagnosis_run",
        "chat_session",
    ):
        op.drop_table(table)
