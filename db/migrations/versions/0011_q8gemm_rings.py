"""The 8-bit weight-only op (q8gemm) gains the compiled parameter `ring` (stages of registers the
tensor-core kernel rotates), and its tensor-core kernel joins M = 1, where the space so far had no
`mma` and `stage`. Every stored q8gemm config gains the keys it lacks at the kernels it was measured
with: "ring": 1 everywhere, "mma": 0 and "stage": 0 at M = 1 (the CUDA-core kernel), so that it stays
a point of the space (a config the space does not hold is passed over: autotune/store/queries.py).
Trials and crash counts are rewritten, key and all; the downgrade takes the keys off the configs
that have them at those values (a tensor-core config at M = 1 or a ring has no earlier name: left).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RING = {"ring": 1}  # one stage: the kernels as they were
ONE_ROW = {"mma": 0, "stage": 0}  # M = 1 before the tensor cores joined it

_problems = sa.table("problems", sa.column("id", sa.Integer), sa.column("op", sa.String), sa.column("m", sa.Integer))
_trials = sa.table(
    "trials",
    sa.column("id", sa.Integer),
    sa.column("problem_id", sa.Integer),
    sa.column("config", sa.JSON),
    sa.column("config_key", sa.String),
)
_crashes = sa.table(
    "crashes",
    sa.column("problem_id", sa.Integer),
    sa.column("config_key", sa.String),
    sa.column("source_hash", sa.String),
)


def _key(config: dict[str, Any]) -> str:
    """autotune.core.space.config_key, as of this revision."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _moved(config: Any, m: int, up: bool) -> dict[str, Any] | None:
    """The config as the other side of this revision names it, or None where nothing changes."""
    if not isinstance(config, dict):
        return None
    keys = {**RING, **(ONE_ROW if m == 1 else {})}
    if up:
        added = {name: value for name, value in keys.items() if name not in config}
        return {**config, **added} if added else None
    if all(config.get(name) == value for name, value in keys.items()):
        return {name: value for name, value in config.items() if name not in keys}
    return None


def _rewrite(up: bool) -> None:
    bind = op.get_bind()
    rows = sa.select(_problems.c.id, _problems.c.m).where(_problems.c.op == "q8gemm")
    m_of = {problem_id: m for problem_id, m in bind.execute(rows).all()}
    if not m_of:
        return
    found = bind.execute(
        sa.select(_trials.c.id, _trials.c.problem_id, _trials.c.config).where(_trials.c.problem_id.in_(list(m_of)))
    ).all()
    for trial_id, problem_id, stored in found:
        config = _moved(json.loads(stored) if isinstance(stored, str) else stored, m_of[problem_id], up)
        if config is not None:
            bind.execute(
                _trials.update().where(_trials.c.id == trial_id).values(config=config, config_key=_key(config))
            )
    crashes = bind.execute(
        sa.select(_crashes.c.problem_id, _crashes.c.config_key, _crashes.c.source_hash).where(
            _crashes.c.problem_id.in_(list(m_of))
        )
    ).all()
    for problem_id, key, source in crashes:
        try:
            config = _moved(json.loads(key), m_of[problem_id], up)
        except ValueError:  # a key that is no config's text: left as it is
            continue
        if config is not None:
            bind.execute(
                _crashes.update()
                .where(
                    _crashes.c.problem_id == problem_id,
                    _crashes.c.config_key == key,
                    _crashes.c.source_hash == source,
                )
                .values(config_key=_key(config))
            )


def upgrade() -> None:
    _rewrite(up=True)


def downgrade() -> None:
    _rewrite(up=False)
