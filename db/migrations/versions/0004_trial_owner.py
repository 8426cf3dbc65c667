"""Trials gain owner (the process measuring a running row) and ids that are never reused.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # SQLite needs the table rebuilt for AUTOINCREMENT; the copy keeps every id, and the new
    # sqlite_sequence starts above the largest. Running rows written before owners keep NULL: they
    # are treated as abandoned, as every running row was before.
    recreate = "always" if op.get_bind().dialect.name == "sqlite" else "auto"
    with op.batch_alter_table("trials", recreate=recreate, table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("owner", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("owner")
