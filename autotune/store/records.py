"""Records files: the best trials of one GPU as reviewable JSON lines, exported, shipped and imported."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from autotune import ops
from autotune.core import paths
from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import refuse_to_read
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Status
from autotune.core.output import write_atomically
from autotune.core.problem import Problem, split_inputs
from autotune.core.space import config_key
from autotune.core.target import targeting
from autotune.ops import gemm
from autotune.store import models as orm
from autotune.store.database import Database
from autotune.store.queries import get_or_create_problem, new_gpu, problem_filters, ranked_ok
from autotune.store.record_lines import CLOCK_FIELDS, BadLine, parse_gpu, parse_line, parse_trial
from autotune.store.rows import as_utc, usable

# --- export --------------------------------------------------------------------------------------


log = logging.getLogger(__name__)


def _gpu_line(gpu: orm.Gpu) -> dict[str, Any]:
    return {"kind": "gpu", **{name: getattr(gpu, name) for name in orm.GPU_FIELDS}}


def key_fields(problem: orm.Problem) -> dict[str, Any]:
    """A trial line's problem fields. Input dtypes and a variant only where the problem names them:
    the line of a problem that names neither is the line it always was."""
    columns = orm.problem_columns(problem)
    inputs, variant = columns.pop("input_dtypes"), columns.pop("variant")
    return {
        **columns,
        **({"inputs": list(split_inputs(inputs))} if inputs else {}),
        **({"variant": variant} if variant else {}),
    }


def _trial_line(problem: orm.Problem, trial: orm.Trial) -> dict[str, Any]:
    return {
        "kind": "trial",
        **key_fields(problem),
        "config": trial.config,
        "time_us": trial.time_us,
        "times_us": [t for t in trial.times_us if math.isfinite(t)],
        "rounds": trial.rounds,
        "gbs": orm.finite(trial.gbs),
        "rel_error": orm.finite(trial.rel_error),
        "source_hash": trial.source_hash,
        "nvcc": trial.nvcc,
        "pycuda": trial.pycuda,
        "driver": trial.driver,
        "cuda": trial.cuda,
        "created_at": as_utc(trial.created_at).isoformat(),
        # Only where measured: records of GPUs timed without NVML stay as they were.
        **{name: value for name in CLOCK_FIELDS if (value := orm.finite(getattr(trial, name))) is not None},
    }


_EVERY = 2**31 - 1  # a rank limit that keeps every trial


def _problem_of(row: orm.Problem) -> Problem:
    return orm.core_problem(row)


def _usable(ranked: list[tuple[orm.Problem, orm.Trial]]) -> list[tuple[orm.Problem, orm.Trial]]:
    # As every other read of the store: a row import would refuse (a size of -5, a string in a
    # config) is never written into a records file.
    return [(problem, trial) for problem, trial in ranked if usable(trial, problem)]


def export_records(
    db: Database,
    gpu_name: str,
    path: Path,
    *,
    top: int = 3,
    source_hash: str | None = None,
    current_only: bool = False,
    problems: Collection[Problem] | None = None,
) -> int:
    """Write the GPU line, then the `top` fastest OK trials of each problem (with `current_only`,
    among those measured with the problem's kernel source as it is now: what a shipped records file
    must hold, since older ones never answer; with `problems`, of those problems only); returns the
    trial count."""
    lines = record_lines(db, gpu_name, top=top, source_hash=source_hash, current_only=current_only, problems=problems)
    write_lines(path, lines)
    return len(lines) - 1


def record_lines(
    db: Database,
    gpu_name: str,
    *,
    top: int = 3,
    source_hash: str | None = None,
    current_only: bool = False,
    problems: Collection[Problem] | None = None,
) -> list[dict[str, Any]]:
    """The lines export_records writes: the GPU line, then the trial lines. Only lines `import`
    accepts, checked by its own parser: a stored row it would refuse is left out (one warning with
    the count) and the next fastest takes its place."""
    if top < 1:
        raise AutotuneError(f"--top must be at least 1, got {top}")
    with db.session_scope() as session:
        newest = select(orm.Gpu).where(orm.Gpu.name == gpu_name)
        newest = newest.order_by(orm.Gpu.created_at.desc(), orm.Gpu.id.desc()).limit(1)
        gpu = session.scalars(newest).one_or_none()
        if gpu is None:
            raise AutotuneError(f"no GPU named {gpu_name!r} in {db.url}")
        lines = [_gpu_line(gpu)]
        refused = 0

        def take(problem: orm.Problem, trial: orm.Trial) -> bool:
            # A line `import` would refuse (a config outside its space, a time of zero, written
            # straight into the database) is left out, and the next one ranks in its place.
            nonlocal refused
            line = _trial_line(problem, trial)
            if not _importable(line, gpu.compute_capability):
                refused += 1
                return False
            lines.append(line)
            return True

        current: dict[int, str] = {}  # problem id -> its current kernel source hash

        def is_current(problem: orm.Problem, trial: orm.Trial) -> bool:
            if problem.id not in current:
                with targeting(gpu.compute_capability):  # that GPU's kernel family, not this machine's
                    current[problem.id] = ops.source_hash(_problem_of(problem))
            return trial.source_hash == current[problem.id]

        kept: dict[int, int] = {}  # problem id -> lines of our kernels written
        vendor_kept: set[tuple[int, str]] = set()
        filters = problem_filters(gpu_name=gpu_name)
        wanted: dict[int, bool] = {}  # problem id -> among `problems`
        for problem, trial in _usable(ranked_ok(session, filters, source_hash, top=_EVERY)):
            if problems is not None:
                if problem.id not in wanted:
                    wanted[problem.id] = _problem_of(problem) in problems
                if not wanted[problem.id]:
                    continue
            if current_only and ops.library_of_source(trial.source_hash) is not None:
                # cuBLASLt's best of each library version travels too: the selector sets it
                # against our kernels on a machine with that version.
                key = (problem.id, trial.source_hash)
                if key not in vendor_kept and take(problem, trial):
                    vendor_kept.add(key)
            elif (
                kept.get(problem.id, 0) < top
                and (not current_only or is_current(problem, trial))
                and take(problem, trial)
            ):
                kept[problem.id] = kept.get(problem.id, 0) + 1
    if refused:
        log.warning("left out %d stored trials of %s that `autotune import` would refuse", refused, gpu_name)
    return lines


def _importable(line: dict[str, Any], compute_capability: str) -> bool:
    try:
        with targeting(compute_capability):  # configs are checked against that GPU's spaces
            parse_trial(line)
    except BadLine:
        return False
    return True


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    """A records file as export_records writes it: one JSON object a line, keys sorted, written
    atomically (scripts/rehash_records.py rewrites shipped files through it too)."""
    text = "".join(json.dumps(line, sort_keys=True, allow_nan=False) + "\n" for line in lines)
    write_atomically(path, text, what="records file")


# --- parsing -------------------------------------------------------------------------------------


def parse_records(path: Path, text: str) -> tuple[GpuInfo, list[dict[str, Any]]]:
    """The GPU and the trials of a records file; a bad line is an AutotuneError naming it."""
    gpu: GpuInfo | None = None
    trials: list[dict[str, Any]] = []
    if not text.strip():
        raise AutotuneError(f"{path} is empty: expected a GPU line first")
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            if number > 1 and not raw.strip():
                continue
            line = parse_line(raw, number)
            if gpu is None:
                gpu = parse_gpu(line)
            else:
                with targeting(gpu.compute_capability):  # configs are checked against that GPU's spaces
                    trials.append(parse_trial(line))
        except BadLine as exc:
            raise AutotuneError(f"{path} line {number}: {exc}") from None
    if gpu is None:
        raise AutotuneError(f"{path} is empty: expected a GPU line first")
    return gpu, trials


# --- import --------------------------------------------------------------------------------------


def _gpu_id(session: Session, info: GpuInfo) -> int:
    # An imported file never overwrites a GPU row this machine wrote: it only adds missing ones.
    gpu = session.scalars(select(orm.Gpu).where(orm.Gpu.uuid == info.uuid)).one_or_none()
    if gpu is None:
        gpu = new_gpu(info)
        session.add(gpu)
        session.flush()
    return gpu.id


def _new_trial(problem_id: int, gpu_id: int, values: dict[str, Any], origin: str) -> dict[str, Any]:
    """The columns of a trial row for one records line (inserted together with the file's others)."""
    return dict(
        problem_id=problem_id,
        gpu_id=gpu_id,
        config_key=config_key(values["config"]),
        config=values["config"],
        status=Status.OK,
        time_us=values["time_us"],
        times_us=[float(t) for t in values["times_us"]],
        rounds=values["rounds"],
        gbs=values["gbs"],
        rel_error=values["rel_error"],
        **{name: values[name] for name in CLOCK_FIELDS},
        message="",
        source_hash=values["source_hash"],
        nvcc=values["nvcc"],
        pycuda=values["pycuda"],
        driver=values["driver"],
        cuda=values["cuda"],
        origin=origin,
        created_at=values["created_at"],
        finished_at=values["created_at"],
        owner=None,
    )


def _known_problems(session: Session, gpu_name: str) -> dict[Problem, int]:
    rows = session.scalars(select(orm.Problem).where(orm.Problem.gpu_name == gpu_name))
    return {_problem_of(row): row.id for row in rows}


TrialKey = tuple[int, str, str]  # (problem id, config key, source hash): one trial row each


class Imported(int):
    """How many trials an import stored: new keys, and `replaced` keys a shipped row held before,
    now holding the user's own measurement of that config instead; `compared`: how many trials the
    file holds, so that the rest (`already`) are the ones the database held as they are."""

    replaced: int
    compared: int

    def __new__(cls, stored: int, replaced: int = 0, compared: int = 0) -> Imported:
        imported = super().__new__(cls, stored)
        imported.replaced = replaced
        imported.compared = max(compared, stored)
        return imported

    @property
    def already(self) -> int:
        """The file's trials the database held already (a key repeated in the file counted too)."""
        return self.compared - int(self)


def _known_keys(session: Session, problem_ids: list[int]) -> set[TrialKey]:
    stmt = select(orm.Trial.problem_id, orm.Trial.config_key, orm.Trial.source_hash)
    return {(pid, key, src) for pid, key, src in session.execute(stmt.where(orm.Trial.problem_id.in_(problem_ids)))}


def _shipped_rows(session: Session, problem_ids: list[int]) -> dict[TrialKey, tuple[int, float | None, list[float]]]:
    """key -> (id, time, samples) of the rows a shipped records file wrote, which a user's own
    measurement of the same key takes over."""
    stmt = select(
        orm.Trial.id,
        orm.Trial.problem_id,
        orm.Trial.config_key,
        orm.Trial.source_hash,
        orm.Trial.time_us,
        orm.Trial.times_us,
    ).where(orm.Trial.problem_id.in_(problem_ids), orm.Trial.origin.startswith(SHIPPED_PREFIX))
    return {(pid, key, src): (row_id, time, samples) for row_id, pid, key, src, time, samples in session.execute(stmt)}


def _remeasured(shipped: tuple[int, float | None, list[float]], values: dict[str, Any]) -> bool:
    # A line repeating the shipped row's measurement (a file exported from a database holding the
    # shipped records) is the shipped row, not the user's own: it stays the shipped file's.
    _, time_us, samples = shipped
    return (time_us, samples) != (values["time_us"], [float(t) for t in values["times_us"]])


def _trial_key(problem_ids: dict[Problem, int], values: dict[str, Any]) -> TrialKey:
    return problem_ids[values["problem"]], config_key(values["config"]), values["source_hash"]


def _nothing_new(session: Session, info: GpuInfo, trials: list[dict[str, Any]]) -> bool:
    """Whether the database holds the file's GPU and every trial key already, none of them in a
    shipped row the file re-measures: a file imported before is then done with no write lock,
    which a running sweep would wait for."""
    if session.scalars(select(orm.Gpu.id).where(orm.Gpu.uuid == info.uuid)).first() is None:
        return False
    problem_ids = _known_problems(session, info.name)
    if any(values["problem"] not in problem_ids for values in trials):
        return False
    ids = sorted({problem_ids[values["problem"]] for values in trials})
    known, shipped = _known_keys(session, ids), _shipped_rows(session, ids)
    for values in trials:
        key = _trial_key(problem_ids, values)
        if key not in known or (key in shipped and _remeasured(shipped[key], values)):
            return False
    return True


def _import_into(
    session: Session, info: GpuInfo, trials: list[dict[str, Any]], origin: str, *, over_shipped: bool = False
) -> Imported:
    """Add the trials of a parsed records file whose key is not in the database yet; with
    `over_shipped` (a user's file), a line re-measuring a key a shipped row holds takes that row
    over, so that the user's time is kept and no later shipped file deletes it. Existing problems
    and keys are read in a few queries, not one per line: the write lock is held for as short a
    time as the writes take."""
    gpu_id = _gpu_id(session, info)
    problem_ids = _known_problems(session, info.name)
    missing = list({values["problem"] for values in trials} - set(problem_ids))
    rows = [orm.Problem(gpu_name=info.name, **orm.problem_columns(problem)) for problem in missing]
    try:
        # The new problems in one savepoint, not one each (the shipped records hold hundreds); on a
        # server database another process may insert one of them first, and then each is looked up.
        with session.begin_nested():
            session.add_all(rows)
    except IntegrityError:
        rows = [get_or_create_problem(session, problem, info.name) for problem in missing]
    problem_ids.update({problem: row.id for problem, row in zip(missing, rows, strict=True)})
    ids = sorted({problem_ids[values["problem"]] for values in trials})
    known = _known_keys(session, ids)
    shipped = _shipped_rows(session, ids) if over_shipped else {}
    new_trials, replacing = [], []
    for values in trials:
        key = _trial_key(problem_ids, values)
        if key not in known:
            known.add(key)
            new_trials.append(_new_trial(key[0], gpu_id, values, origin))
        elif key in shipped and _remeasured(shipped[key], values):
            row_id, _, _ = shipped.pop(key)  # popped: a second line of the key in the file is not applied
            replacing.append({"id": row_id, **_new_trial(key[0], gpu_id, values, origin)})
    if new_trials:  # one executemany: the shipped records are thousands of lines, each an ORM object was slow
        session.execute(insert(orm.Trial), new_trials)
    if replacing:  # by primary key: the row keeps its id, its key now the user's
        session.execute(update(orm.Trial), replacing)
    return Imported(len(new_trials) + len(replacing), len(replacing), len(trials))


def _read(path: Path) -> bytes:
    refuse_to_read(path, "records file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise AutotuneError(f"cannot read records file {path}: {exc.strerror or exc}") from None


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AutotuneError(f"records file {path} is not UTF-8 text") from None


SHIPPED_PREFIX = "shipped:"


def shipped_origin(path: Path) -> str:
    return f"{SHIPPED_PREFIX}{path.name}"


def user_origin(path: Path) -> str:
    # The full path: a user's file that shares a shipped file's name is never taken for it, and
    # is never deleted when the shipped file changes.
    return f"imported:{path.expanduser().absolute()}"


Parsed = tuple[GpuInfo, list[dict[str, Any]]]  # a records file's GPU and trials, checked


def read_records(path: Path) -> Parsed:
    """A records file read and checked whole (AutotuneError naming its first bad line), before any
    database is opened: a bad file neither creates one nor makes a sweep wait for a lock."""
    return parse_records(path, _decode(path, _read(path)))


def import_records(db: Database, path: Path, parsed: Parsed | None = None) -> Imported:
    """Import a user's records file (`parsed`: read_records' answer, where already read) in one
    transaction (all or nothing); returns how many trials were stored: new keys, and keys whose
    shipped row the file's own measurement replaced."""
    info, trials = parsed if parsed is not None else read_records(path)
    with db.session_scope() as session:
        if _nothing_new(session, info, trials):
            return Imported(0, compared=len(trials))
    with db.session_scope(write=True) as session:
        return _import_into(session, info, trials, user_origin(path), over_shipped=True)


def _shipped_dir() -> Path | None:
    try:
        return paths.db_dir() / "records"
    except FileNotFoundError:
        return None


def _import_shipped_file(db: Database, path: Path, data: bytes, digest: str) -> int:
    info, trials = parse_records(path, _decode(path, data))
    with db.session_scope(write=True) as session:
        done = session.get(orm.ShippedImport, path.name)
        if done is not None and done.sha256 == digest:
            return 0  # another process imported it since we looked
        if done is not None:
            # The file changed: its old records go, so that removed or re-measured entries do not linger.
            session.execute(delete(orm.Trial).where(orm.Trial.origin == shipped_origin(path)))
        added = _import_into(session, info, trials, shipped_origin(path))
        session.merge(orm.ShippedImport(file_name=path.name, sha256=digest, imported_at=orm.utcnow()))
        return added


# A shipped_imports row no records file can be named: the database was made without the shipped
# records (--no-shipped), and no later open imports them.
DECLINED = "*"


def decline_shipped(db: Database) -> None:
    """Mark a database that holds no shipped records as one that never will (--no-shipped); one
    holding them already is refused, since declining would not take them out."""
    with db.session_scope(write=True) as session:
        if session.get(orm.ShippedImport, DECLINED) is not None:
            return
        if session.scalars(select(orm.ShippedImport.file_name)).first() is not None:
            raise AutotuneError(f"--no-shipped applies to a new database: {db.url} holds the shipped records already")
        session.add(orm.ShippedImport(file_name=DECLINED, sha256="declined", imported_at=orm.utcnow()))


def import_shipped(db: Database, records_dir: Path | None = None) -> int:
    """Import every records file (default db/records/*.jsonl) new or changed since its last import,
    unless the database declined them (decline_shipped)."""
    folder = records_dir if records_dir is not None else _shipped_dir()
    if folder is None or not folder.is_dir():
        return 0
    files = {path: _read(path) for path in sorted(folder.glob("*.jsonl"))}
    if not files:
        return 0
    digests = {path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    with db.session_scope() as session:
        stmt = select(orm.ShippedImport.file_name, orm.ShippedImport.sha256)
        done = {name: digest for name, digest in session.execute(stmt)}
    if DECLINED in done:
        return 0
    # Checked before taking the write lock: opening a store must not wait on a running sweep.
    try:
        added = sum(
            _import_shipped_file(db, path, data, digests[path])
            for path, data in files.items()
            if done.get(path.name) != digests[path]
        )
    except AutotuneError as exc:
        named = os.environ.get(gemm.FAMILY_VARIABLE)
        if not named:
            raise
        # The shipped GEMM records hold the configs of the families gemm.family picks, which a named
        # family's space refuses.
        raise AutotuneError(
            f"{exc}; {gemm.FAMILY_VARIABLE}={named[:40]} names a GEMM family the shipped records were not "
            "tuned with: sweep it with --no-shipped into a database of its own"
        ) from None
    if added:
        log.info("imported %d shipped trials from %s into %s", added, folder, db.url)
    return added
