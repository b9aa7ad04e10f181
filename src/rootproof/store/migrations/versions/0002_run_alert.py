"""The input alert of an alert-mode run (AIOps), so the trace shows what the run was asked about.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("diagnosis_run", sa.Column("alert", sa.JSON()))


def downgrade() -> None:
    op.drop_column("diagnosis_run", "alert")
