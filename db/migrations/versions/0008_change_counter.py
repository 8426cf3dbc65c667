"""A counter of writes to what the selector reads, kept by SQLite triggers: the launch path's
selection table (autotune/store/selection_table.py) is current while the count it was made at still holds.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The tables whose rows the selector reads. Any insert, update or delete of one of their rows,
# by any program, adds one to the count: autotune/store/selection_table.py names the same triggers.
WATCHED = ("gpus", "problems", "trials", "shipped_imports")
EVENTS = ("insert", "update", "delete")


def trigger_name(table: str, event: str) -> str:
    return f"change_counter_{table}_{event}"


def upgrade() -> None:
    op.create_table(
        "change_counter",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("changes", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_change_counter"),
    )
    op.execute("INSERT INTO change_counter (id, changes) VALUES (1, 0)")
    if op.get_bind().dialect.name != "sqlite":
        return  # only SQLite files are read by the launch path without the store
    for table in WATCHED:
        for event in EVENTS:
            op.execute(
                f"CREATE TRIGGER {trigger_name(table, event)} AFTER {event.upper()} ON {table} "
                "BEGIN UPDATE change_counter SET changes = changes + 1 WHERE id = 1; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table in WATCHED:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS {trigger_name(table, event)}")
    op.drop_table("change_counter")
