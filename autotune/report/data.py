"""What the report shows, gathered through the calls `autotune list` and `autotune show` use: the
problem summaries, each problem's stored trials and the stored read floor of its matrix; and what
the whole database holds (`Holdings`), from which the page's banner is written."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from autotune import api, display, ops
from autotune.core.errors import AutotuneError
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.timing_bounds import is_plausible_time_us
from autotune.select.choose import VENDOR_MARGIN
from autotune.store import ProblemSummary, Store, TrialRow
from autotune.store.trials import MEASURED

MESSAGE_CHARS = 240  # a failure's message is shown as its last line, cut to this many characters


@dataclass(frozen=True)
class Shape:
    """One stored problem: its listing row, its final trials in the order they ran, its read floor."""

    summary: ProblemSummary
    trials: tuple[TrialRow, ...]
    floor_us: float | None  # the stored read floor of the problem's matrix, µs

    @property
    def problem(self) -> Problem:
        return self.summary.problem

    @property
    def label(self) -> str:
        return "x".join(map(str, self.problem.shape))

    @property
    def floor_ratio(self) -> float | None:
        """Best time over the read floor: 1 is as fast as only reading the matrix."""
        floor, best = self.floor_us, self.summary.best_us
        if floor is None or best is None or not (is_plausible_time_us(floor) and is_plausible_time_us(best)):
            return None  # nothing to compare, or a time no kernel call takes (0 us written by hand)
        return best / floor

    @property
    def tflops(self) -> float | None:
        best = self.summary.best_us
        if best is None or not is_plausible_time_us(best):
            return None
        return ops.for_problem(self.problem).flops(self.problem) / best / 1e6

    @property
    def best_is_vendor(self) -> bool:
        """Whether the best stored config is a library's candidate (cuBLASLt's algorithm) rather than
        one of our kernels."""
        return ops.library_for(self.summary.best_config or {}) is not None

    @property
    def vendor_tie(self) -> bool:
        """Whether the best stored config is cuBLASLt's but within VENDOR_MARGIN of our fastest kernel:
        a tie, which `autotune best` (and the launch path) gives to ours."""
        if not self.best_is_vendor or self.summary.best_us is None:
            return False
        ours = [_ok_time(trial) for trial in self.trials if ops.library_for(trial.config) is None]
        fastest = min((time for time in ours if time is not None), default=None)
        return fastest is not None and fastest <= self.summary.best_us * (1 + VENDOR_MARGIN)

    @property
    def vendor_stored(self) -> bool:
        """Whether a cuBLASLt algorithm was timed on this problem (it then takes part in 'best')."""
        return any(ops.library_for(trial.config) is not None for trial in self.trials)

    @property
    def kept_only(self) -> bool:
        """Whether every trial of the problem was imported: then they are the leaders a records file
        kept (the few fastest configs per problem), not the run that found them."""
        return bool(self.trials) and all(trial.origin != MEASURED for trial in self.trials)

    @property
    def config_text(self) -> str:
        """The best config as `autotune show` writes it: its parameters in the space's order."""
        config = self.summary.best_config
        if not config:
            return "-"
        text = " ".join(f"{k}={v}" for k, v in ops.in_space_order(self.problem, config).items())
        library = ops.library_for(config)
        return f"{library.label} {text}" if library is not None else text

    def ok_times(self) -> list[float]:
        return [time for time in map(_ok_time, self.trials) if time is not None]

    def kept_ratios(self) -> list[tuple[int, float]]:
        """(rank, OK time over the fastest), fastest first: how far behind the runners-up are."""
        times = sorted(self.ok_times())
        return [(rank, time / times[0]) for rank, time in enumerate(times, start=1)]

    def best_so_far(self) -> list[tuple[int, float]]:
        """(trial number, fastest OK time up to it), from the first OK trial on, over the trials this
        database's sweeps measured: imported ones did not run here, nor in the order a sweep tried them."""
        points: list[tuple[int, float]] = []
        best: float | None = None
        measured = [trial for trial in self.trials if trial.origin == MEASURED]
        for number, trial in enumerate(measured, start=1):
            time = _ok_time(trial)
            if time is not None and (best is None or time < best):
                best = time
            if best is not None:
                points.append((number, best))
        return points


def _ok_time(trial: TrialRow) -> float | None:
    """The time of an OK trial where a kernel call can take it: one of 1e-200 us, in a database
    written by hand or by an older autotune, is no measurement to chart."""
    if trial.status is Status.OK and trial.time_us is not None and is_plausible_time_us(trial.time_us):
        return trial.time_us
    return None


@dataclass(frozen=True)
class OpGroup:
    """The shapes of one op, dtype and layout on one GPU (`hgemv`, `sgemv transposed`, `bgemm`)."""

    title: str
    compute_bound: bool  # rated in TFLOP/s as well
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Failure:
    """Failed trials of one GPU that ended with the same status and message."""

    status: str
    message: str
    trials: int
    problems: int
    example: str  # one problem it happened on


