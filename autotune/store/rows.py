"""Plain frozen rows the store hands to callers (so that no ORM object leaves a session), and the
provenance callers hand to it with every trial."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import Toolchain
from autotune.core.outcome import Status
from autotune.core.problem import DTYPES, Problem, check_dim, split_inputs
from autotune.core.target import check_capability
from autotune.core.timing_bounds import is_plausible_time_us
from autotune.store import models as orm


@dataclass(frozen=True)
class Provenance:
    """Where a trial's measurement comes from: its problem, the GPU that ran it, the kernel source,
    and the software around it. One per problem and sweep; the store writes it on every trial."""

    problem_id: int
    gpu_id: int
    source_hash: str
    toolchain: Toolchain
    driver: str
    cuda: str


def as_utc(moment: datetime) -> datetime:
    # SQLite keeps no time zone: every time the store writes is UTC, so a naive one read back is too.
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


# The moments a time read from a file may name, in UTC: none is older than CUDA, and the latest
# leaves a year before datetime's end for whatever is added to it (a lease, a time zone).
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)


def parse_utc(text: str) -> datetime:
    """An ISO date and time (one without a zone taken as UTC) in UTC, or ValueError saying why: text
    that is none, or a moment outside [EARLIEST, LATEST) once converted (year 1 at +05:00 is not a
    datetime in UTC at all)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO date and time: {text!r}") from None
    try:
        moment: datetime | None = as_utc(parsed)
    except OverflowError:  # year 1 at +05:00 is before year 1 in UTC: no datetime at all
        moment = None
    if moment is None or not EARLIEST <= moment < LATEST:
        raise ValueError(f"{text!r} is not between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} in UTC")
    return moment


@dataclass(frozen=True)
class TrialRow:
    id: int
    config: dict[str, Any]
    config_key: str
    status: Status
    time_us: float | None
    gbs: float | None
    rel_error: float | None
    message: str
    source_hash: str
    driver: str
    cuda: str
    origin: str
    created_at: datetime
    times_us: list[float]
    nvcc: str
    pycuda: str
    problem_id: int
    gpu_id: int
    finished_at: datetime | None
    rounds: int  # buffer sets measured on; time_us is the slowest
    sm_mhz: float | None = None  # what the GPU ran at while timed (NVML), where known
    mem_mhz: float | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class _ProblemRow:
    """What names a stored problem: its GPU model and the fields of its core Problem."""

    gpu_name: str
    op: str
    dtype: str
    m: int
    n: int
    k: int
    trans: bool
    input_dtypes: str  # the core Problem's `inputs`, joined by commas
    variant: str

    @property
    def problem(self) -> Problem:
        return orm.core_problem(self)


@dataclass(frozen=True)
class BestRow(_ProblemRow):
    """The fastest OK trial of one problem."""

    config: dict[str, Any]
    time_us: float
    gbs: float | None
    source_hash: str
    driver: str
    cuda: str
    origin: str
    trials: int  # final trials of the problem (under the same source-hash filter)


@dataclass(frozen=True)
class GpuRow:
    id: int
    name: str
    uuid: str
    compute_capability: str
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    driver: str
    cuda: str
    created_at: datetime
    trials: int  # final trials this GPU measured


@dataclass(frozen=True)
class ProblemSummary(_ProblemRow):
    trials: int  # final trials
    ok: int
    best_us: float | None  # None when no trial is OK
    best_gbs: float | None
    best_config: dict[str, Any] | None


def usable(trial: orm.Trial | None, problem: orm.Problem | None = None) -> bool:
    """A row fit to hand out: a problem a records file could hold, a config of integers only.
    Imports check far more; this keeps rows an older autotune let in (a string config value, an
    unknown dtype) or written straight in (a size of -5) from reaching the selector, a listing or nvcc."""
    if problem is not None and stored_problem(problem) is None:
        return False
    if trial is None:
        return True
    if trial.status == Status.OK and not is_plausible_time_us(trial.time_us):
        return False  # a time no kernel call takes (1e-200 us written straight in) would win every pick
    return readable(trial) and all(isinstance(k, str) and type(v) is int for k, v in trial.config.items())


def sound_capability(capability: object) -> bool:
    """Whether a stored GPU row's compute capability is one CUDA writes ("9.0"): a row written
    straight in with "abc" is passed over like any other foreign row, never steering a space."""
    try:
        check_capability(capability)
    except AutotuneError:
        return False
    return True


