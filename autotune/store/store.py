"""The Store: every read and write of tuning results goes through it; callers get plain rows back."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from sqlalchemy import ColumnElement, delete, func, or_, select, union

from autotune import ops
from autotune.core.asked import Asked
from autotune.core.errors import AutotuneError, AutotuneWarning
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import config_key
from autotune.core.timing_bounds import MAX_TIME_US, MIN_TIME_US, is_plausible_time_us
from autotune.store import models as orm
from autotune.store import owner as owners
from autotune.store import queue, records, trials
from autotune.store.database import Database, open_database, sqlite_file
from autotune.store.queries import (
    PROBLEM_ORDER,
    TRIAL_ORDER,
    final_counts,
    find_problem,
    find_trial,
    first_usable,
    get_or_create_problem,
    leading_trials,
    new_gpu,
    problem_filters,
    ranked_by_source,
)
from autotune.store.rows import (
    BestRow,
    GpuRow,
    ProblemSummary,
    Provenance,
    TrialRow,
    as_utc,
    best_row,
    gpu_row,
    readable,
    sound_capability,
    stored_problem,
    trial_row,
    usable,
)
from autotune.store.selection_rows import RankedTrial, SelectionGpu, SelectionRows
from autotune.store.sqlite import NoWritablePlace

MEMORY = "sqlite://"  # an in-memory database: lives as long as its engine


def _library_sources() -> ColumnElement[bool]:
    """Trials of a library family (cuBLASLt's algorithms), by their source hash's prefix."""
    return or_(*(orm.Trial.source_hash.startswith(library.source_prefix) for library in ops.libraries()))


class Store:
    """Tuning results in one database (SQLite file or server)."""

    def __init__(self, db: Database, *, fallback: str | None = None) -> None:
        self.db = db
        # Why the default database could not be opened, where this store is the in-memory stand-in
        # open_store falls back to: what a command writes here is gone when the process ends.
        self.fallback = fallback
        self._owner = owners.this_process()
        self._me = self._owner.text()
        # Trials this store started, id -> config key: finish_trial writes only to these.
        self._started: dict[int, tuple[str, Provenance, dict[str, Any]]] = {}

    @property
    def url(self) -> str:
        """The database URL with its password masked."""
        return self.db.url

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite file this store reads and writes; None for a server database, one in memory,
        and a file opened read-only."""
        return sqlite_file(self.db.engine.url)

    def require_saving(self, action: str) -> None:
        """Refuse (AutotuneError) a command whose only purpose is to write, where this store is the
        in-memory fallback: it would report success and keep nothing."""
        if self.fallback is not None:
            raise AutotuneError(
                f"cannot {action}: {self.fallback}, and the in-memory database answering instead keeps"
                " nothing; give --db or set AUTOTUNE_DB to a database you can write"
            )

    def close(self) -> None:
        owners.release(self._owner)
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # --- GPUs and problems ---------------------------------------------------------------------

    def upsert_gpu(self, info: GpuInfo) -> int:
        """The row id of this physical GPU (by uuid); a new driver or CUDA is written over the old."""
        with self.db.session_scope(write=True) as session:
            gpu = session.scalars(select(orm.Gpu).where(orm.Gpu.uuid == info.uuid)).one_or_none()
            if gpu is None:
                gpu = new_gpu(info)
                session.add(gpu)
            else:
                gpu.driver, gpu.cuda = info.driver, info.cuda
            session.flush()
            return gpu.id

    @overload
    def problem_id(self, problem: Problem, gpu_name: str, *, create: Literal[True] = ...) -> int: ...
    @overload
    def problem_id(self, problem: Problem, gpu_name: str, *, create: bool = ...) -> int | None: ...
    def problem_id(self, problem: Problem, gpu_name: str, *, create: bool = True) -> int | None:
        """The problem's id, the row made where it has none (None for an unknown one when not `create`)."""
        with self.db.session_scope(write=create) as session:
            if not create:
                found = find_problem(session, problem, gpu_name)
                return None if found is None else found.id
            row = get_or_create_problem(session, problem, gpu_name)
            session.flush()
            return row.id

    def gpu_names(self) -> list[str]:
        """Every GPU name that has problems or GPU rows, sorted, each once (SQLite's union keeps a name
        stored as a BLOB apart from the same name as text; models.LenientString reads both as text)."""
        names = union(select(orm.Problem.gpu_name), select(orm.Gpu.name))
        with self.db.session_scope() as session:
            return sorted(set(session.scalars(select(names.subquery().c[0]))))

    def gpus(self) -> list[GpuRow]:
        counts = (
            select(orm.Trial.gpu_id, func.count().label("trials"))
            .where(orm.Trial.status != Status.RUNNING)
            .group_by(orm.Trial.gpu_id)
            .subquery()
        )
        stmt = (
            select(orm.Gpu, func.coalesce(counts.c.trials, 0))
            .outerjoin(counts, counts.c.gpu_id == orm.Gpu.id)
            .order_by(orm.Gpu.name, orm.Gpu.id)
        )
        with self.db.session_scope() as session:
            # A GPU row whose capability CUDA would not write (stored straight in) is passed over.
            return [
                gpu_row(gpu, int(n)) for gpu, n in session.execute(stmt) if sound_capability(gpu.compute_capability)
            ]

    # --- read floors ----------------------------------------------------------------------------

    def record_read_floor(self, info: GpuInfo, nbytes: int, time_us: float, kernel: str) -> None:
        """Store the least time this GPU took to only read `nbytes` (the read floor of that size)."""
        if not (is_plausible_time_us(time_us) and nbytes > 0):
            raise AutotuneError(
                f"a read floor needs a positive size and a time of {MIN_TIME_US} to {MAX_TIME_US:g} us,"
                f" got {nbytes} bytes in {time_us} us"
            )
        gpu_id = self.upsert_gpu(info)
        with self.db.session_scope(write=True) as session:
            session.add(
                orm.ReadFloor(
                    gpu_id=gpu_id, nbytes=nbytes, time_us=time_us, kernel=kernel, driver=info.driver, cuda=info.cuda
                )
            )

    def read_floor(self, gpu_name: str, nbytes: int) -> float | None:
        """The least read time in µs stored for `nbytes` on GPUs of this name, or None."""
        stmt = (
            select(func.min(orm.ReadFloor.time_us))
            .join(orm.Gpu, orm.Gpu.id == orm.ReadFloor.gpu_id)
            .where(orm.Gpu.name == gpu_name, orm.ReadFloor.nbytes == nbytes)
            # A time no read takes (written straight in) would make every kernel look slow beside it.
            .where(orm.ReadFloor.time_us >= MIN_TIME_US, orm.ReadFloor.time_us <= MAX_TIME_US)
        )
        with self.db.session_scope() as session:
            found = session.scalar(stmt)
            return None if found is None else float(found)

    def read_floors(self) -> dict[tuple[str, int], float]:
        """Every stored read floor in one query: the least time per (GPU name, bytes), as read_floor."""
        stmt = (
            select(orm.Gpu.name, orm.ReadFloor.nbytes, func.min(orm.ReadFloor.time_us))
            .join(orm.Gpu, orm.Gpu.id == orm.ReadFloor.gpu_id)
            .where(orm.ReadFloor.time_us >= MIN_TIME_US, orm.ReadFloor.time_us <= MAX_TIME_US)
            .group_by(orm.Gpu.name, orm.ReadFloor.nbytes)
        )
        with self.db.session_scope() as session:
            return {(name, int(nbytes)): float(time_us) for name, nbytes, time_us in session.execute(stmt)}

    # --- trials of a sweep -----------------------------------------------------------------------

    def completed_trials(self, problem_id: int, source_hash: str) -> list[TrialRow]:
        """Trials of the problem with that kernel source in any final status (running ones are redone)."""
        stmt = (
            select(orm.Trial)
            .where(orm.Trial.problem_id == problem_id, orm.Trial.source_hash == source_hash)
            .where(orm.Trial.status != Status.RUNNING)
            .order_by(orm.Trial.id)
        )
        with self.db.session_scope() as session:
            return [trial_row(t) for t in session.scalars(stmt) if usable(t)]

    def earlier_best(self, problem_id: int, source_hash: str, top: int) -> list[TrialRow]:
        """The `top` fastest OK trials of the problem measured with another kernel source: after a
        kernel edit, still the likeliest configs to be fast, so a re-sweep measures them first.
        cuBLASLt's trials (a source hash of their own) are not an earlier kernel of ours: its
        configs name algorithms, and its times would be the mark a re-time compares ours with."""
        stmt = (
            select(orm.Trial)
            .where(orm.Trial.problem_id == problem_id, orm.Trial.source_hash != source_hash)
            .where(~_library_sources())
            .where(orm.Trial.status == Status.OK, orm.Trial.time_us.is_not(None))
            .order_by(*TRIAL_ORDER)
            .limit(top)
        )
        with self.db.session_scope() as session:
            return [trial_row(t) for t in session.scalars(stmt) if usable(t)]

    def start_trial(self, where: Provenance, config: Mapping[str, Any]) -> int:
        """Claim this config's row for this store and commit before the work is dispatched. A new
        row, or one a process that is gone left running, becomes running: a killed sweep leaves a
        row that says so. A final row measured again keeps its outcome until ours replaces it, so a
        kill loses nothing; a row another live sweep is measuring is left to it (both measure the
        same config; the first final outcome is kept)."""
        key = config_key(config)
        with self.db.session_scope(write=True) as session:
            trial = trials.claim(session, where, config, self._me)
            self._started[trial.id] = (key, where, dict(config))
            return trial.id

    def finish_trial(self, trial_id: int, outcome: Outcome) -> None:
        """Store the outcome of a trial this store started. Refused (AutotuneError) where the row is
        gone or holds another config; where another process finished the same config first, its
        outcome stays."""
        if outcome.status is Status.RUNNING:
            raise ValueError("finish_trial needs a final outcome, not running")
        started = self._started.get(trial_id)
        if started is None:
            raise AutotuneError(f"trial {trial_id} was not started by this store: it is not ours to finish")
        key, where, config = started
        with self.db.session_scope(write=True) as session:
            trial = session.get(orm.Trial, trial_id)
            if trial is None:
                raise AutotuneError(f"trial {trial_id} is no longer in {self.url}: it was dropped as unfinished")
            if trial.config_key != key:
                raise AutotuneError(f"trial {trial_id} in {self.url} holds config {trial.config_key}, not {key}")
            del self._started[trial_id]
            if trial.status is not Status.RUNNING and trial.owner != self._me:
                return  # another sweep finished or claimed this config since: its outcome stands
            trials.finish(trial, where, config, outcome, self._me)

    def record_trial(self, where: Provenance, config: Mapping[str, Any], outcome: Outcome) -> int:
        """A final trial in one step (invalid configs, compile errors); an existing final row is kept."""
        if outcome.status is Status.RUNNING:
            raise ValueError("record_trial needs a final outcome, not running")
        with self.db.session_scope(write=True) as session:
            existing = find_trial(session, where.problem_id, config_key(config), where.source_hash)
            if existing is not None and existing.status is not Status.RUNNING:
                return existing.id
            trial = trials.begin(session, where, config, self._me)
            trials.apply_outcome(trial, outcome)
            session.flush()
            return trial.id

    def leaders(self, problem_id: int, source_hash: str, top: int) -> list[TrialRow]:
        """The `top` fastest admitted OK trials (queries.Admission) of the problem with that kernel
        source, fastest first."""
        with self.db.session_scope() as session:
            return [trial_row(t) for t in leading_trials(session, problem_id, source_hash, top)]

    def add_round(self, trial_id: int, outcome: Outcome) -> None:
        """One more measurement of an OK trial on another set of buffers. Every sample is kept and
        the trial keeps the slowest median of its rounds; a round that fails makes the trial fail."""
        if outcome.status is Status.RUNNING:
            raise ValueError("add_round needs a final outcome, not running")
        with self.db.session_scope(write=True) as session:
            trial = session.get(orm.Trial, trial_id)
            if trial is not None and trial.status is Status.RUNNING:
                return  # another sweep measures this config afresh; its outcome will stand
            if trial is None or trial.status is not Status.OK or trial.time_us is None:
                raise AutotuneError(f"trial {trial_id} is not an OK trial in {self.url}")
            trial.rounds += 1
            trial.times_us = [*trial.times_us, *(t for t in outcome.times_us if math.isfinite(t))]
            trial.finished_at = orm.utcnow()
            if not outcome.ok or outcome.time_us is None:
                trial.status, trial.time_us, trial.gbs = outcome.status, None, None
                trial.message = f"round {trial.rounds}, on fresh buffers: {outcome.message}"
            elif outcome.time_us > trial.time_us:  # the slower round's time, and what it ran at
                trial.time_us, trial.gbs = outcome.time_us, orm.finite(outcome.gbs)
                trials.set_clocks(trial, outcome)

    def drop_unfinished(self, problem_id: int | None = None) -> int:
        """Delete the running rows (of one problem, or all) that this store left or whose owner is
        provably gone: a killed sweep's. Another live sweep's rows stay, on this host or (within
        their lease) another; returns how many were dropped."""
        stmt = select(orm.Trial.id, orm.Trial.owner, orm.Trial.created_at).where(orm.Trial.status == Status.RUNNING)
        if problem_id is not None:
            stmt = stmt.where(orm.Trial.problem_id == problem_id)
        now = orm.utcnow()
        with self.db.session_scope(write=True) as session:
            gone = [
                trial_id
                for trial_id, owner, started_at in session.execute(stmt)
                if owner == self._me or owners.is_gone(owner, as_utc(started_at), now)
            ]
            if gone:
                session.execute(delete(orm.Trial).where(orm.Trial.id.in_(gone)))
            return len(gone)

    def crash_count(self, problem_id: int, config_key: str, source_hash: str) -> int:
        """How often this config ended crashed or timed out: the caller quarantines repeat offenders."""
        with self.db.session_scope() as session:
            crash = session.get(orm.Crash, (problem_id, config_key, source_hash))
            return 0 if crash is None else crash.count

    def note_crash(self, problem_id: int, config_key: str, source_hash: str) -> int:
        """Count one more crash or timeout of this config; returns the new count."""
        with self.db.session_scope(write=True) as session:
            crash = session.get(orm.Crash, (problem_id, config_key, source_hash))
            if crash is None:
                crash = orm.Crash(problem_id=problem_id, config_key=config_key, source_hash=source_hash, count=0)
                session.add(crash)
            crash.count += 1
            crash.last_at = orm.utcnow()
            return crash.count

    # --- the queue a fleet shares (autotune/store/queue.py) ----------------------------------------

    def enqueue(self, gpu_name: str, problems: Sequence[Problem]) -> list[int]:
        """Queue the problems for GPUs of this name; returns their problem ids in the order given."""
        self.require_saving("queue problems")  # a sweep's queue too: its measurements would be lost
        with self.db.session_scope(write=True) as session:
            return queue.enqueue(session, gpu_name, problems)

    def note_asked(self, gpu_name: str, asked: Mapping[Problem, Asked]) -> None:
        """Add the launch path's counts of problems it met untuned on GPUs of this name."""
        if asked:
            with self.db.session_scope(write=True) as session:
                queue.note_asked(session, gpu_name, asked)

    def claim_next(
        self,
        gpu_name: str,
        lease: timedelta,
        *,
        among: Sequence[int] | None = None,
        since: datetime | None = None,
    ) -> queue.Look:
        """Claim the next problem to tune on GPUs of this name (autotune/store/queue.py)."""
        self.require_saving("tune")
        with self.db.session_scope(write=True, serialize=False) as session:
            return queue.claim_next(session, gpu_name, self._me, lease, among=among, since=since)

    def renew_claim(self, claim: queue.Claim, lease: timedelta) -> bool:
        with self.db.session_scope(write=True, serialize=False) as session:
            return queue.renew(session, claim, lease)

    def release_claim(self, claim: queue.Claim, *, done: bool) -> bool:
        with self.db.session_scope(write=True, serialize=False) as session:
            return queue.release(session, claim, done=done)

    def queue_rows(self, gpu_name: str | None = None) -> list[queue.QueueRow]:
        with self.db.session_scope() as session:
            return queue.rows(session, gpu_name)

    # --- results ---------------------------------------------------------------------------------

    def best(self, gpu_name: str, problem: Problem, source_hash: str | None) -> BestRow | None:
        """The fastest OK trial of exactly this problem (of that kernel source when given)."""
        rows = self._best_rows(gpu_name, source_hash, **orm.problem_columns(problem))
        return rows[0] if rows else None

    def vendor_best(self, gpu_name: str, problem: Problem) -> BestRow | None:
        """The fastest OK trial of a library family (cuBLASLt's) of exactly this problem, of any
        library version."""
        filters = [
            *problem_filters(gpu_name=gpu_name, **orm.problem_columns(problem)),
            _library_sources(),
        ]
        with self.db.session_scope() as session:
            found = first_usable(session, filters, None)
            if not found:
                return None
            counts = final_counts(session, filters, None)
            row, trial = found[0]
            return best_row(row, trial, counts.get(row.id, (0, 0))[0])

    def tuned(
        self,
        gpu_name: str,
        op: str,
        dtype: str,
        source_hash: str | None,
        *,
        trans: bool = False,
        inputs: tuple[str, ...] = (),
        variant: str = "",
    ) -> list[BestRow]:
        """One best row per tuned problem of this GPU, op, dtype, layout, input dtypes and variant:
        the selector's nearest-shape pool."""
        keyed = {"input_dtypes": ",".join(inputs), "variant": variant}
        return self._best_rows(gpu_name, source_hash, op=op, dtype=dtype, trans=trans, **keyed)

    def _best_rows(self, gpu_name: str, source_hash: str | None, **problem: Any) -> list[BestRow]:
        filters = problem_filters(gpu_name=gpu_name, **problem)
        with self.db.session_scope() as session:
            counts = final_counts(session, filters, source_hash)
            return [best_row(p, t, counts.get(p.id, (0, 0))[0]) for p, t in first_usable(session, filters, source_hash)]

    def problems(
        self,
        gpu_name: str | None = None,
        op: str | None = None,
        dtype: str | None = None,
        *,
        source_hash: str | None = None,
    ) -> list[ProblemSummary]:
        """Every problem matching the filters with its trial counts and best OK result."""
        filters = problem_filters(gpu_name=gpu_name, op=op, dtype=dtype)
        with self.db.session_scope() as session:
            counts = final_counts(session, filters, source_hash)
            best = {p.id: t for p, t in first_usable(session, filters, source_hash)}
            found = session.scalars(select(orm.Problem).where(*filters).order_by(*PROBLEM_ORDER))
            return [_summary(p, counts.get(p.id, (0, 0)), best.get(p.id)) for p in found if usable(None, p)]

    def trials(self, problem_id: int) -> list[TrialRow]:
        """All trials of a problem, best first: OK ones by time, then the rest in the order they ran."""
        with self.db.session_scope() as session:
            found = session.scalars(select(orm.Trial).where(orm.Trial.problem_id == problem_id))
            rows = [trial_row(t) for t in found if readable(t)]
        return sorted(rows, key=_best_first)

    def trials_by_problem(self, gpu_name: str | None = None) -> dict[tuple[str, Problem], list[TrialRow]]:
        """The trials of every problem (of one GPU name, or all) in one query, keyed by (GPU name,
        problem) and each list ordered as trials() orders it: a report over hundreds of problems
        asking for them one by one spent most of its time in those queries."""
        stmt = select(orm.Problem, orm.Trial).join(orm.Trial, orm.Trial.problem_id == orm.Problem.id)
        if gpu_name is not None:
            stmt = stmt.where(orm.Problem.gpu_name == gpu_name)
        found: dict[tuple[str, Problem], list[TrialRow]] = {}
        with self.db.session_scope() as session:
            for problem, trial in session.execute(stmt):
                core = stored_problem(problem)
                if core is not None and readable(trial):
                    found.setdefault((problem.gpu_name, core), []).append(trial_row(trial))
        return {key: sorted(rows, key=_best_first) for key, rows in found.items()}

    def selection_rows(self, per_source: int) -> SelectionRows:
        """What the selector reads, in one read transaction (a consistent snapshot): for each problem
        its `per_source` fastest OK trials of every kernel source, and the change count they were
        read at, for the selection table (autotune/store/selection_table.py)."""
        with self.db.session_scope() as session:
            stmt = select(orm.Gpu).order_by(orm.Gpu.name, orm.Gpu.id)
            gpus = [SelectionGpu(gpu.name, gpu.compute_capability, gpu.sm_count) for gpu in session.scalars(stmt)]
            problems: dict[int, tuple[str, Problem, list[RankedTrial]]] = {}
            for problem, trial in ranked_by_source(session, per_source):
                if problem.id not in problems:
                    core = stored_problem(problem)
                    if core is None:
                        continue
                    problems[problem.id] = (problem.gpu_name, core, [])
                assert trial.time_us is not None  # only OK trials with a time are ranked
                problems[problem.id][2].append(
                    RankedTrial(trial.config, trial.time_us, trial.gbs, trial.source_hash, trial.driver, trial.cuda)
                )
            found = session.execute(select(orm.ShippedImport.file_name, orm.ShippedImport.sha256))
            shipped = {name: digest for name, digest in found}
            changes = None
            if self.db.engine.dialect.name == "sqlite":  # the triggers that keep the count are SQLite's
                changes = session.scalar(select(orm.ChangeCounter.changes).where(orm.ChangeCounter.id == 1))
            return SelectionRows(gpus, list(problems.values()), shipped, changes)

    # --- records files ---------------------------------------------------------------------------

    def export_records(
        self,
        gpu_name: str,
        path: Path,
        *,
        top: int = 3,
        source_hash: str | None = None,
        current_only: bool = False,
        problems: Collection[Problem] | None = None,
    ) -> int:
        """Write the `top` fastest OK trials per problem of this GPU as JSON lines (with `current_only`,
        of each problem's current kernel source only; with `problems`, of those only); returns how many."""
        return records.export_records(
            self.db, gpu_name, path, top=top, source_hash=source_hash, current_only=current_only, problems=problems
        )

    def import_records(self, path: Path, parsed: records.Parsed | None = None) -> records.Imported:
        """Import a records file (`parsed`: records.read_records' answer, where already read) in one
        transaction; returns how many trials were stored (new, and `replaced`: the file's own
        measurement of a key a shipped row held) out of how many the file holds."""
        self.require_saving(f"import {path}")
        return records.import_records(self.db, path, parsed)

    def import_shipped(self, records_dir: Path | None = None) -> int:
        """Import the shipped records files (db/records/*.jsonl) not yet imported in their current form."""
        return records.import_shipped(self.db, records_dir)


def _summary(problem: orm.Problem, counts: tuple[int, int], best: orm.Trial | None) -> ProblemSummary:
    return ProblemSummary(
        gpu_name=problem.gpu_name,
        **orm.problem_columns(problem),
        trials=counts[0],
        ok=counts[1],
        best_us=None if best is None else best.time_us,
        best_gbs=None if best is None else best.gbs,
        best_config=None if best is None else dict(best.config),
    )


def _best_first(row: TrialRow) -> tuple[int, float, int]:
    if row.status is Status.OK and row.time_us is not None:
        return (0, row.time_us, row.id)
    return (1, 0.0, row.id)


def open_store(url: str | None = None, *, import_shipped: bool = True, decline_shipped: bool = False) -> Store:
    """Open (creating and migrating as needed) the database at `url`, $AUTOTUNE_DB or the default file.

    With `decline_shipped` (--no-shipped), a new database is marked as one the shipped records are
    never imported into: it holds what is imported or measured into it, nothing else.

    A read-only database is served as it is. Where the default location can be neither created nor
    opened (a read-only container, an unusable HOME), the shipped records are held in memory
    instead, with a warning: `best` and the launch API still answer, and nothing is saved; what
    only writes (import, queue --add, a sweep) is refused (Store.require_saving)."""
    fallback = None
    try:
        db = open_database(url)
    except NoWritablePlace as exc:
        warnings.warn(
            f"{exc}; answering from the shipped records held in memory (nothing will be saved)",
            AutotuneWarning,
            stacklevel=2,
        )
        db, fallback = open_database(MEMORY), str(exc)
    store = Store(db, fallback=fallback)
    try:
        if decline_shipped:
            records.decline_shipped(db)  # before any import: declining cannot take records out
        elif import_shipped and not db.read_only:
            store.import_shipped()
    except BaseException:
        store.close()
        raise
    return store
