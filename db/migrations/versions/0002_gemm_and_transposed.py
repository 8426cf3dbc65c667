"""Problems gain k (GEMM's reduction length, 0 for GEMV) and trans (the transposed GEMV).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_UNIQUE = "uq_problems_gpu_name_op_dtype_m_n"
NEW_UNIQUE = "uq_problems_gpu_name_op_dtype_m_n_k_trans"


def upgrade() -> None:
    # Existing rows are GEMV problems in the usual layout: k = 0, trans = false.
    with op.batch_alter_table("problems") as batch:
        batch.add_column(sa.Column("k", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("trans", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch.drop_constraint(OLD_UNIQUE, type_="unique")
        batch.create_unique_constraint(NEW_UNIQUE, ["gpu_name", "op", "dtype", "m", "n", "k", "trans"])


def downgrade() -> None:
    # Only GEMV problems in the usual layout can be kept by the older schema.
    op.execute("DELETE FROM crashes WHERE problem_id IN (SELECT id FROM problems WHERE k <> 0 OR trans)")
    op.execute("DELETE FROM trials WHERE problem_id IN (SELECT id FROM problems WHERE k <> 0 OR trans)")
    op.execute("DELETE FROM problems WHERE k <> 0 OR trans")
    with op.batch_alter_table("problems") as batch:
        batch.drop_constraint(NEW_UNIQUE, type_="unique")
        batch.create_unique_constraint(OLD_UNIQUE, ["gpu_name", "op", "dtype", "m", "n"])
        batch.drop_column("trans")
        batch.drop_column("k")
