"""The queue: problems to tune, claimed row by row by the machines of a fleet, and asked-for counts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue",
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("asked", sa.Integer(), server_default="0", nullable=False),
        sa.Column("first_asked", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_asked", sa.DateTime(timezone=True), nullable=True),
        sa.Column("owner", sa.String(), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claims", sa.Integer(), server_default="0", nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name="fk_queue_problem_id_problems"),
        sa.PrimaryKeyConstraint("problem_id", name="pk_queue"),
    )
    op.create_index("ix_queue_state_asked", "queue", ["state", "asked"])


def downgrade() -> None:
    op.drop_index("ix_queue_state_asked", table_name="queue")
    op.drop_table("queue")