def readable(trial: orm.Trial) -> bool:
    """Whether the row's JSON columns hold a config object and a list of times, and its status and
    date read as such. Stored text that is not JSON (a byte changed in a SQLite file) reads as None
    (database._lenient_json), and so do a status, a date or a time SQLite kept as some other text
    (models._Lenient): the damaged row is skipped, as a foreign row is, instead of failing every
    command that reads it."""
    times = trial.times_us
    if not isinstance(trial.status, Status) or not isinstance(trial.created_at, datetime):
        return False
    return isinstance(trial.config, dict) and isinstance(times, list) and all(type(t) in (int, float) for t in times)


def problem_or_fault(
    op: object,
    dtype: object,
    m: int,
    n: int,
    k: int,
    trans: bool,
    inputs: tuple[str, ...] = (),
    variant: str = "",
) -> Problem | str:
    """The Problem these values name, or why a records file could not hold it (an unknown op or
    dtype, a size that is not a positive 32-bit count, a K or a transposed layout its op lacks, input
    dtypes or a variant it does not take, input dtypes that are all the output's: the plain problem
    is written without them, so that it has one key). One rule for a records line and for a row
    already stored."""
    if op not in ops.names():
        return f"unknown op {_show(op)}: expected one of {', '.join(map(repr, ops.names()))}"
    if dtype not in DTYPES:
        return f"unknown dtype {_show(dtype)}: expected one of {', '.join(DTYPES)}"
    assert isinstance(op, str) and isinstance(dtype, str)
    kind = ops.get(op)
    if trans and not kind.transposable:
        return f"field 'trans' must be false for {op}"
    if "K" not in kind.sizes and k != 0:
        return f"field 'k' must be 0 for {op}, got {k}"
    try:
        for dim, value in (("M", m), ("N", n), ("K", k)):
            if dim in kind.sizes:
                check_dim(dim, value)
    except AutotuneError as exc:
        return str(exc)
    problem = Problem(op, dtype, m, n, k, trans, inputs, variant)
    if inputs or variant:
        if set(inputs) == {dtype}:
            return f"input dtypes that are all {dtype}, the output's, are the plain problem's: leave them out"
        fault = ops.key_fault(problem)
        if fault is not None:
            return fault
    return problem


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def stored_problem(row: orm.Problem) -> Problem | None:
    """The core Problem a problems row names, or None where a records file could not hold it: a row
    written straight into the database never reaches a kernel's arithmetic or nvcc."""
    if not all(isinstance(text, str) for text in (row.input_dtypes, row.variant, row.gpu_name)):
        return None  # written straight into the database: no text at all (a BLOB, a number)
    inputs = split_inputs(row.input_dtypes)
    found = problem_or_fault(row.op, row.dtype, row.m, row.n, row.k, bool(row.trans), inputs, row.variant)
    return found if isinstance(found, Problem) else None


def trial_row(trial: orm.Trial) -> TrialRow:
    return TrialRow(
        id=trial.id,
        config=dict(trial.config),
        config_key=trial.config_key,
        status=trial.status,
        time_us=trial.time_us,
        gbs=trial.gbs,
        rel_error=trial.rel_error,
        message=trial.message,
        source_hash=trial.source_hash,
        driver=trial.driver,
        cuda=trial.cuda,
        origin=trial.origin,
        created_at=as_utc(trial.created_at),
        times_us=list(trial.times_us),
        nvcc=trial.nvcc,
        pycuda=trial.pycuda,
        problem_id=trial.problem_id,
        gpu_id=trial.gpu_id,
        finished_at=as_utc(trial.finished_at) if trial.finished_at is not None else None,
        rounds=trial.rounds,
        sm_mhz=trial.sm_mhz,
        mem_mhz=trial.mem_mhz,
        power_w=trial.power_w,
    )


def best_row(problem: orm.Problem, trial: orm.Trial, trials: int) -> BestRow:
    assert trial.time_us is not None  # only OK trials with a time are ranked
    return BestRow(
        gpu_name=problem.gpu_name,
        **orm.problem_columns(problem),
        config=dict(trial.config),
        time_us=trial.time_us,
        gbs=trial.gbs,
        source_hash=trial.source_hash,
        driver=trial.driver,
        cuda=trial.cuda,
        origin=trial.origin,
        trials=trials,
    )


def gpu_row(gpu: orm.Gpu, trials: int) -> GpuRow:
    return GpuRow(
        id=gpu.id,
        name=gpu.name,
        uuid=gpu.uuid,
        compute_capability=gpu.compute_capability,
        sm_count=gpu.sm_count,
        l2_bytes=gpu.l2_bytes,
        memory_bytes=gpu.memory_bytes,
        driver=gpu.driver,
        cuda=gpu.cuda,
        created_at=as_utc(gpu.created_at),
        trials=trials,
    )
