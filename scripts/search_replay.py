"""Search strategies replayed on a fully measured space (a Kernel Tuner cache file): no GPU, no compiler.

A Kernel Tuner cache file (JSON, gzip'd or not) holds `tune_params` (name -> values) and `cache`
(config key "v1,v2,..." in `tune_params` order -> a record whose objective, "time" unless the file
names another, is a number, or a string such as "RuntimeFailedConfig" where the config failed).
Configs absent from the cache broke the space's restrictions: here they are invalid, ruled out by
the `Space`'s constraint before anything is measured, as the product's constraints rule out configs.
A config present with a failure costs an evaluation and measures as a launch error.

`run_study` drives the product's search (autotune.tune.search.Study) through a replay Measurer and a
compile pool that compiles nothing; `run_ga` is a plain genetic algorithm in the manner of Kernel
Tuner's. Each returns the replayed values of the configs it measured, in order (None for a failure):
the evaluations a strategy needed are positions in that list.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.build.compiler import CompileJob, CompileResult
from autotune.core.outcome import Outcome, Status
from autotune.core.space import Config, Param, Space
from autotune.tune.search import Budget, Measurer, Study

# What a sweep runs by default: autotune/cli.py's --trials and --patience, Tuner's sampler.
DEFAULT_TRIALS, DEFAULT_PATIENCE, DEFAULT_SAMPLER = 64, 32, "tpe"
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
    """A fully measured space: each valid config's value (None where it failed) and the optimum."""

    name: str
    space: Space
    values: Mapping[tuple[int, ...], float | None]
    optimum: float

    @property
    def names(self) -> tuple[str, ...]:
        return self.space.names

    def value(self, config: Mapping[str, int]) -> float | None:
        return self.values[tuple(config[n] for n in self.names)]


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
    for key, record in cache.items():
        parts = key.split(",")
        if len(parts) != len(encoders) or any(p not in e for p, e in zip(parts, encoders, strict=False)):
            raise ReplayError(f"{path}: cache key {key!r} does not match tune_params")
        value = record.get(objective)
        number = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        values[tuple(e[p] for p, e in zip(parts, encoders, strict=True))] = float(value) if number else None
    measured = [v for v in values.values() if v is not None]
    if not measured:
        raise ReplayError(f"{path}: no config in the cache has a measured {objective}")
    names = tuple(tune_params)

    def constraint(config: Mapping[str, int]) -> str | None:
        return None if tuple(config[n] for n in names) in values else "not in the cache (breaks its restrictions)"

    return Replay(name or path.name, Space(tuple(params), constraint), values, min(measured))


# -- the product's search -----------------------------------------------------------------------------
class InstantPool:
    """CompilePool's interface: every job 'compiles' at once (a replay has no compile step)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        future: Future[CompileResult] = Future()
        future.set_result(CompileResult(job, Path("replay.cubin"), "", 0.0, False))
        return future


class ReplayMeasurer(Measurer):
    """Measures a config by looking its value up; keeps the values in measuring order."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.trace: list[float | None] = []
        self.invalid = 0

    def compile_job(self, config: Config) -> CompileJob:
        return CompileJob(",".join(str(config[n]) for n in self.replay.names), "", "replay", "")

    def crashes(self, config: Config) -> int:
        return 0

    def record_invalid(self, config: Config, reason: str) -> None:
        self.invalid += 1

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        value = self.replay.value(config)
        self.trace.append(value)
        if value is None:
            return Outcome(Status.LAUNCH_ERROR, "failed in the replayed cache")
        return Outcome(Status.OK, time_us=value, times_us=[value])


def run_study(
    replay: Replay, seed: int, cap: int, sampler: str = DEFAULT_SAMPLER, workers: int = DEFAULT_WORKERS
) -> list[float | None]:
    """The product's Study, unstopped by patience, for `cap` measured trials (fewer when it ends)."""
    measurer = ReplayMeasurer(replay)
    study = Study(replay.space, measurer, InstantPool(workers), sampler=sampler, seed=seed)  # type: ignore[arg-type]
    study.run(Budget(trials=cap))
    return measurer.trace


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


def run_ga(replay: Replay, seed: int, cap: int, ga: GeneticAlgorithm = GeneticAlgorithm()) -> list[float | None]:
    """Tournament selection, uniform crossover, mutation to neighbouring values, elitism; only valid
    configs enter the population, and configs measured before cost nothing when they come back."""
    rng = random.Random(seed)
    valid = sorted(replay.values)
    sizes = [len(p.choices) for p in replay.space.params]
    index = [{v: i for i, v in enumerate(p.choices)} for p in replay.space.params]
    known: dict[tuple[int, ...], float] = {}
    trace: list[float | None] = []

    def fitness(config: tuple[int, ...]) -> float:
        if config not in known:
            if len(trace) >= cap:
                raise _BudgetSpent
            value = replay.values[config]
            trace.append(value)
            known[config] = float("inf") if value is None else value
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
            before = len(trace)
            ranked = sorted(population, key=fitness)
            nxt = ranked[: ga.elite]
            while len(nxt) < len(ranked):
                a, b = (min(rng.sample(ranked, min(ga.tournament, len(ranked))), key=fitness) for _ in range(2))
                nxt.append(child(a, b))
            population = nxt
            stale = stale + 1 if len(trace) == before else 0
    except _BudgetSpent:
        pass
    return trace


UNPOOLED = frozenset({"ga"})  # strategies that propose one config at a time, whatever the pool
# name -> (replay, seed, evaluation cap, compile pool workers) -> the values measured, in order
STRATEGIES: dict[str, Callable[[Replay, int, int, int], list[float | None]]] = {
    "default": lambda replay, seed, cap, workers: run_study(replay, seed, cap, DEFAULT_SAMPLER, workers),
    "tpe-valid": lambda replay, seed, cap, workers: run_study(replay, seed, cap, "tpe-valid", workers),
    "tpe-local": lambda replay, seed, cap, workers: run_study(replay, seed, cap, "tpe-local", workers),
    "tpe-ranked": lambda replay, seed, cap, workers: run_study(replay, seed, cap, "tpe-ranked", workers),
    "tpe-fresh": lambda replay, seed, cap, workers: run_study(replay, seed, cap, "tpe-fresh", workers),
    "ga": lambda replay, seed, cap, _: run_ga(replay, seed, cap),
}


# -- what a run reached -------------------------------------------------------------------------------
def evaluations_to(trace: Sequence[float | None], optimum: float, within: float) -> int | None:
    """Evaluations until a config within `within` (0.02: 2%) of the optimum was measured; None: never."""
    for i, value in enumerate(trace):
        if value is not None and value <= optimum * (1 + within):
            return i + 1
    return None


def sweep_stop(trace: Sequence[float | None], trials: int = DEFAULT_TRIALS, patience: int = DEFAULT_PATIENCE) -> int:
    """How many of these evaluations a sweep's default budget runs: `trials`, or fewer where
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
