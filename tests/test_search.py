"""Studies with test doubles: budgets, de-duplication, history, invalid configs, quarantine, stops."""

from __future__ import annotations

import pytest

from autotune.build.compiler import CompileJob, CompileResult
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space, config_key
from autotune.ops import gemv
from autotune.tune.search import Budget, Measurer, Study
from tests.fakes import InstantPool, modelled_time_us

PROBLEM = Problem("gemv", "float16", 4096, 8192)


class FakeMeasurer(Measurer):
    def __init__(self, crashes: dict[str, int] | None = None, fail: set[str] | None = None) -> None:
        self.space = gemv.OP.space(PROBLEM)
        self.measured: list[Config] = []
        self.invalid: list[str] = []
        self._crashes = crashes or {}
        self._fail = fail or set()

    def compile_job(self, config: Config) -> CompileJob:
        assert self.space.check(config) is None, "an invalid config reached the compiler"
        return CompileJob(config_key(config), "", "sm_90", "h")

    def crashes(self, config: Config) -> int:
        return self._crashes.get(config_key(config), 0)

    def record_invalid(self, config: Config, reason: str) -> None:
        self.invalid.append(reason)

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        self.measured.append(config)
        if compiled.cubin is None:
            return Outcome(Status.COMPILE_ERROR, compiled.message)
        if config_key(config) in self._fail:
            return Outcome(Status.WRONG_RESULT, "planted")
        return Outcome(Status.OK, time_us=modelled_time_us(config))


def _study(measurer: FakeMeasurer, sampler: str = "tpe", seed: int = 1) -> Study:
    return Study(measurer.space, measurer, InstantPool(), sampler=sampler, seed=seed)  # type: ignore[arg-type]


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_budget_is_respected_and_nothing_is_measured_twice(sampler: str) -> None:
    measurer = FakeMeasurer()
    result = _study(measurer, sampler).run(Budget(trials=40))
    keys = [config_key(c) for c in measurer.measured]
    assert result.measured == 40 == len(keys) == len(set(keys))
    assert result.best_us == min(modelled_time_us(c) for c in measurer.measured)


def test_tpe_beats_random_on_the_model() -> None:
    def best(sampler: str) -> float:
        results = [_study(FakeMeasurer(), sampler, seed).run(Budget(trials=80)).best_us for seed in range(3)]
        return sum(r for r in results if r is not None) / len(results)

    assert best("tpe") < best("random")


def test_history_counts_towards_the_budget_and_is_not_remeasured() -> None:
    first = FakeMeasurer()
    _study(first).run(Budget(trials=15))
    history = [(c, Outcome(Status.OK, time_us=modelled_time_us(c))) for c in first.measured]
    second = FakeMeasurer()
    study = _study(second, seed=2)
    study.add_history(history)
    result = study.run(Budget(trials=25))
    assert result.reused == 15 and result.measured == 10
    assert not {config_key(c) for c in second.measured} & {config_key(c) for c, _ in history}


def test_invalid_configs_are_recorded_never_compiled() -> None:
    measurer = FakeMeasurer()
    _study(measurer, "random").run(Budget(trials=30))
    assert measurer.invalid  # the random sampler proposes lanes > block and such
    assert all(measurer.space.check(c) is None for c in measurer.measured)


def test_warm_start_configs_come_first() -> None:
    measurer = FakeMeasurer()
    study = _study(measurer)
    best_known = dict(gemv.DEFAULT_CONFIG, block=256, vec=8, unroll=2)
    study.warm_start([best_known, dict(gemv.DEFAULT_CONFIG, lanes=1024)])  # the second is invalid
    study.run(Budget(trials=5))
    assert measurer.measured[0] == best_known


def test_quarantined_configs_are_never_dispatched() -> None:
    bad = dict(gemv.DEFAULT_CONFIG)
    measurer = FakeMeasurer(crashes={config_key(bad): 2})
    study = _study(measurer)
    study.warm_start([bad])
    result = study.run(Budget(trials=5))
    assert bad not in measurer.measured
    assert result.statuses.get("quarantined") == 1


def test_failures_are_counted_and_never_best() -> None:
    measurer = FakeMeasurer()
    good = dict(gemv.DEFAULT_CONFIG, block=256, vec=8, unroll=2)
    measurer._fail = {config_key(good)}
    study = _study(measurer)
    study.warm_start([good])
    result = study.run(Budget(trials=10))
    assert result.statuses["wrong_result"] == 1
    assert result.best_config != good


def test_patience_stops_early_and_timeout_stops() -> None:
    result = _study(FakeMeasurer(), "random").run(Budget(trials=500, patience=5))
    assert result.measured < 500 and "no 1% improvement" in result.stopped
    timed = _study(FakeMeasurer(), "random").run(Budget(trials=10**6, timeout_s=0.5))
    assert timed.stopped == "timeout"


def test_a_patience_stop_counts_the_configs_queued_first_it_left_unmeasured() -> None:
    measurer = FakeMeasurer()
    study = _study(measurer, "random")
    # The fastest first: none of the others improves on it.
    tilings = [dict(prefetch=f, order=o, policy=p) for f in range(4) for o in range(2) for p in range(3)]
    queued = sorted(
        (c for t in tilings if measurer.space.check(c := {**gemv.DEFAULT_CONFIG, **t}) is None), key=modelled_time_us
    )
    assert len(queued) >= 12  # more than the 4 measured and the 4 compiling beside them
    study.warm_start(queued)
    result = study.run(Budget(trials=100, patience=3))
    assert result.measured == 4 and "no 1% improvement in 3" in result.stopped
    assert 0 < result.unmeasured_first <= len(queued) - 4
    whole = _study(FakeMeasurer(), "random")
    whole.warm_start(queued[:2])
    assert whole.run(Budget(trials=100, patience=3)).unmeasured_first == 0  # its queue was measured


def test_grid_search_ends_when_the_grid_is_exhausted() -> None:
    measurer = FakeMeasurer()
    tiny = Space(
        tuple(
            Param(p.name, p.choices[:2] if p.name in ("block", "unroll") else (gemv.DEFAULT_CONFIG[p.name],))
            for p in measurer.space.params
        ),
        measurer.space.constraint,
    )
    measurer.space = tiny
    study = Study(tiny, measurer, InstantPool(), sampler="grid", seed=0)  # type: ignore[arg-type]
    result = study.run(Budget(trials=50))
    assert result.measured == tiny.size() == 4
    assert result.stopped == "search space exhausted"


def test_the_api_knows_the_same_samplers() -> None:
    from autotune import api
    from autotune.tune import search

    assert api.SAMPLERS == search.SAMPLERS
    assert api.DEFAULT_SAMPLER == search.DEFAULT_SAMPLER


def test_a_sampler_that_proposes_nothing_new_is_kicked_to_unexplored_configs() -> None:
    # A space where 1 point in 16 is valid: TPE keeps proposing invalid or measured points. Without
    # kicks it ran out of proposals after a handful of trials; with them the budget is measured.
    space = Space(
        params=(Param("a", tuple(range(16))), Param("b", tuple(range(16)))),
        constraint=lambda c: None if c["a"] == c["b"] else "off the diagonal",
    )
    measurer = FakeMeasurer()
    measurer.space = space
    measurer.measure = lambda config, compiled: Outcome(Status.OK, time_us=1.0 + config["a"])  # type: ignore[method-assign]
    study = Study(space, measurer, InstantPool(), sampler="tpe", seed=3)  # type: ignore[arg-type]
    result = study.run(Budget(12))
    assert result.measured == 12 and result.stopped == "budget reached", result.stopped
    assert result.kicks > 0
