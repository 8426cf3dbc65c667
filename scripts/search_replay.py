"""Search strategies replayed on a fully measured space (a Kernel Tuner cache file): no GPU, no compiler.

A Kernel Tuner cache file (JSON, gzip'd or not) holds `tune_params` (name -> values) and `cache`
(config key "v1,v2,..." in `tune_params` order -> a record whose objective, "time" unless the file
names another, is a number, or a string such as "RuntimeFailedConfig" where the config failed).
Configs absent from the cache broke the space's restrictions: here they are invalid, ruled out by
the `Space`'s constraint before anything is measured, as the product's constraints rule out configs.
A config present with a failure costs an evaluation and measures as a launch error. Records may also
hold `compile_time` and `benchmark_time` (ms, as Kernel Tuner writes them), and the file
`compiled_params`, the parameters that change the compiled kernel (all of them when absent).

`run_study` drives the product's search (autotune.tune.search.Study) through a replay Measurer and a
compile pool on a simulated clock (ReplayPool: every config compiled when asked for, or in its recorded
time); `run_ga` is a plain genetic algorithm in the manner of Kernel Tuner's. Each returns a Run: the
replayed values of the configs it measured, in order (None for a failure), so that the evaluations a
strategy needed are positions in that list, and the clock when each measurement ended.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import api
from autotune.build.compiler import CompileJob, CompileResult
from autotune.core.outcome import Outcome, Status
from autotune.core.space import Config, Param, Space
from autotune.tune.search import Budget, Measurer, Study

# What a sweep runs by default on a space nothing stored seeds, as nothing seeds a replayed space: the
# unseen budget (autotune/api.py) and the default sampler.
DEFAULT_TRIALS, DEFAULT_PATIENCE, DEFAULT_SAMPLER = api.UNSEEN_TRIALS, api.UNSEEN_PATIENCE, api.DEFAULT_SAMPLER
# A sweep's compile pool has os.cpu_count() workers (CompilePool); the study keeps that many trials
# pending, which constant liar sees as running. 16: the cores of the GPU machines our results come from.
DEFAULT_WORKERS = 16
# The sweep stops (trials, patience) each report row also scores, besides the default: within a run's cap of 200.
BUDGETS = ((64, 32), (64, 64), (80, 40), (100, 50), (100, 100), (128, 64), (150, 75), (200, 64), (200, 100))
_OBJECTIVES_TO_MINIMISE = ("time",)


class ReplayError(ValueError):
    """A cache file this replay cannot use (one line, for the command line)."""


@dataclass(frozen=True)
class Replay:
    """A fully measured space: each valid config's value (None where it failed) and the optimum; where
    the file records them, each config's compile and measurement seconds, and which parameters change
    the compiled kernel (configs differing only in the others share one compile)."""

    name: str
    space: Space
    values: Mapping[tuple[int, ...], float | None]
    optimum: float
    compile_s: Mapping[tuple[int, ...], float] = field(default_factory=dict)
    measure_s: Mapping[tuple[int, ...], float] = field(default_factory=dict)
    compiled_params: tuple[str, ...] | None = None  # None: every parameter

    @property
    def names(self) -> tuple[str, ...]:
        return self.space.names

    @property
    def timed(self) -> bool:
        """Whether the file recorded compile and measurement times (Kernel Tuner's do)."""
        return bool(self.compile_s) and bool(self.measure_s)

    def point(self, config: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(config[n] for n in self.names)

    def value(self, config: Mapping[str, int]) -> float | None:
        return self.values[self.point(config)]

    def kernel(self, point: tuple[int, ...]) -> tuple[int, ...]:
        """What identifies the compiled kernel of a config: the values of the compiled parameters."""
        if self.compiled_params is None:
            return point
        return tuple(v for n, v in zip(self.names, point, strict=True) if n in self.compiled_params)

    @functools.cached_property
    def kernel_compile_s(self) -> Mapping[tuple[int, ...], float]:
        """Each kernel's compile seconds: the longest its configs recorded (in a brute force, only the
        first config of a kernel compiled it; the others found it cached)."""
        seconds: dict[tuple[int, ...], float] = {}
        for point, s in self.compile_s.items():
            key = self.kernel(point)
            seconds[key] = max(seconds.get(key, 0.0), s)
        return seconds


def load(path: Path, name: str | None = None) -> Replay:
    """The Replay of a Kernel Tuner cache file. Non-integer parameter values (Kernel Tuner allows
    floats and strings) are replaced by their index in the list: Space configs are integers."""
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        tune_params: dict[str, list[Any]] = data["tune_params"]
        cache: dict[str, dict[str, Any]] = data["cache"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReplayError(f"{path}: not a Kernel Tuner cache file ({type(exc).__name__}: {exc})") from None
    objective = data.get("objective", "time")
    if objective not in _OBJECTIVES_TO_MINIMISE:
        raise ReplayError(
            f"{path}: objective {objective!r} is not one this replay minimises ({_OBJECTIVES_TO_MINIMISE})"
        )
    params, encoders = [], []
    for pname, choices in tune_params.items():
        as_int = all(type(c) is int for c in choices)
        encoders.append({str(c): (c if as_int else i) for i, c in enumerate(choices)})
        params.append(Param(pname, tuple(c if as_int else i for i, c in enumerate(choices))))
    values: dict[tuple[int, ...], float | None] = {}
    compile_s: dict[tuple[int, ...], float] = {}
    measure_s: dict[tuple[int, ...], float] = {}
    for key, record in cache.items():
        parts = key.split(",")
        if len(parts) != len(encoders) or any(p not in e for p, e in zip(parts, encoders, strict=False)):
            raise ReplayError(f"{path}: cache key {key!r} does not match tune_params")
        point = tuple(e[p] for p, e in zip(parts, encoders, strict=True))
        value = record.get(objective)
        values[point] = float(value) if _positive(value) else None
        if _positive(record.get("compile_time"), zero=True) and _positive(record.get("benchmark_time"), zero=True):
            compile_s[point] = record["compile_time"] / 1e3  # Kernel Tuner's times are in ms
            measure_s[point] = record["benchmark_time"] / 1e3
    measured = [v for v in values.values() if v is not None]
    if not measured:
        raise ReplayError(f"{path}: no config in the cache has a measured {objective}")
    names = tuple(tune_params)

    def constraint(config: Mapping[str, int]) -> str | None:
        return None if tuple(config[n] for n in names) in values else "not in the cache (breaks its restrictions)"

    compiled = data.get("compiled_params")
    if compiled is not None and not (isinstance(compiled, list) and set(compiled) <= set(names)):
        raise ReplayError(f"{path}: compiled_params {compiled!r} are not names of tune_params")
    if compile_s and len(compile_s) < len(values):  # a config without times takes the median ones
        typical_compile, typical_measure = statistics.median(compile_s.values()), statistics.median(measure_s.values())
        for point in values.keys() - compile_s.keys():
            compile_s[point], measure_s[point] = typical_compile, typical_measure
    return Replay(
        name or path.name,
        Space(tuple(params), constraint),
        values,
        min(measured),
        compile_s,
        measure_s,
        tuple(compiled) if compiled is not None else None,
    )


def _positive(value: Any, zero: bool = False) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and (value >= 0 if zero else value > 0)


# -- the product's search -----------------------------------------------------------------------------
@dataclass
class Run:
    """One replayed run: the values measured, in order (None for a failure), and the simulated clock
    (seconds) when each measurement ended."""

    values: list[float | None] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


class _ClockFuture(Future):  # type: ignore[type-arg]
    """A compile that is done once the pool's clock reaches its finish; waiting for it moves the clock there."""

    def __init__(self, pool: ReplayPool, job: CompileJob, finish: float) -> None:
        super().__init__()
        self._pool, self.finish = pool, finish
        self.set_result(CompileResult(job, Path("replay.cubin"), "", 0.0, False))

    def done(self) -> bool:
        return self.finish <= self._pool.clock

    def result(self, timeout: float | None = None) -> CompileResult:
        self._pool.clock = max(self._pool.clock, self.finish)
        return super().result(timeout)  # type: ignore[no-any-return]


class ReplayPool:
    """CompilePool's interface on a simulated clock. With `compile_times`, a job takes its kernel's recorded
    compile seconds on the first of `workers` compile slots to come free, in the order submitted (the
    pool's FIFO threads), and a kernel compiled or compiling already costs nothing more (the cubin cache);
    without, every job is compiled the moment it is submitted. Measurements move the clock by their
    recorded seconds (ReplayMeasurer); without recorded times, by one second each."""

    def __init__(self, replay: Replay, workers: int, compile_times: bool = False) -> None:
        self.replay, self.workers = replay, workers
        self.compile_times = compile_times and replay.timed
        self.clock = 0.0
        self._free = [0.0] * workers  # when each compile slot is next free
        self._kernels: dict[tuple[int, ...], float] = {}  # kernel -> when its compile ends

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        finish = self.clock
        if self.compile_times:
            kernel = self.replay.kernel(tuple(int(v) for v in job.name.split(",")))
            if kernel in self._kernels:
                finish = max(finish, self._kernels[kernel])
            else:
                slot = min(range(self.workers), key=self._free.__getitem__)
                finish = max(finish, self._free[slot]) + self.replay.kernel_compile_s[kernel]
                self._free[slot] = self._kernels[kernel] = finish
        return _ClockFuture(self, job, finish)

    def wait_any(self, futures: Sequence[Future[CompileResult]]) -> None:
        self.clock = max(self.clock, min(f.finish for f in futures if isinstance(f, _ClockFuture)))

    def measured(self, point: tuple[int, ...]) -> float:
        """One measurement of `point` has run; the clock after it."""
        self.clock += self.replay.measure_s[point] if self.replay.timed else 1.0
        return self.clock


class ReplayMeasurer(Measurer):
    """Measures a config by looking its value up; keeps the values (and the pool's clock) in measuring order."""

    def __init__(self, replay: Replay, pool: ReplayPool | None = None) -> None:
        self.replay = replay
        self.pool = pool or ReplayPool(replay, DEFAULT_WORKERS)
        self.run = Run()
        self.invalid = 0

    @property
    def trace(self) -> list[float | None]:
        return self.run.values

    def compile_job(self, config: Config) -> CompileJob:
        return CompileJob(",".join(str(config[n]) for n in self.replay.names), "", "replay", "")

    def crashes(self, config: Config) -> int:
        return 0

    def record_invalid(self, config: Config, reason: str) -> None:
        self.invalid += 1

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        value = self.replay.value(config)
        self.run.values.append(value)
        self.run.seconds.append(self.pool.measured(self.replay.point(config)))
        if value is None:
            return Outcome(Status.LAUNCH_ERROR, "failed in the replayed cache")
        return Outcome(Status.OK, time_us=value, times_us=[value])


def run_study(
    replay: Replay,
    seed: int,
    cap: int,
    sampler: str = DEFAULT_SAMPLER,
    workers: int = DEFAULT_WORKERS,
    compile_times: bool = False,
) -> Run:
    """The product's Study, unstopped by patience, for `cap` measured trials (fewer when it ends)."""
    pool = ReplayPool(replay, workers, compile_times)
    measurer = ReplayMeasurer(replay, pool)
    study = Study(replay.space, measurer, pool, sampler=sampler, seed=seed)  # type: ignore[arg-type]
    study.run(Budget(trials=cap))
    return measurer.run


# -- a genetic algorithm, after Kernel Tuner's ----------------------------------------------------------
class _BudgetSpent(Exception):
    """The genetic algorithm asked for one evaluation more than its cap."""


@dataclass(frozen=True)
class GeneticAlgorithm:
    population: int = 20
    elite: int = 2  # the best carried over unchanged
    tournament: int = 3
    mutation: float = 0.1  # chance per parameter of moving to a neighbouring value
    tries: int = 100  # attempts at a valid child before a random valid config stands in


def run_ga(
    replay: Replay,
    seed: int,
    cap: int,
    ga: GeneticAlgorithm = GeneticAlgorithm(),
    workers: int = DEFAULT_WORKERS,
    compile_times: bool = False,
) -> Run:
    """Tournament selection, uniform crossover, mutation to neighbouring values, elitism; only valid
    configs enter the population, and configs measured before cost nothing when they come back. Each
    generation's new configs compile together on `workers` slots and are measured as they finish (Kernel
    Tuner itself compiles one at a time: this is the faster GA)."""
    rng = random.Random(seed)
    valid = sorted(replay.values)
    sizes = [len(p.choices) for p in replay.space.params]
    index = [{v: i for i, v in enumerate(p.choices)} for p in replay.space.params]
    known: dict[tuple[int, ...], float] = {}
    run = Run()
    pool = ReplayPool(replay, workers, compile_times)

    def evaluate(generation: Sequence[tuple[int, ...]]) -> None:
        new = [c for c in dict.fromkeys(generation) if c not in known][: max(cap - len(run.values), 0)]
        jobs = [(c, pool.submit(CompileJob(",".join(map(str, c)), "", "replay", ""))) for c in new]
        for config, future in jobs:  # FIFO slots: they finish in the order submitted, bar cached kernels
            future.result()
            value = replay.values[config]
            run.values.append(value)
            run.seconds.append(pool.measured(config))
            known[config] = float("inf") if value is None else value
        if any(c not in known for c in generation):
            raise _BudgetSpent

    def fitness(config: tuple[int, ...]) -> float:
        return known[config]

    def child(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        for _ in range(ga.tries):
            genes = [x if rng.random() < 0.5 else y for x, y in zip(a, b, strict=True)]
            for i, p in enumerate(replay.space.params):
                if rng.random() < ga.mutation:
                    j = min(max(index[i][genes[i]] + rng.choice((-1, 1)), 0), sizes[i] - 1)
                    genes[i] = p.choices[j]
            if tuple(genes) in replay.values:
                return tuple(genes)
        return rng.choice(valid)

    population = rng.sample(valid, min(ga.population, len(valid)))
    stale = 0  # generations that measured nothing new: the space is used up around the population
    try:
        while len(known) < len(valid) and stale < 100:
            before = len(run.values)
            evaluate(population)
            ranked = sorted(population, key=fitness)
            nxt = ranked[: ga.elite]
            while len(nxt) < len(ranked):
                a, b = (min(rng.sample(ranked, min(ga.tournament, len(ranked))), key=fitness) for _ in range(2))
                nxt.append(child(a, b))
            population = nxt
            stale = stale + 1 if len(run.values) == before else 0
    except _BudgetSpent:
        pass
    return run


UNPOOLED = frozenset({"ga"})  # strategies that keep no trials pending (the GA waits for each generation)
# name -> (replay, seed, evaluation cap, compile pool workers, recorded compile times?) -> the run
STRATEGIES: dict[str, Callable[[Replay, int, int, int, bool], Run]] = {
    **{
        name: functools.partial(
            lambda replay, seed, cap, workers, timed, sampler: run_study(replay, seed, cap, sampler, workers, timed),
            sampler=DEFAULT_SAMPLER if name == "default" else name,
        )
        for name in ("default", "tpe", "tpe-valid", "tpe-local", "tpe-ranked", "tpe-fresh")
    },
    "ga": lambda replay, seed, cap, workers, timed: run_ga(replay, seed, cap, workers=workers, compile_times=timed),
}


# -- what a run reached -------------------------------------------------------------------------------
def evaluations_to(trace: Sequence[float | None], optimum: float, within: float) -> int | None:
    """Evaluations until a config within `within` (0.02: 2%) of the optimum was measured; None: never."""
    for i, value in enumerate(trace):
        if value is not None and value <= optimum * (1 + within):
            return i + 1
    return None


def median_seconds_to(runs: Sequence[Run], optimum: float, within: float) -> float | None:
    """The median simulated seconds until a config within `within` of the optimum was measured (a run
    that never got there counts as infinite; an infinite median is None)."""
    times = []
    for run in runs:
        reached = evaluations_to(run.values, optimum, within)
        times.append(float("inf") if reached is None else run.seconds[reached - 1])
    value = statistics.median(times)
    return None if value == float("inf") else round(value, 3)


def sweep_stop(trace: Sequence[float | None], trials: int = DEFAULT_TRIALS, patience: int = DEFAULT_PATIENCE) -> int:
    """How many of these evaluations a sweep's default budget on an unseen space runs: `trials`, or fewer where
    `patience` trials in a row bring no 1% improvement (the rule of Study.run)."""
    best: float | None = None
    since = 0
    for i, value in enumerate(trace[:trials]):
        if value is not None and (best is None or value < 0.99 * best):
            since = 0
        else:
            since += 1
        if value is not None and (best is None or value < best):
            best = value
        if since >= patience:
            return i + 1
    return min(len(trace), trials)


def summarise(traces: Sequence[Sequence[float | None]], optimum: float) -> dict[str, Any]:
    """The report row of one strategy on one space (medians count a run that never got there as
    infinite; a median that is infinite is reported as null)."""

    def median(within: float) -> float | None:
        reached = [evaluations_to(t, optimum, within) for t in traces]
        value = statistics.median(float("inf") if r is None else r for r in reached)
        return None if value == float("inf") else value

    def reach(within: float, budget: Callable[[Sequence[float | None]], int]) -> float:
        hits = [evaluations_to(t, optimum, within) for t in traces]
        return sum(h is not None and h <= budget(t) for h, t in zip(hits, traces, strict=True)) / len(traces)

    row: dict[str, Any] = {"runs": len(traces), "median_to_2pct": median(0.02), "median_to_5pct": median(0.05)}
    for n in (50, 100, 200):
        row[f"reach_2pct_at_{n}"] = reach(0.02, lambda _, n=n: n)  # type: ignore[misc]
    row["reach_2pct_default_budget"] = reach(0.02, sweep_stop)
    # Other stops than the default, for a budget derived from evidence: "trials/patience" -> share of runs.
    row["reach_2pct_budgets"] = {
        f"{trials}/{patience}": reach(0.02, lambda t, trials=trials, patience=patience: sweep_stop(t, trials, patience))
        for trials, patience in BUDGETS
    }
    bests = [min((v for v in t[: sweep_stop(t)] if v is not None), default=float("inf")) for t in traces]
    row["median_best_default_budget"] = statistics.median(bests) / optimum
    return row
