"""Initial schema: gpus, problems, trials, crashes, shipped_imports.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the values at this revision: a migration must not change when the code does.
STATUSES = (
    "running",
    "ok",
    "invalid",
    "compile_error",
    "launch_error",
    "wrong_result",
    "timeout",
    "crashed",
    "quarantined",
)


def _created_at(name: str = "created_at", nullable: bool = False) -> sa.Column[sa.DateTime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("uuid", sa.String(), nullable=False),
        sa.Column("compute_capability", sa.String(), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=False),
        sa.Column("l2_bytes", sa.BigInteger(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("driver", sa.String(), nullable=False),
        sa.Column("cuda", sa.String(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_gpus"),
        sa.UniqueConstraint("uuid", name="uq_gpus_uuid"),
    )
    op.create_table(
        "problems",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu_name", sa.String(), nullable=False),
        sa.Column("op", sa.String(), nullable=False),
        sa.Column("dtype", sa.String(), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        _created_at(),
        sa.PrimaryKeyConstraint("id", name="pk_problems"),
        sa.UniqueConstraint("gpu_name", "op", "dtype", "m", "n", name="uq_problems_gpu_name_op_dtype_m_n"),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("config_key", sa.String(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.Enum(*STATUSES, name="status", native_enum=False, length=16), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=True),
        sa.Column("times_us", sa.JSON(), nullable=False),
        sa.Column("gbs", sa.Float(), nullable=True),
        sa.Column("rel_error", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("source_hash", sa.String(), nullable=False),
        sa.Column("nvcc", sa.String(), nullable=False),
        sa.Column("pycuda", sa.String(), nullable=False),
        sa.Column("driver", sa.String(), nullable=False),
        sa.Column("cuda", sa.String(), nullable=False),
        sa.Column("origin", sa.String(), nullable=False),
        _created_at(),
        _created_at("finished_at", nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name="fk_trials_gpu_id_gpus"),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name="fk_trials_problem_id_problems"),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.UniqueConstraint(
            "problem_id", "config_key", "source_hash", name="uq_trials_problem_id_config_key_source_hash"
        ),
    )
    op.create_index("ix_trials_problem_id_status", "trials", ["problem_id", "status"])
    op.create_table(
        "crashes",
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column("config_key", sa.String(), nullable=False),
        sa.Column("source_hash", sa.String(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        _created_at("last_at"),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name="fk_crashes_problem_id_problems"),
        sa.PrimaryKeyConstraint("problem_id", "config_key", "source_hash", name="pk_crashes"),
    )
    op.create_table(
        "shipped_imports",
        sa.Column("file_name", sa.String(), nullable=False),
        sa.Column("sha256", sa.String(), nullable=False),
        _created_at("imported_at"),
        sa.PrimaryKeyConstraint("file_name", name="pk_shipped_imports"),
    )


def downgrade() -> None:
    op.drop_table("shipped_imports")
    op.drop_table("crashes")
    op.drop_index("ix_trials_problem_id_status", table_name="trials")
    op.drop_table("trials")
    op.drop_table("problems")
    op.drop_table("gpus")
