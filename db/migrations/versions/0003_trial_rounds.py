"""Trials gain rounds: how many sets of freshly allocated buffers the config was measured on.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
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
    # Every trial stored so far was measured on one set of buffers.
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("rounds", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("rounds")