@dataclass(frozen=True)
class GpuReport:
    name: str
    groups: tuple[OpGroup, ...]

    @property
    def shapes(self) -> list[Shape]:
        return [shape for group in self.groups for shape in group.shapes]

    def statuses(self) -> Counter[str]:
        """Final trials per status, in the order Status declares them."""
        counts = Counter(t.status.value for shape in self.shapes for t in shape.trials)
        return Counter({s.value: counts[s.value] for s in Status if counts[s.value]})

    def failures(self) -> list[Failure]:
        """Failed trials grouped by status and message, most frequent first."""
        found: dict[tuple[str, str], tuple[int, set[str]]] = {}
        for shape in self.shapes:
            for trial in shape.trials:
                if trial.status is Status.OK:
                    continue
                key = (trial.status.value, message_line(trial.message))
                count, problems = found.get(key, (0, set()))
                found[key] = (count + 1, problems | {display.problem_text(shape.problem)})
        ranked = sorted(found.items(), key=lambda item: (-item[1][0], item[0]))
        return [Failure(s, m, n, len(p), min(p)) for (s, m), (n, p) in ranked]


@dataclass(frozen=True)
class Holdings:
    """What the report's problems hold, counted for the banner: nothing it says is assumed."""

    problems: int
    trials: int
    vendor_timed: int  # problems with a cuBLASLt algorithm among their trials
    vendor_best: int  # problems whose best config is a cuBLASLt algorithm
    vendor_ties: int  # of those, problems where ours is within VENDOR_MARGIN: `best` answers ours
    floors: int  # problems whose matrix has a stored read floor
    kept_only: int  # problems holding only the kept leaders of a records file


@dataclass(frozen=True)
class ReportData:
    db_url: str
    generated_at: datetime
    gpu_filter: str | None
    gpus: tuple[GpuReport, ...]
    known_gpus: tuple[str, ...]  # every GPU the database holds

    def holdings(self) -> Holdings:
        shapes = [shape for gpu in self.gpus for shape in gpu.shapes]
        return Holdings(
            problems=len(shapes),
            trials=sum(len(shape.trials) for shape in shapes),
            vendor_timed=sum(shape.vendor_stored for shape in shapes),
            vendor_best=sum(shape.best_is_vendor for shape in shapes),
            vendor_ties=sum(shape.vendor_tie for shape in shapes),
            floors=sum(shape.floor_us is not None for shape in shapes),
            kept_only=sum(shape.kept_only for shape in shapes),
        )


def message_line(message: str) -> str:
    """The line of a failure's message worth showing (its last non-empty one), cut short."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "…"


def _group_title(problem: Problem) -> str:
    """`hgemv`, `sgemv transposed`, or with a variant as `autotune list` names it: `hqgemm/g128`."""
    variant = f"/{problem.variant}" if problem.variant else ""
    return problem.blas_name + variant + (" transposed" if problem.trans else "")


def _group_key(summary: ProblemSummary) -> tuple[str, bool, str, str]:
    return (summary.op, summary.trans, summary.dtype, summary.problem.variant)


def gather(gpu: str | None = None, db: str | None = None) -> ReportData:
    """Everything the report shows, for one GPU (`--gpu` matching, as `autotune list`) or every GPU."""
    store: Store = api.store(db)
    known = tuple(store.gpu_names())
    summaries: list[ProblemSummary] = api.list_problems(gpu=gpu, db=db)
    if gpu is not None and not summaries:
        raise AutotuneError(f"nothing stored for GPU {gpu!r}; the database holds: {', '.join(known) or 'no GPU yet'}")
    # Read in two queries, not three a problem: the shipped records' report is hundreds of problems.
    trials = store.trials_by_problem(summaries[0].gpu_name if gpu is not None else None)
    floors = store.read_floors()
    gpus = []
    for gpu_name, of_gpu in itertools.groupby(summaries, key=lambda s: s.gpu_name):
        groups = []
        # The store orders a variant after the sizes: each variant's shapes are brought together.
        for _, of_op in itertools.groupby(sorted(of_gpu, key=_group_key), key=_group_key):
            shapes = tuple(_shape(summary, trials, floors) for summary in of_op)
            problem = shapes[0].problem
            groups.append(OpGroup(_group_title(problem), ops.for_problem(problem).compute_bound, shapes))
        gpus.append(GpuReport(gpu_name, tuple(groups)))
    return ReportData(store.url, datetime.now(timezone.utc), gpu, tuple(gpus), known)


def _shape(
    summary: ProblemSummary,
    trials: Mapping[tuple[str, Problem], list[TrialRow]],
    floors: Mapping[tuple[str, int], float],
) -> Shape:
    problem = summary.problem
    stored = trials.get((summary.gpu_name, problem), [])
    # In the order they ran; a running trial has no outcome yet.
    final = sorted((t for t in stored if t.status is not Status.RUNNING), key=lambda t: (t.created_at, t.id))
    return Shape(summary, tuple(final), floors.get((summary.gpu_name, problem.matrix_bytes)))
