"""The queue of problems to tune, shared through the database by every machine of a fleet.

A machine claims one problem at a time for a lease it renews while it tunes; a claim whose lease ran
out (its machine died) or whose owner is provably gone on this host (in the same boot and pid
namespace: autotune/store/owner.py) is taken over by the next claim.
PostgreSQL locks the rows a claim looks at with `FOR UPDATE SKIP LOCKED`, so two machines never
claim the same row; SQLite's write transactions take the database's write lock up front, which
serializes claims just the same."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autotune.core.asked import Asked
from autotune.core.errors import AutotuneWarning
from autotune.core.problem import Problem
from autotune.store import models as orm
from autotune.store import owner as owners
from autotune.store.queries import PROBLEM_ORDER, get_or_create_problem, problem_filters
from autotune.store.rows import as_utc, stored_problem

QUEUE = orm.QUEUE


@dataclass(frozen=True)
class Claim:
    """A problem this process holds the claim on until it releases it or its lease ends."""

    problem: Problem
    problem_id: int
    gpu_name: str
    owner: str


@dataclass(frozen=True)
class QueueRow:
    gpu_name: str
    problem: Problem
    state: str
    asked: int
    owner: str | None  # "host pid" of the claiming (or last) process
    lease_until: datetime | None
    claims: int
    queued_at: datetime | None  # None where the stored text is not a date (a damaged row)
    done_at: datetime | None


@dataclass(frozen=True)
class Look:
    """What a claim attempt found: the claim, or none and whether other live claims hold some."""

    claim: Claim | None
    held_by_others: int


def _problem(row: orm.Problem) -> Problem | None:
    """The row's problem, None where a records file could not hold it (a row written straight in):
    such a problem is neither claimed nor listed, so no sweep meets its sizes."""
    return stored_problem(row)


def _queue_row(session: Session, problem_id: int) -> orm.Queued | None:
    return session.get(orm.Queued, problem_id)


def enqueue(session: Session, gpu_name: str, problems: Sequence[Problem]) -> list[int]:
    """Queue each problem for GPUs of this name (one already queued stays as it is); returns the
    problems' ids in the order given."""
    ids = []
    for problem in problems:
        row = get_or_create_problem(session, problem, gpu_name)
        session.flush()
        ids.append(row.id)
        if _queue_row(session, row.id) is None:
            _insert(session, orm.Queued(problem_id=row.id, state=QUEUE.PENDING, asked=0, claims=0))
    return ids


def _insert(session: Session, row: orm.Queued) -> orm.Queued:
    """Insert a queue row; where another machine inserted it first, its row is the one kept."""
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        found = _queue_row(session, row.problem_id)
        if found is None:
            raise
        return found
    return row


def note_asked(session: Session, gpu_name: str, asked: Mapping[Problem, Asked]) -> None:
    """Add the launch path's counts of problems it met untuned. A problem asked for again after it
    was tuned goes back to pending: its tuning does not answer it (a new kernel source, say)."""
    for problem, seen in asked.items():
        row = get_or_create_problem(session, problem, gpu_name)
        session.flush()
        queued = _queue_row(session, row.id) or _insert(
            session, orm.Queued(problem_id=row.id, state=QUEUE.PENDING, asked=0, claims=0)
        )
        queued.asked += seen.count
        if queued.first_asked is None or seen.first < as_utc(queued.first_asked):
            queued.first_asked = seen.first
        if queued.last_asked is None or seen.last > as_utc(queued.last_asked):
            queued.last_asked = seen.last
        if queued.state == QUEUE.DONE:
            queued.state = QUEUE.PENDING


def _claimable(queued: orm.Queued, now: datetime, since: datetime | None) -> bool | None:
    """True: ours to claim; False: not to be tuned by us now; None: a live process holds it."""
    if queued.state == QUEUE.PENDING:
        return True
    if queued.state == QUEUE.DONE:
        # Tuned by another machine while this sweep ran: done. Tuned before: claimed again, and the
        # sweep's budget (which counts stored trials) decides whether anything is left to measure.
        return since is None or queued.done_at is None or as_utc(queued.done_at) < since
    lease = queued.lease_until
    if lease is None or as_utc(lease) <= now or owners.gone_here(queued.owner):
        return True
    return None


