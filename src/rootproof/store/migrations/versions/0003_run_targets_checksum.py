"""The checksum of the targets file a live run read, so the trace says which systems it looked at.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("targets_checksum", sa.String(80)))


def downgrade() -> None:
    op.drop_column("diagnosis_run", "targets_checksum")
