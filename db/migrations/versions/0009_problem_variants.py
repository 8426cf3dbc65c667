"""Problems gain input_dtypes (each input array's dtype where they differ from the output's, joined
by commas) and variant (a form of the op it defines): "" on every existing row, the problem it was.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_UNIQUE = "uq_problems_gpu_name_op_dtype_m_n_k_trans"
NEW_UNIQUE = "uq_problems_gpu_name_op_dtype_m_n_k_trans_input_dtypes_variant"
OLD_KEY = ["gpu_name", "op", "dtype", "m", "n", "k", "trans"]
EVENTS = ("insert", "update", "delete")


def _count_changes_again() -> None:
    """SQLite's batch mode rebuilds the problems table, and its change-counter triggers (0008) go
    with the old one: the selection table would never be current again without them."""
    if op.get_bind().dialect.name != "sqlite":
        return
    for event in EVENTS:
        name = f"change_counter_problems_{event}"
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute(
            f"CREATE TRIGGER {name} AFTER {event.upper()} ON problems "
            "BEGIN UPDATE change_counter SET changes = changes + 1 WHERE id = 1; END"
        )


def upgrade() -> None:
    with op.batch_alter_table("problems") as batch:
        batch.add_column(sa.Column("input_dtypes", sa.String(), server_default="", nullable=False))
        batch.add_column(sa.Column("variant", sa.String(), server_default="", nullable=False))
        batch.drop_constraint(OLD_UNIQUE, type_="unique")
        batch.create_unique_constraint(NEW_UNIQUE, [*OLD_KEY, "input_dtypes", "variant"])
    _count_changes_again()


def downgrade() -> None:
    # Only problems whose inputs share the output's dtype, in the op's plain form, fit the older schema.
    named = "SELECT id FROM problems WHERE input_dtypes <> '' OR variant <> ''"
    for table in ("queue", "crashes", "trials"):
        op.execute(f"DELETE FROM {table} WHERE problem_id IN ({named})")
    op.execute("DELETE FROM problems WHERE input_dtypes <> '' OR variant <> ''")
    with op.batch_alter_table("problems") as batch:
        batch.drop_constraint(NEW_UNIQUE, type_="unique")
        batch.create_unique_constraint(OLD_UNIQUE, OLD_KEY)
        batch.drop_column("variant")
        batch.drop_column("input_dtypes")
    _count_changes_again()
