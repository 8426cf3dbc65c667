"""Read floors: the least time a GPU takes to only read a matrix of a size, stored beside the trials.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "read_floors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("nbytes", sa.BigInteger(), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=False),
        sa.Column("kernel", sa.String(), nullable=False),
        sa.Column("driver", sa.String(), nullable=False),
        sa.Column("cuda", sa.String(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_read_floors_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("id", name="pk_read_floors"),
    )
    op.create_index("ix_read_floors_gpu_id_nbytes", "read_floors", ["gpu_id", "nbytes"])


def downgrade() -> None:
    op.drop_index("ix_read_floors_gpu_id_nbytes", table_name="read_floors")
    op.drop_table("read_floors")
