"""The int4 weight-only op (qgemm) gains the compiled parameter `chain` on the problems its CUDA-core GEMV
serves (one row of float16 x): the products that GEMV sums in each half of a pair before it widens the
pair to float (kernels/qgemm/qgemm_simt.cu: CHAIN). Every stored qgemm config of such a problem that
names `rpw` and not `chain` gains "chain": 2, what its kernels summed, so that it stays a point of the
space (a config the space does not hold is passed over: autotune/store/queries.py). Trials and crash
counts are rewritten, key and all; the downgrade takes the key off the configs where it is 2 (a config
of 4 has no earlier name: left).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = {"chain": 2}  # the kernels as they were

_problems = sa.table(
    "problems",
    sa.column("id", sa.Integer),
    sa.column("op", sa.String),
    sa.column("dtype", sa.String),
    sa.column("m", sa.Integer),
)

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


def _moved(config: Any, up: bool) -> dict[str, Any] | None:
    """The config as the other side of this revision names it, or None where nothing changes."""
    if not isinstance(config, dict):
        return None
    if up:
        if "rpw" not in config:  # the tensor-core kernels' problems: no CUDA-core GEMV, no chain
            return None
        added = {name: value for name, value in BEFORE.items() if name not in config}
        return {**config, **added} if added else None
    if all(config.get(name) == value for name, value in BEFORE.items()):
        return {name: value for name, value in config.items() if name not in BEFORE}
    return None


def _rewrite(up: bool) -> None:
    bind = op.get_bind()
    served = (_problems.c.op == "qgemm", _problems.c.dtype == "float16", _problems.c.m == 1)
    ids = list(bind.execute(sa.select(_problems.c.id).where(*served)).scalars())
    if not ids:
        return
    found = bind.execute(sa.select(_trials.c.id, _trials.c.config).where(_trials.c.problem_id.in_(ids))).all()
    for trial_id, stored in found:
        config = _moved(json.loads(stored) if isinstance(stored, str) else stored, up)
        if config is not None:
            bind.execute(
                _trials.update().where(_trials.c.id == trial_id).values(config=config, config_key=_key(config))
            )
    crashes = bind.execute(
        sa.select(_crashes.c.problem_id, _crashes.c.config_key, _crashes.c.source_hash).where(
            _crashes.c.problem_id.in_(ids)
        )
    ).all()
    for problem_id, key, source in crashes:
        try:
            config = _moved(json.loads(key), up)
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
