"""The team service: who executes a run and whether its cancellation was asked for, and the
Alertmanager groups already being diagnosed (one run per group within its window).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPTS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _dt() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("executor", sa.String(128)))
    op.add_column("diagnosis_run", sa.Column("cancel_requested_at", _dt()))
    op.create_table(
        "alert_group",
        sa.Column("group_key", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("expires_at", _dt(), nullable=False),
        **_OPTS,
    )


def downgrade() -> None:
    op.drop_table("alert_group")
    op.drop_column("diagnosis_run", "cancel_requested_at")
    op.drop_column("diagnosis_run", "executor")
