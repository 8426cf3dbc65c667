"""The ranked order of a study's compiled candidates (autotune/tune/ranking.py, samplers tpe-ranked and tpe-fresh): the
main-effects and pair models, the pick among compiled candidates only, and candidates dropped after too
many passes."""

from __future__ import annotations

import math
from collections import deque
from concurrent.futures import Future
from typing import Any

from autotune.build.compiler import CompileResult
from autotune.core.space import Param, Space
from autotune.tune import ranking
from autotune.tune.search import Study
from tests.fakes import InstantPool
from tests.test_search import FakeMeasurer

SPACE = Space((Param("a", (1, 2, 3, 4)), Param("b", (1, 2, 3))), lambda config: None)


def separable(config: dict[str, int]) -> float:
    return math.exp(0.3 * config["a"] - 0.5 * config["b"])


def configs() -> list[dict[str, int]]:
    return [{"a": a, "b": b} for a in (1, 2, 3, 4) for b in (1, 2, 3)]


def test_the_model_ranks_a_separable_time_and_predicts_configs_never_measured() -> None:
    unseen = [{"a": 1, "b": 3}, {"a": 4, "b": 2}]
    model = ranking.AdditiveModel(SPACE, [(c, separable(c)) for c in configs() if c not in unseen])
    every = configs()
    assert sorted(every, key=model.predict) == sorted(every, key=separable)
    assert min(every, key=model.predict) == {"a": 1, "b": 3}  # the fastest, never measured
    for config in unseen:
        assert math.isclose(model.predict(config), separable(config), rel_tol=0.05)


def test_the_pair_model_sees_an_interaction_the_main_effects_cannot() -> None:
    def crossed(config: dict[str, int]) -> float:  # fast where a and b are both odd or both even
        return 1.0 if config["a"] % 2 == config["b"] % 2 else 2.0

    results = [(c, crossed(c)) for c in configs()]
    pair, main = ranking.PairModel(SPACE, results), ranking.AdditiveModel(SPACE, results)
    fast = [c for c in configs() if crossed(c) == 1.0]
    slow = [c for c in configs() if crossed(c) == 2.0]
    assert max(map(pair.predict, fast)) < min(map(pair.predict, slow))
    assert max(map(main.predict, fast)) > min(map(main.predict, slow))  # each parameter alone says little
    # Where the time is separable, the pairs add nothing the main effects did not see.
    separate = ranking.PairModel(SPACE, [(c, separable(c)) for c in configs()])
    assert sorted(configs(), key=separate.predict) == sorted(configs(), key=separable)


def test_a_failed_config_counts_as_twice_the_slowest() -> None:
    model = ranking.AdditiveModel(SPACE, [({"a": 1, "b": 1}, 1.0), ({"a": 2, "b": 1}, 4.0), ({"a": 3, "b": 1}, None)])
    assert math.isclose(model.predict({"a": 3, "b": 1}), ranking.FAILED_AS * 4.0, rel_tol=1e-9)


def _ranked_study() -> Study:
    measurer = FakeMeasurer()
    study = Study(SPACE, measurer, InstantPool(), sampler="tpe-ranked", seed=3)  # type: ignore[arg-type]
    study._results = [(c, separable(c)) for c in configs()[: ranking.RANK_AFTER]]
    return study


def _pending(study: Study, picked: list[dict[str, int]], done: bool = True) -> deque[Any]:
    entries: deque[Any] = deque()
    for config in picked:
        future: Future[CompileResult] = Future()
        if done:
            future.set_result(CompileResult(None, None, "", 0.0, False))  # type: ignore[arg-type]
        entries.append((study._study.ask(), config, future))
    return entries


def test_the_compiled_candidate_predicted_fastest_is_measured_first() -> None:
    study = _ranked_study()
    slow, fast, middle = {"a": 4, "b": 1}, {"a": 1, "b": 3}, {"a": 2, "b": 2}
    pending = _pending(study, [slow, fast, middle])
    assert study._next(pending)[1] == fast
    assert [entry[1] for entry in pending] == [slow, middle]
    not_compiled = _pending(study, [fast], done=False)[0]
    pending.appendleft(not_compiled)  # predicted fastest, but not compiled yet: not waited for
    assert study._next(pending)[1] == middle


def test_a_candidate_passed_over_too_often_is_dropped_and_its_compile_cancelled() -> None:
    study = _ranked_study()
    pending = _pending(study, [{"a": 4, "b": 1}])
    for _ in range(ranking.DROP_AFTER + 1):
        pending.extend(_pending(study, [{"a": 1, "b": 3}]))
        assert study._next(pending)[1] == {"a": 1, "b": 3}
    assert not pending and study.result.dropped == 1


def test_before_enough_results_the_first_asked_goes_first() -> None:
    study = _ranked_study()
    study._results = study._results[: ranking.RANK_AFTER - 1]
    pending = _pending(study, [{"a": 4, "b": 1}, {"a": 1, "b": 3}])
    assert study._next(pending)[1] == {"a": 4, "b": 1}


def test_a_stored_config_the_space_no_longer_has_is_not_learned_from() -> None:
    from autotune.core.outcome import Outcome, Status

    study = Study(SPACE, FakeMeasurer(), InstantPool(), sampler="tpe-ranked", seed=3)  # type: ignore[arg-type]
    study.add_history(
        [({"a": 1}, Outcome(Status.OK, time_us=1.0)), ({"a": 2, "b": 1}, Outcome(Status.OK, time_us=2.0))]
    )
    assert study._results == [({"a": 2, "b": 1}, 2.0)]


def test_a_candidate_still_compiling_is_not_counted_as_passed_over() -> None:
    study = _ranked_study()
    compiling = _pending(study, [{"a": 1, "b": 3}], done=False)
    pending = compiling.copy()
    for _ in range(ranking.DROP_AFTER + 2):
        pending.extend(_pending(study, [{"a": 4, "b": 1}]))
        assert study._next(pending)[1] == {"a": 4, "b": 1}
    assert list(pending) == list(compiling) and study.result.dropped == 0


def test_a_fresh_study_ranks_only_the_candidates_asked_last_and_drops_the_rest_later() -> None:
    study = _ranked_study()
    study._ranked, study._fresh = True, True  # as sampler="tpe-fresh" sets them (its TPE has no constant liar)
    fastest, slow, middle, slower = {"a": 1, "b": 3}, {"a": 4, "b": 1}, {"a": 2, "b": 2}, {"a": 3, "b": 1}
    pending = _pending(study, [fastest, slow, slower, middle])
    assert study._next(pending)[1] == middle  # the best of the FRESH (2) asked last, not the fastest overall
    assert [entry[1] for entry in pending] == [fastest, slow, slower]
    newer = {"a": 2, "b": 3}
    for _ in range(ranking.FRESH_DROP_AFTER - 1):  # the older three are passed over each time, never ranked
        pending.extend(_pending(study, [newer]))
        assert study._next(pending)[1] == newer
    assert study.result.dropped == 0 and [entry[1] for entry in pending] == [fastest, slow, slower]
    pending.extend(_pending(study, [newer]))
    assert study._next(pending)[1] == newer
    assert study.result.dropped == 3 and not pending


def test_tpe_fresh_proposes_without_constant_liar() -> None:
    study = Study(SPACE, FakeMeasurer(), InstantPool(), sampler="tpe-fresh", seed=3)  # type: ignore[arg-type]
    assert study._fresh and study._ranked and not study._study.sampler._constant_liar  # type: ignore[attr-defined]
