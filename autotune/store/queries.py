"""Queries shared by the store and the records files: lookups by natural key, fastest OK trials, counts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.store import models as orm
from autotune.store.rows import usable

PROBLEM_ORDER = (
    orm.Problem.gpu_name,
    orm.Problem.op,
    orm.Problem.trans,
    orm.Problem.dtype,
    orm.Problem.m,
    orm.Problem.n,
    orm.Problem.k,
)
# Fastest first; ties broken by columns that are the same in every database holding the trial, so that
# exports are deterministic.
TRIAL_ORDER = (orm.Trial.time_us, orm.Trial.config_key, orm.Trial.source_hash)


def problem_filters(**values: Any) -> list[ColumnElement[bool]]:
    """Equality filters on problem columns, skipping the ones given as None."""
    return [getattr(orm.Problem, name) == value for name, value in values.items() if value is not None]


def _source_filter(source_hash: str | None) -> list[ColumnElement[bool]]:
    return [] if source_hash is None else [orm.Trial.source_hash == source_hash]


def ranked_ok(
    session: Session, filters: list[ColumnElement[bool]], source_hash: str | None, *, top: int = 1
) -> list[tuple[orm.Problem, orm.Trial]]:
    """The `top` fastest OK trials of every problem matching `filters`, problem by problem."""
    return _top_ok(session, (orm.Trial.problem_id,), [*filters, *_source_filter(source_hash)], top, by_rank=True)


def ranked_by_source(session: Session, top: int) -> list[tuple[orm.Problem, orm.Trial]]:
    """The `top` fastest OK trials of every problem and kernel source, problem by problem and each
    problem's fastest first over all its sources."""
    return _top_ok(session, (orm.Trial.problem_id, orm.Trial.source_hash), [], top, by_rank=False)


def _top_ok(
    session: Session, partition: tuple[Any, ...], filters: list[ColumnElement[bool]], top: int, *, by_rank: bool
) -> list[tuple[orm.Problem, orm.Trial]]:
    """The `top` fastest OK trials of each `partition` among the trials `filters` keep, ordered by
    problem, then by rank within the partition (`by_rank`) or by time over all partitions."""
    rank = func.row_number().over(partition_by=partition, order_by=TRIAL_ORDER).label("rank")
    ranked = (
        select(orm.Trial.id.label("trial_id"), rank)
        .join(orm.Problem, orm.Problem.id == orm.Trial.problem_id)
        .where(*filters)
        .where(orm.Trial.status == Status.OK, orm.Trial.time_us.is_not(None))
        .subquery()
    )
    stmt = (
        select(orm.Problem, orm.Trial)
        .join(orm.Trial, orm.Trial.problem_id == orm.Problem.id)
        .join(ranked, ranked.c.trial_id == orm.Trial.id)
        .where(ranked.c.rank <= top)
        .order_by(*PROBLEM_ORDER, *((ranked.c.rank,) if by_rank else TRIAL_ORDER))
    )
    return [(problem, trial) for problem, trial in session.execute(stmt)]


# Ranked OK trials looked at per problem for its best: a few rows an older autotune let in (see
# rows.usable) must not hide the problem's usable best behind them.
_RANKED = 8


def first_usable(
    session: Session, filters: list[ColumnElement[bool]], source_hash: str | None
) -> list[tuple[orm.Problem, orm.Trial]]:
    """The fastest usable OK trial of every problem matching `filters`."""
    seen: set[int] = set()
    found = []
    for problem, trial in ranked_ok(session, filters, source_hash, top=_RANKED):
        if problem.id not in seen and usable(trial, problem):
            seen.add(problem.id)
            found.append((problem, trial))
    return found


def final_counts(
    session: Session, filters: list[ColumnElement[bool]], source_hash: str | None
) -> dict[int, tuple[int, int]]:
    """problem id -> (final trials, OK trials); a running trial is not final."""
    ok = func.sum(case((orm.Trial.status == Status.OK, 1), else_=0))
    stmt = (
        select(orm.Trial.problem_id, func.count(), ok)
        .join(orm.Problem, orm.Problem.id == orm.Trial.problem_id)
        .where(*filters, *_source_filter(source_hash), orm.Trial.status != Status.RUNNING)
        .group_by(orm.Trial.problem_id)
    )
    return {pid: (int(total), int(oks or 0)) for pid, total, oks in session.execute(stmt)}


def find_trial(session: Session, problem_id: int, key: str, source_hash: str) -> orm.Trial | None:
    stmt = select(orm.Trial).where(
        orm.Trial.problem_id == problem_id, orm.Trial.config_key == key, orm.Trial.source_hash == source_hash
    )
    return session.scalars(stmt).one_or_none()


def find_problem(session: Session, problem: Problem, gpu_name: str) -> orm.Problem | None:
    filters = problem_filters(gpu_name=gpu_name, **orm.problem_columns(problem))
    return session.scalars(select(orm.Problem).where(*filters)).one_or_none()


def get_or_create_problem(session: Session, problem: Problem, gpu_name: str) -> orm.Problem:
    found = find_problem(session, problem, gpu_name)
    if found is not None:
        return found
    row = orm.Problem(gpu_name=gpu_name, **orm.problem_columns(problem))
    try:
        # A savepoint: on a server database another process may insert the same problem first.
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        found = find_problem(session, problem, gpu_name)
        if found is None:
            raise
        return found
    return row


def new_gpu(info: GpuInfo) -> orm.Gpu:
    return orm.Gpu(**{name: getattr(info, name) for name in orm.GPU_FIELDS})