def claim_next(
    session: Session,
    gpu_name: str,
    me: str,
    lease: timedelta,
    *,
    among: Sequence[int] | None = None,
    since: datetime | None = None,
) -> Look:
    """Claim the next problem of GPUs of this name: of `among` (problem ids, in that order, done
    ones again unless done since `since`), else the pending ones, most asked first."""
    stmt = (
        select(orm.Queued, orm.Problem)
        .join(orm.Problem, orm.Problem.id == orm.Queued.problem_id)
        .where(orm.Problem.gpu_name == gpu_name)
    )
    if among is not None:
        stmt = stmt.where(orm.Queued.problem_id.in_(among))
    else:
        stmt = stmt.where(orm.Queued.state != QUEUE.DONE)
    if session.get_bind().dialect.name == "postgresql":
        # Rows another machine is claiming right now are skipped, not waited for.
        stmt = stmt.with_for_update(skip_locked=True, of=orm.Queued)
    found = [(queued, problem) for queued, problem in session.execute(stmt)]
    if among is not None:
        order = {problem_id: index for index, problem_id in enumerate(among)}
        found.sort(key=lambda pair: (pair[0].state == QUEUE.DONE, order[pair[0].problem_id]))
    else:
        found.sort(key=lambda pair: (-pair[0].asked, pair[0].problem_id))
    now = orm.utcnow()
    held = 0
    for queued, row in found:
        problem = _problem(row)
        if problem is None or not _readable(queued):
            continue
        verdict = _claimable(queued, now, since)
        if verdict is None:
            held += 1
        elif verdict:
            queued.state, queued.owner = QUEUE.CLAIMED, me
            queued.lease_until = now + lease
            queued.claims += 1
            return Look(Claim(problem, row.id, gpu_name, me), held)
    return Look(None, held)


def _held(session: Session, claim: Claim) -> orm.Queued | None:
    queued = _queue_row(session, claim.problem_id)
    if queued is None or queued.state != QUEUE.CLAIMED or queued.owner != claim.owner:
        return None
    return queued


def renew(session: Session, claim: Claim, lease: timedelta) -> bool:
    """Extend the claim's lease; False where it is no longer ours (taken over after it ran out)."""
    queued = _held(session, claim)
    if queued is None:
        return False
    queued.lease_until = orm.utcnow() + lease
    return True


def release(session: Session, claim: Claim, *, done: bool) -> bool:
    """End the claim: the problem is done, or back to pending for the next machine. False where the
    claim was no longer ours, and the row is left to whoever holds it now."""
    queued = _held(session, claim)
    if queued is None:
        return False
    queued.state = QUEUE.DONE if done else QUEUE.PENDING
    queued.lease_until = None
    if done:
        queued.done_at = orm.utcnow()
    else:
        queued.owner = None
    return True


def rows(session: Session, gpu_name: str | None = None) -> list[QueueRow]:
    stmt = (
        select(orm.Queued, orm.Problem)
        .join(orm.Problem, orm.Problem.id == orm.Queued.problem_id)
        .where(*problem_filters(gpu_name=gpu_name))
        .order_by(*PROBLEM_ORDER)
    )
    listed = [(queued, row, _problem(row)) for queued, row in session.execute(stmt)]
    unusable = sum(problem is None or not _readable(queued) for queued, row, problem in listed)
    if unusable:  # a row written straight in, or damaged: never claimed, so it would wait unseen for ever
        warnings.warn(
            f"{unusable} queue row{'s' if unusable > 1 else ''} name no problem a records file could hold, or"
            " hold values of another type: passed over, never claimed (a damaged or foreign database?)",
            AutotuneWarning,
            stacklevel=3,
        )
    return [
        QueueRow(
            gpu_name=row.gpu_name,
            problem=problem,
            state=queued.state,
            asked=queued.asked,
            owner=_host_and_pid(queued.owner),
            lease_until=None if queued.lease_until is None else as_utc(queued.lease_until),
            claims=queued.claims,
            queued_at=None if queued.queued_at is None else as_utc(queued.queued_at),
            done_at=None if queued.done_at is None else as_utc(queued.done_at),
        )
        for queued, row, problem in listed
        if problem is not None and _readable(queued)
    ]


_STATES = frozenset((QUEUE.PENDING, QUEUE.CLAIMED, QUEUE.DONE))


def _readable(queued: orm.Queued) -> bool:
    """Whether a queue row reads as one: SQLite keeps any text in any column. A date that is not one
    reads as None (models.LenientDateTime) and is listed as unknown, as the claims take the row; a
    state none of QUEUE's, or a count or an owner of another type, is passed over by both the claims
    and the listing (which warns), not a failed listing and not a claim of a row nobody wrote."""
    counts = (queued.asked, queued.claims)
    return (
        queued.state in _STATES
        and all(type(count) is int for count in counts)
        and (queued.owner is None or isinstance(queued.owner, str))
    )


def _host_and_pid(owner_text: str | None) -> str | None:
    owner = owners.Owner.parse(owner_text)
    return None if owner is None else f"{owner.hostname} {owner.pid}"
