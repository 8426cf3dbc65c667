"""Queries shared by the store and the records files: lookups by natural key, fastest OK trials, counts.

A stored trial answers (as a problem's best, as a leader the cost model learns from, in the
selection table) only where it is admitted: a usable row (rows.usable) whose config, for our
kernels, is a point of its problem's space. A row written by another program, or one a later
version's narrower space no longer holds, is passed over, and the next row answers: the ranking
looks further down a problem's trials until it finds as many admitted ones as it was asked for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autotune import ops
from autotune.core import gpus
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import Space
from autotune.core.target import targeting
from autotune.store import models as orm
from autotune.store.rows import sound_capability, usable

PROBLEM_ORDER = (
    orm.Problem.gpu_name,
    orm.Problem.op,
    orm.Problem.trans,
    orm.Problem.dtype,
    orm.Problem.m,
    orm.Problem.n,
    orm.Problem.k,
    orm.Problem.input_dtypes,
    orm.Problem.variant,
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
    """The `top` fastest admitted OK trials of every problem and kernel source, problem by problem
    and each problem's fastest first over all its sources."""
    partition = (orm.Trial.problem_id, orm.Trial.source_hash)
    return _admitted(
        session,
        lambda depth: _top_ok(session, partition, [], depth, by_rank=False),
        lambda problem, trial: (problem.id, trial.source_hash),
        top,
    )


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


# Ranked OK trials first looked at per problem for its best; where none of them is admitted, the
# ranking looks DEEPER times as far, and so on until it finds one or the problem has no more.
_RANKED = 8
DEEPER = 8


def first_usable(
    session: Session, filters: list[ColumnElement[bool]], source_hash: str | None
) -> list[tuple[orm.Problem, orm.Trial]]:
    """The fastest admitted OK trial of every problem matching `filters`."""
    return _admitted(
        session,
        lambda depth: ranked_ok(session, filters, source_hash, top=depth),
        lambda problem, trial: problem.id,
        1,
        depth=_RANKED,
    )


def leading_trials(session: Session, problem_id: int, source_hash: str, top: int) -> list[orm.Trial]:
    """The `top` fastest admitted OK trials of the problem with that kernel source, fastest first."""
    ranked = _admitted(
        session,
        lambda depth: ranked_ok(session, [orm.Trial.problem_id == problem_id], source_hash, top=depth),
        lambda problem, trial: problem.id,
        top,
    )
    return [trial for _, trial in ranked]


Ranked = list[tuple[orm.Problem, orm.Trial]]


def _admitted(
    session: Session,
    ranked: Callable[[int], Ranked],
    partition: Callable[[orm.Problem, orm.Trial], Hashable],
    top: int,
    *,
    depth: int | None = None,
) -> Ranked:
    """The first `top` admitted rows of each partition of `ranked(depth)` (the `depth` fastest OK
    trials of each partition, in its order), asked again DEEPER times as deep while a partition
    filled its `depth` rows without `top` admitted ones: nothing admitted hides behind rows that are not."""
    admits = Admission(session)
    depth = max(top, depth or top)
    while True:
        rows = ranked(depth)
        held: Counter[Hashable] = Counter(partition(problem, trial) for problem, trial in rows)
        taken: Counter[Hashable] = Counter()
        found = []
        for problem, trial in rows:
            key = partition(problem, trial)
            if taken[key] < top and admits(problem, trial):
                taken[key] += 1
                found.append((problem, trial))
        if all(held[key] < depth or taken[key] >= top for key in held):
            return found
        depth *= DEEPER


class Admission:
    """Whether a stored OK trial may answer: a usable row (rows.usable) and, for our kernels, a config
    its problem's space holds, that space built for the compute capability the selector targets for
    the problem's GPU (choose.Selector._capability). cuBLASLt's configs name an algorithm of the
    library, not a point of our spaces: usable is all they need."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._spaces: dict[int, Space | None] = {}
        self._capabilities: dict[str, str | None] = {}

    def __call__(self, problem: orm.Problem, trial: orm.Trial) -> bool:
        if not usable(trial, problem):
            return False
        if ops.library_of_source(trial.source_hash) is not None:  # a library's rank: no space of ours
            return True
        space = self._space(problem)
        return space is not None and space.check(trial.config) is None

    def _space(self, problem: orm.Problem) -> Space | None:
        if problem.id not in self._spaces:
            try:
                core = orm.core_problem(problem)
                with targeting(self._capability(problem.gpu_name)):
                    self._spaces[problem.id] = ops.for_problem(core).space(core)
            except (AutotuneError, ValueError, TypeError):  # a problem no kernel of ours serves
                self._spaces[problem.id] = None
        return self._spaces[problem.id]

    def _capability(self, gpu_name: str) -> str | None:
        """The one compute capability stored for GPUs of this name, else the described model's."""
        if gpu_name not in self._capabilities:
            stmt = select(orm.Gpu.compute_capability).where(orm.Gpu.name == gpu_name).distinct()
            found = {capability for capability in self._session.scalars(stmt) if sound_capability(capability)}
            self._capabilities[gpu_name] = found.pop() if len(found) == 1 else gpus.capability(gpu_name)
        return self._capabilities[gpu_name]


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
