"""The grid sampler on the real GEMV space: valid points only, each once, lazily, in seconds."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from autotune.core.outcome import Outcome, Status
from autotune.core.space import Config, Param, Space, config_key
from autotune.ops import gemv
from autotune.tune.grid import Permutation, ValidGridSampler
from autotune.tune.search import Budget, Study, make_sampler
from tests.fakes import InstantPool
from tests.test_search import PROBLEM, FakeMeasurer


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1000, 4097])
def test_the_permutation_is_a_bijection(size: int) -> None:
    order = Permutation(size, seed=5)
    assert sorted(order(i) for i in range(size)) == list(range(size))


def test_the_permutation_depends_on_the_seed() -> None:
    assert [Permutation(1000, 1)(i) for i in range(20)] != [Permutation(1000, 2)(i) for i in range(20)]


def test_a_grid_study_on_the_real_space_proposes_only_valid_points_in_seconds() -> None:
    # Optuna's GridSampler was handed all 10.6 M cartesian points (2.6 GB, > 1 s a proposal), and
    # 78% of what it proposed was ruled out by the constraint and recorded as invalid.
    measurer = FakeMeasurer()
    start = time.perf_counter()
    result = Study(measurer.space, measurer, InstantPool(), sampler="grid", seed=3).run(Budget(trials=1000))  # type: ignore[arg-type]
    assert time.perf_counter() - start < 20
    assert result.measured == 1000 and measurer.invalid == []
    keys = {config_key(c) for c in measurer.measured}
    assert len(keys) == 1000
    # Scattered over the space, not one corner of it: every block size and lane count comes up.
    for name in ("block", "lanes", "split"):
        assert {c[name] for c in measurer.measured} == set(measurer.space.choices()[name])


def _small_space() -> Space:
    return Space(
        (Param("a", (1, 2, 3, 4)), Param("b", (0, 1, 2))),
        lambda c: None if (c["a"] + c["b"]) % 2 == 0 else "odd",
    )


def _walk(
    space: Space, seed: int, history: Sequence[Config] = (), first: Sequence[Config] = ()
) -> tuple[list[Config], Study]:
    measurer = FakeMeasurer()
    measurer.space = space
    measurer.measure = lambda config, compiled: (  # type: ignore[method-assign]
        measurer.measured.append(config) or Outcome(Status.OK, time_us=1.0 + config["a"])
    )
    study = Study(space, measurer, InstantPool(), sampler="grid", seed=seed)  # type: ignore[arg-type]
    study.add_history((c, Outcome(Status.OK, time_us=1.0)) for c in history)
    study.warm_start(first)
    study.run(Budget(trials=100))
    return measurer.measured, study


def test_every_valid_point_once_then_exhausted_and_the_same_order_for_the_same_seed() -> None:
    space = _small_space()
    measured, study = _walk(space, seed=7)
    assert sorted(config_key(c) for c in measured) == sorted(config_key(c) for c in space)
    assert study.result.stopped == "search space exhausted"
    assert _walk(space, seed=7)[0] == measured


def test_stored_and_warm_start_points_are_not_proposed_again() -> None:
    space = _small_space()
    valid = list(space)
    measured, study = _walk(space, seed=1, history=valid[:2], first=[valid[2]])
    assert measured[0] == valid[2]  # the warm start comes first
    assert sorted(config_key(c) for c in measured) == sorted(config_key(c) for c in valid[2:])
    assert study.result.reused == 2 and study.result.stopped == "search space exhausted"


def test_make_sampler_builds_nothing_the_size_of_the_space() -> None:
    space = gemv.OP.space(PROBLEM)
    start = time.perf_counter()
    sampler = make_sampler("grid", space, seed=0)
    assert isinstance(sampler, ValidGridSampler) and sampler.size > 10**7
    assert time.perf_counter() - start < 1
