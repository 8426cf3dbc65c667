"""The clocks and power a trial was timed at (NVML): SM and memory clocks in MHz, board power in W.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("sm_mhz", "mem_mhz", "power_w")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
