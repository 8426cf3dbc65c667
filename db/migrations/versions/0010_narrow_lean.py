"""The narrow family of the transposed GEMV gains the compiled parameter `lean`: every stored config of
that family (its parameters exactly block, width, vec, unroll, prefetch and per_sm) gains "lean": 0,
the kernel it was measured with, so that it stays a point of the family's space (a config the space
does not hold is passed over: autotune/store/queries.py). Trials and crash counts are rewritten, key
and all; the downgrade takes the key off the configs that have it at 0.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = frozenset({"block", "width", "vec", "unroll", "prefetch", "per_sm"})  # narrow's keys until now
PARAM = "lean"

_problems = sa.table(
    "problems", sa.column("id", sa.Integer), sa.column("op", sa.String), sa.column("trans", sa.Boolean)
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
    """The config as the other side of this revision names it, or None where it is not narrow's."""
    if not isinstance(config, dict):
        return None
    if up and set(config) == BEFORE:
        return {**config, PARAM: 0}
    if not up and set(config) == BEFORE | {PARAM} and config[PARAM] == 0:
        return {k: v for k, v in config.items() if k != PARAM}
    return None


def _transposed_gemvs() -> sa.Select[Any]:
    return sa.select(_problems.c.id).where(_problems.c.op == "gemv", _problems.c.trans == sa.true())


def _rewrite(up: bool) -> None:
    bind = op.get_bind()
    found = bind.execute(
        sa.select(_trials.c.id, _trials.c.config).where(_trials.c.problem_id.in_(_transposed_gemvs()))
    ).all()
    for trial_id, stored in found:
        config = _moved(json.loads(stored) if isinstance(stored, str) else stored, up)
        if config is not None:
            bind.execute(
                _trials.update().where(_trials.c.id == trial_id).values(config=config, config_key=_key(config))
            )
    crashes = bind.execute(
        sa.select(_crashes.c.problem_id, _crashes.c.config_key, _crashes.c.source_hash).where(
            _crashes.c.problem_id.in_(_transposed_gemvs())
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
