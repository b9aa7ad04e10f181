"""Browser sign-in sessions of the team service: the SHA-256 of each session token, whose key
signed in, and when it expires (logout deletes the row; every replica reads it).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OPTS: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def _dt() -> sa.types.TypeEngine[datetime]:
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "web_session",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(128), nullable=False),
        sa.Column("created_at", _dt(), nullable=False),
        sa.Column("expires_at", _dt(), nullable=False),
        **_OPTS,
    )
    op.create_index("idx_web_session_expires", "web_session", ["expires_at"])


def downgrade() -> None:
    op.drop_index("idx_web_session_expires", table_name="web_session")
    op.drop_table("web_session")
