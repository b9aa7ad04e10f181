"""The service in operation: what kind of run each is and where its alert came from (indexed
for `GET /api/runs`), the run a retried alert replaces, when its alert was received and first
delivered, and whether its notifications were queued; the alerts' fingerprints; the service replicas' heartbeats; notifications that could
not be delivered.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPTS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _dt() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def _text() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("kind", sa.String(16)))
    op.add_column("diagnosis_run", sa.Column("alert_source", sa.String(128)))
    op.add_column("diagnosis_run", sa.Column("group_hash", sa.String(64)))
    op.add_column("diagnosis_run", sa.Column("retry_of", sa.String(64)))
    op.add_column("diagnosis_run", sa.Column("received_at", _dt()))
    op.add_column("diagnosis_run", sa.Column("delivered_at", _dt()))
    op.add_column("diagnosis_run", sa.Column("notified_at", _dt()))
    op.create_index("idx_run_kind_started", "diagnosis_run", ["kind", "started_at"])
    op.create_index("idx_run_alert_source", "diagnosis_run", ["alert_source"])
    op.create_index("idx_run_group_hash", "diagnosis_run", ["group_hash"])
    op.create_index("uq_run_retry_of", "diagnosis_run", ["retry_of"], unique=True)
    op.create_index("idx_run_principal_started", "diagnosis_run", ["principal", "started_at"])
    op.create_table(
        "run_alert_fingerprint",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("fingerprint", sa.String(128), primary_key=True),
        **_OPTS,
    )
    op.create_index("idx_run_alert_fingerprint", "run_alert_fingerprint", ["fingerprint"])
    op.create_table(
        "service_replica",
        sa.Column("instance_id", sa.String(160), primary_key=True),
        sa.Column("started_at", _dt(), nullable=False),
        sa.Column("heartbeat_at", _dt(), nullable=False),
        **_OPTS,
    )
    op.create_index("idx_service_replica_heartbeat", "service_replica", ["heartbeat_at"])
    op.create_table(
        "notification_dead_letter",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("receiver", sa.String(64), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_status", sa.Integer),
        sa.Column("detail", _text(), nullable=False),
        sa.Column("created_at", _dt(), nullable=False),
        **_OPTS,
    )
    op.create_index("idx_dead_letter_run", "notification_dead_letter", ["run_id"])


def downgrade() -> None:
    op.drop_index("idx_dead_letter_run", table_name="notification_dead_letter")
    op.drop_table("notification_dead_letter")
    op.drop_index("idx_service_replica_heartbeat", table_name="service_replica")
    op.drop_table("service_replica")
    op.drop_index("idx_run_alert_fingerprint", table_name="run_alert_fingerprint")
    op.drop_table("run_alert_fingerprint")
    for name in ("idx_run_principal_started", "uq_run_retry_of", "idx_run_group_hash", "idx_run_alert_source", "idx_run_kind_started"):
        op.drop_index(name, table_name="diagnosis_run")
    for column in ("notified_at", "delivered_at", "received_at", "retry_of", "group_hash", "alert_source", "kind"):
        op.drop_column("diagnosis_run", column)
