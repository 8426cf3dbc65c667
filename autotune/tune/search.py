"""One Optuna study per problem: ask/tell over the op's space, de-duplicated against the database.

The database is the single source of truth: a study lives in memory and is seeded from the trials
already stored for the problem (that is how an interrupted sweep resumes, and nothing is measured
twice), then warm-started with the best configs of the nearest tuned shapes.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import TrialState

from autotune.build.compiler import CompileJob, CompilePool, CompileResult
from autotune.core.outcome import Outcome, Status
from autotune.core.space import Config, Space, config_key
from autotune.tune import ranking
from autotune.tune.grid import ValidGridSampler
from autotune.tune.valid_tpe import FRESH_LOCAL_SHARE, LOCAL_SHARE, ValidTPESampler

SAMPLERS = ("tpe", "tpe-valid", "tpe-local", "tpe-ranked", "tpe-fresh", "random", "grid")
DEFAULT_SAMPLER = "tpe-fresh"  # a sweep's, unless asked for another (docs/findings.md, "Search on spaces never seen")
# Samplers whose study measures, among the compiled candidates, the one predicted fastest first
# (autotune/tune/ranking.py) instead of the one asked first; "tpe-fresh" only among the FRESH most recently
# asked, from a TPE that proposes knowing the results alone (no constant liar).
RANKED = ("tpe-ranked", "tpe-fresh")
QUARANTINE_AFTER = 2  # worker deaths or hangs before a config is never dispatched again
# A model-based sampler can settle on configs it has already seen (or on invalid ones) and propose
# nothing new for thousands of asks while most of the space is unexplored. After this many proposals
# in a row that bring nothing new, a uniformly drawn unmeasured valid config is measured next (not
# for the grid, which walks its points in order and knows when it is done).
KICK_AFTER = 25
_KICK_DRAWS = 2000  # random draws to find such a config before giving up on this kick
_WORKER_FAULTS = (Status.CRASHED, Status.TIMEOUT)

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass
class Budget:
    trials: int = 64  # final trials per problem, counting those stored by earlier runs
    timeout_s: float | None = None  # wall time for this run on the problem
    patience: int | None = None  # stop after this many measured trials without a 1% improvement
    target_us: float | None = None  # stop as soon as a config this fast is found (benchmarks)
    # The budget of a problem that nothing stored seeds (no earlier sweep of it, no other GPU's, no tuned
    # neighbour): a search that starts blind needs more trials to find the optimum (docs/findings.md,
    # "Search on spaces never seen"). None: the same budget for every problem.
    unseen: Budget | None = None

    def for_problem(self, seeded: bool) -> Budget:
        """This budget, or its `unseen` one where nothing stored seeds the problem."""
        return self if seeded or self.unseen is None else self.unseen


@dataclass
class StudyResult:
    best_config: Config | None = None
    best_us: float | None = None
    measured: int = 0  # trials measured in this run
    reused: int = 0  # trials found in the database
    statuses: dict[str, int] = field(default_factory=dict)
    stopped: str = ""  # why the study ended
    kicks: int = 0  # uniformly drawn configs measured because the sampler proposed nothing new
    dropped: int = 0  # compiled candidates a ranked study passed over too often and never measured
    # Configs queued to be measured first (warm_start: stored leaders, neighbours' leaders, the op's
    # seed tilings) that an early stop left unmeasured: a longer patience would have measured them.
    unmeasured_first: int = 0
    confirmed: int = 0  # leaders measured again on fresh buffers (autotune/tune/confirm.py)
    vendor_us: float | None = None  # cuBLASLt's best algorithm, timed beside (autotune/tune/libraries.py)


class Measurer:
    """What a study needs from the outside world (the tuner wires in store, compiler and worker)."""

    def compile_job(self, config: Config) -> CompileJob:
        raise NotImplementedError

    def crashes(self, config: Config) -> int:
        raise NotImplementedError

    def record_invalid(self, config: Config, reason: str) -> None:
        raise NotImplementedError

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        """Record the trial as running, measure it, record the outcome; return it."""
        raise NotImplementedError


def make_sampler(name: str, space: Space, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    if name == "tpe-valid":
        return ValidTPESampler(space, seed)
    if name in ("tpe-local", "tpe-ranked"):  # tpe-ranked: the same proposals, measured in ranked order
        return ValidTPESampler(space, seed, local=LOCAL_SHARE)
    if name == "tpe-fresh":  # pending trials do not count as bad: see ranking.FRESH
        return ValidTPESampler(space, seed, local=FRESH_LOCAL_SHARE, constant_liar=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return ValidGridSampler(space, seed)
    raise ValueError(f"unknown sampler {name!r}: choose one of {', '.join(SAMPLERS)}")


class Study:
    def __init__(
        self,
        space: Space,
        measurer: Measurer,
        pool: CompilePool,
        *,
        sampler: str = DEFAULT_SAMPLER,
        seed: int | None = None,
        on_trial: Callable[[Config, Outcome, StudyResult], None] | None = None,
    ) -> None:
        self.space = space
        self._measurer = measurer
        self._pool = pool
        self._on_trial = on_trial or (lambda *_: None)
        self._distributions: dict[str, BaseDistribution] = {
            name: CategoricalDistribution(list(choices)) for name, choices in space.choices().items()
        }
        self._study = optuna.create_study(direction="minimize", sampler=make_sampler(sampler, space, seed))
        self._rng = random.Random(seed)
        self._known: dict[str, Outcome] = {}
        self.result = StudyResult()
        self._ranked = sampler in RANKED
        self._fresh = sampler == "tpe-fresh"
        self._results: list[tuple[Config, float | None]] = []  # what the ranking model learns from
        self._passed_over: dict[int, int] = {}  # a pending trial's number -> times another went first

    # -- seeding ------------------------------------------------------------------------------
    def add_history(self, history: Iterable[tuple[Config, Outcome]]) -> None:
        """Trials stored earlier for this problem and kernel source: told to Optuna, never re-measured."""
        for config, outcome in history:
            if outcome.status in _WORKER_FAULTS and self._measurer.crashes(config) < QUARANTINE_AFTER:
                self._study.enqueue_trial(dict(config))  # it killed a worker only once: a second chance
                continue
            self._known[config_key(config)] = outcome
            if outcome.status is Status.INVALID:
                continue  # never measured: costs no budget
            self.result.reused += 1
            self._count(outcome)
            self._improve(config, outcome)
            if self.space.check(config) is None:  # a config of the space as it is now (not one it lost)
                self._results.append((dict(config), outcome.time_us if outcome.ok else None))
                self._study.add_trial(
                    optuna.trial.create_trial(
                        params=dict(config),
                        distributions=self._distributions,
                        value=outcome.time_us if outcome.ok else None,
                        state=TrialState.COMPLETE if outcome.ok else TrialState.FAIL,
                    )
                )

    def warm_start(self, configs: Iterable[Mapping[str, int]]) -> int:
        """Measure these first (the best configs of the nearest tuned shapes), when valid here and not
        measured yet; returns how many were queued."""
        queued: set[str] = set()
        for config in configs:
            key = config_key(config)
            if self.space.check(config) is None and key not in self._known and key not in queued:
                self._study.enqueue_trial(dict(config), skip_if_exists=True)
                queued.add(key)
        return len(queued)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, budget: Budget) -> StudyResult:
        remaining = budget.trials - self.result.reused
        start = time.monotonic()
        pending: deque[tuple[optuna.trial.Trial, Config, Future[CompileResult]]] = deque()
        asks, ask_cap = 0, 50 * max(remaining, 1) + 500
        since_improvement = 0
        fruitless = 0  # proposals in a row that brought nothing new
        exhausted = False
        self.result.stopped = "budget reached"
        while True:
            timed_out = budget.timeout_s is not None and time.monotonic() - start > budget.timeout_s
            while (
                not timed_out
                and len(pending) < self._pool.workers
                and self.result.measured + len(pending) < remaining
                and asks < ask_cap
            ):
                if self._exhausted():
                    asks, exhausted = ask_cap, True
                    break
                asks += 1
                queued = self._ask(pending)
                if queued is not None:
                    pending.append(queued)
                    fruitless = 0
                    continue
                fruitless += 1
                if fruitless >= KICK_AFTER and not isinstance(self._study.sampler, ValidGridSampler):
                    fruitless = 0
                    fresh = self._unexplored(pending)
                    if fresh is not None:
                        self._study.enqueue_trial(fresh)
                        self.result.kicks += 1
            if not pending:
                if timed_out:
                    self.result.stopped = "timeout"
                elif exhausted:
                    self.result.stopped = "search space exhausted"
                elif asks >= ask_cap:
                    # The sampler kept proposing configs already measured or ruled out by the constraints.
                    self.result.stopped = f"no new valid config in {ask_cap} proposals"
                break
            trial, config, future = self._next(pending)
            before = self.result.best_us
            outcome = self._finish(config, future.result())
            self._tell(trial, outcome)
            since_improvement = 0 if self._improved(before) else since_improvement + 1
            reached = budget.target_us is not None and (self.result.best_us or float("inf")) <= budget.target_us
            if reached or (budget.patience is not None and since_improvement >= budget.patience):
                self.result.stopped = "target reached" if reached else f"no 1% improvement in {budget.patience} trials"
                for late_trial, _, late in pending:
                    late.cancel()
                    self._study.tell(late_trial, state=TrialState.FAIL)
                self.result.unmeasured_first = len(self._study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
                break
        return self.result

    def _next(
        self, pending: deque[tuple[optuna.trial.Trial, Config, Future[CompileResult]]]
    ) -> tuple[optuna.trial.Trial, Config, Future[CompileResult]]:
        """The pending candidate to measure now: the first asked, or in a ranked study (after
        RANK_AFTER results) the compiled one the model predicts fastest (for tpe-fresh: of the FRESH
        compiled ones asked last), dropping those passed over DROP_AFTER times."""
        if not self._ranked or len(self._results) < ranking.RANK_AFTER or len(pending) == 1:
            return pending.popleft()
        if not any(future.done() for _, _, future in pending):
            self._pool.wait_any([future for _, _, future in pending])
        model = ranking.PairModel(self.space, self._results)
        ready = [entry for entry in pending if entry[2].done()]  # in the order asked
        if self._fresh:
            ready = ready[-ranking.FRESH :]
        chosen = min(ready, key=lambda entry: model.predict(entry[1]))
        pending.remove(chosen)
        for entry in [e for e in pending if e[2].done()]:  # one still compiling was not passed over
            number = entry[0].number
            self._passed_over[number] = self._passed_over.get(number, 0) + 1
            if self._passed_over[number] > (ranking.FRESH_DROP_AFTER if self._fresh else ranking.DROP_AFTER):
                pending.remove(entry)
                entry[2].cancel()
                self._study.tell(entry[0], state=TrialState.FAIL)
                self.result.dropped += 1
        return chosen

    def _unexplored(self, pending: deque[tuple[optuna.trial.Trial, Config, Future[CompileResult]]]) -> Config | None:
        """A valid config neither known nor pending, drawn uniformly (None if the draws find none)."""
        choices = self.space.choices()
        taken = {config_key(c) for _, c, _ in pending}
        for _ in range(_KICK_DRAWS):
            config = {name: self._rng.choice(values) for name, values in choices.items()}
            key = config_key(config)
            if key not in self._known and key not in taken and self.space.check(config) is None:
                return config
        return None

    def _exhausted(self) -> bool:
        """Only a grid knows it has no new point left; other samplers end at the ask cap."""
        sampler = self._study.sampler
        return isinstance(sampler, ValidGridSampler) and sampler.is_exhausted(self._study)

    def _ask(
        self, pending: deque[tuple[optuna.trial.Trial, Config, Future[CompileResult]]]
    ) -> tuple[optuna.trial.Trial, Config, Future[CompileResult]] | None:
        trial = self._study.ask(self._distributions)
        config: Config = {name: int(value) for name, value in trial.params.items()}
        key = config_key(config)
        reason = self.space.check(config)
        if reason is not None:
            if key not in self._known:
                self._measurer.record_invalid(config, reason)
                self._known[key] = Outcome(Status.INVALID, reason)
            self._study.tell(trial, state=TrialState.FAIL)
            return None
        if key in self._known:
            self._tell(trial, self._known[key])
            return None
        if any(config_key(c) == key for _, c, _ in pending):
            self._study.tell(trial, state=TrialState.FAIL)
            return None
        if self._measurer.crashes(config) >= QUARANTINE_AFTER:
            outcome = Outcome(Status.QUARANTINED, f"killed the worker {QUARANTINE_AFTER} times")
            self._known[key] = outcome
            self._count(outcome)
            self._tell(trial, outcome)
            return None
        return trial, config, self._pool.submit(self._measurer.compile_job(config))

    def _finish(self, config: Config, compiled: CompileResult) -> Outcome:
        outcome = self._measurer.measure(config, compiled)
        if outcome.status in _WORKER_FAULTS and self._measurer.crashes(config) < QUARANTINE_AFTER:
            # One death may be bad luck (or another config's doing): try once more, soon. The retry,
            # not this attempt, is what counts towards the budget and the statistics.
            self._study.enqueue_trial(dict(config))
            self._on_trial(config, outcome, self.result)
            return outcome
        self._known[config_key(config)] = outcome
        self._results.append((dict(config), outcome.time_us if outcome.ok else None))
        self.result.measured += 1
        self._count(outcome)
        self._improve(config, outcome)
        self._on_trial(config, outcome, self.result)
        return outcome

    def _tell(self, trial: optuna.trial.Trial, outcome: Outcome) -> None:
        if outcome.ok:
            self._study.tell(trial, outcome.time_us)
        else:
            self._study.tell(trial, state=TrialState.FAIL)

    def _count(self, outcome: Outcome) -> None:
        self.result.statuses[outcome.status.value] = self.result.statuses.get(outcome.status.value, 0) + 1

    def _improve(self, config: Config, outcome: Outcome) -> None:
        if not outcome.ok or outcome.time_us is None:
            return
        if self.result.best_us is None or outcome.time_us < self.result.best_us:
            self.result.best_us = outcome.time_us
            self.result.best_config = dict(config)

    def _improved(self, before: float | None) -> bool:
        after = self.result.best_us
        if after is None:
            return False
        return before is None or after < 0.99 * before
