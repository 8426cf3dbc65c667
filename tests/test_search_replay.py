"""scripts/search_replay.py on a small synthetic Kernel Tuner cache: the product's Study and the genetic
algorithm replayed, invalid configs free, failures counted, and the report's arithmetic."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from autotune.tune.search import Budget, Study
from scripts import search_replay as replay_lib

PARAMS = {"block": [32, 64, 128, 256], "tile": [1, 2, 4, 8], "vec": [1, 2, 4], "smem": [0, 1], "unroll": [1, 2, 4]}
OPTIMUM = {"block": 128, "tile": 4, "vec": 2, "smem": 1, "unroll": 2}
VALID, FAILING = 234, 12


def _time(config: dict[str, int]) -> float:
    return 1.0 + sum(abs(config[n] - OPTIMUM[n]) / max(PARAMS[n]) for n in PARAMS)


def _write_cache(path: Path) -> dict[str, object]:
    """A Kernel Tuner cache: configs with block * tile > 512 break the restrictions (absent), those
    with tile 8 and vec 4 fail at run time; the rest have a time with one best config."""
    cache: dict[str, dict[str, object]] = {}
    for values in itertools.product(*PARAMS.values()):
        config = dict(zip(PARAMS, values, strict=True))
        if config["block"] * config["tile"] > 512:
            continue
        failed = config["tile"] == 8 and config["vec"] == 4
        cache[",".join(map(str, values))] = {**config, "time": "RuntimeFailedConfig" if failed else _time(config)}
    data = {"tune_params": PARAMS, "objective": "time", "cache": cache}
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return data


@pytest.fixture()
def replay(tmp_path: Path) -> replay_lib.Replay:
    _write_cache(tmp_path / "tiny.json.gz")
    return replay_lib.load(tmp_path / "tiny.json.gz")


def test_load_knows_valid_failing_and_the_optimum(replay: replay_lib.Replay) -> None:
    assert len(replay.values) == VALID and sum(v is None for v in replay.values.values()) == FAILING
    assert replay.optimum == 1.0 and replay.value(OPTIMUM) == 1.0
    assert replay.space.check({**OPTIMUM, "block": 256}) is not None  # absent: invalid
    assert replay.space.check(OPTIMUM) is None


def test_damaged_or_unusable_files_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(replay_lib.ReplayError, match="not a Kernel Tuner cache file"):
        replay_lib.load(tmp_path / "bad.json")
    (tmp_path / "gflops.json").write_text(json.dumps({"tune_params": {}, "cache": {}, "objective": "GFLOP/s"}))
    with pytest.raises(replay_lib.ReplayError, match="objective"):
        replay_lib.load(tmp_path / "gflops.json")


def test_plain_tpe_counts_failures_and_skips_invalid_configs(replay: replay_lib.Replay) -> None:
    measurer = replay_lib.ReplayMeasurer(replay)
    study = Study(replay.space, measurer, replay_lib.ReplayPool(replay, workers=4), sampler="tpe", seed=3)  # type: ignore[arg-type]
    failing = [dict(zip(PARAMS, key, strict=True)) for key, value in replay.values.items() if value is None]
    study.warm_start(failing)
    result = study.run(Budget(trials=60))
    assert measurer.invalid > 0  # TPE proposed configs absent from the cache: told as failures, not measured
    assert result.measured == len(measurer.trace) == 60  # failing configs are evaluations too
    assert measurer.trace[:FAILING] == [None] * FAILING and result.statuses["launch_error"] == FAILING
    assert result.best_us == min(v for v in measurer.trace if v is not None)


@pytest.mark.parametrize("sampler", ["tpe-valid", "tpe-local", "tpe-ranked", "tpe-fresh"])
def test_valid_samplers_reach_the_optimum_within_the_whole_space(replay: replay_lib.Replay, sampler: str) -> None:
    measurer = replay_lib.ReplayMeasurer(replay)
    study = Study(replay.space, measurer, replay_lib.ReplayPool(replay, workers=4), sampler=sampler, seed=7)  # type: ignore[arg-type]
    result = study.run(Budget(trials=VALID, target_us=replay.optimum))
    assert result.stopped == "target reached" and result.best_config == OPTIMUM
    assert len(measurer.trace) < VALID and measurer.invalid == 0


def test_ga_reaches_the_optimum_within_the_whole_space(replay: replay_lib.Replay) -> None:
    trace = replay_lib.STRATEGIES["ga"](replay, 7, VALID, 4, False).values
    assert len(trace) <= VALID and trace.count(None) <= FAILING
    assert replay_lib.evaluations_to(trace, replay.optimum, 0.0) is not None


@pytest.mark.parametrize("sampler", ["tpe-valid", "tpe-local", "tpe-ranked", "tpe-fresh"])
def test_valid_tpe_proposes_no_invalid_config(replay: replay_lib.Replay, sampler: str) -> None:
    measurer = replay_lib.ReplayMeasurer(replay)
    study = Study(replay.space, measurer, replay_lib.ReplayPool(replay, workers=4), sampler=sampler, seed=1)  # type: ignore[arg-type]
    result = study.run(Budget(trials=40))
    assert measurer.invalid == 0 and result.measured == 40 and result.kicks == 0


def test_ga_measures_each_config_once(replay: replay_lib.Replay) -> None:
    seen: list[str] = []
    original = replay.values

    class Counting(dict[tuple[int, ...], float | None]):
        def __getitem__(self, key: tuple[int, ...]) -> float | None:
            seen.append(repr(key))
            return original[key]

    counted = replay_lib.Replay(replay.name, replay.space, Counting(original), replay.optimum)
    trace = replay_lib.run_ga(counted, seed=2, cap=30).values
    assert len(trace) == 30 == len(set(seen))


def test_report_arithmetic() -> None:
    # 2% of optimum 1.0: the 3rd evaluation of the first run, never for the second.
    traces: list[list[float | None]] = [[2.0, None, 1.01, 1.0], [3.0, 2.0, 1.5, 1.2]]
    assert replay_lib.evaluations_to(traces[0], 1.0, 0.02) == 3
    assert replay_lib.evaluations_to(traces[1], 1.0, 0.05) is None
    row = replay_lib.summarise(traces, 1.0)
    assert row["runs"] == 2 and row["median_to_2pct"] is None and row["reach_2pct_at_50"] == 0.5
    flat: list[float | None] = [5.0] + [5.0] * 70 + [1.0]  # patience 32 or 64 stops the sweep before the 1.0
    assert replay_lib.sweep_stop(flat, 64, 32) == 33 and replay_lib.sweep_stop([1.0] * 10) == 10
    # The default stop is an unseen space's budget: 128 trials, patience 64.
    assert (replay_lib.DEFAULT_TRIALS, replay_lib.DEFAULT_PATIENCE) == (128, 64) and replay_lib.sweep_stop(flat) == 65
    assert replay_lib.summarise([flat], 1.0)["reach_2pct_default_budget"] == 0.0
    # A patience of 75 lets the same run reach the 1.0 at its 72nd evaluation, within 150 trials.
    budgets = replay_lib.summarise([flat], 1.0)["reach_2pct_budgets"]
    assert budgets["64/32"] == 0.0 and budgets["150/75"] == 1.0 and budgets["200/100"] == 1.0


def test_an_out_that_cannot_take_the_report_is_refused_before_any_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    from scripts import bench_search_replay

    _write_cache(tmp_path / "tiny.json.gz")
    space = f"tiny={tmp_path / 'tiny.json.gz'}"
    assert bench_search_replay.main([space, "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "report.json").write_text("{not json")
    assert bench_search_replay.main([space, "--merge", "--out", str(tmp_path / "report.json")]) == 2
    assert "not a replay report" in capsys.readouterr().err


def _timed(
    replay: replay_lib.Replay, compile_s: float, measure_s: float, compiled: tuple[str, ...]
) -> replay_lib.Replay:
    """The same space with every config taking these compile and measurement seconds, and only the
    `compiled` parameters changing the kernel."""
    return replay_lib.Replay(
        replay.name,
        replay.space,
        replay.values,
        replay.optimum,
        {point: compile_s for point in replay.values},
        {point: measure_s for point in replay.values},
        compiled,
    )


def test_a_timed_pool_compiles_on_its_slots_in_order_and_once_per_kernel(replay: replay_lib.Replay) -> None:
    timed = _timed(replay, 2.0, 0.5, ("block", "tile", "vec", "smem"))  # unroll is a launch-time parameter
    pool = replay_lib.ReplayPool(timed, workers=2, compile_times=True)

    def job(**config: int) -> replay_lib.CompileJob:
        point = {**OPTIMUM, **config}
        return replay_lib.CompileJob(",".join(str(point[n]) for n in PARAMS), "", "replay", "")

    first, second, third = pool.submit(job(block=32)), pool.submit(job(block=64)), pool.submit(job(block=128))
    same_kernel = pool.submit(job(block=32, unroll=4))
    assert [f.finish for f in (first, second, third, same_kernel)] == [2.0, 2.0, 4.0, 2.0]  # type: ignore[attr-defined]
    assert not first.done()
    pool.wait_any([third, first])
    assert pool.clock == 2.0 and first.done() and same_kernel.done() and not third.done()
    assert pool.measured(timed.point({**OPTIMUM, "block": 32})) == 2.5
    third.result()  # waiting for a compile moves the clock to its end
    assert pool.clock == 4.0
    untimed = replay_lib.ReplayPool(timed, workers=2)  # compile_times off: everything is ready when asked
    assert untimed.submit(job(block=256)).done()


def test_recorded_compile_times_cost_seconds_not_evaluations_for_a_fifo_study(replay: replay_lib.Replay) -> None:
    """A plain TPE study measures in the order asked, so compile times move its clock, not its choices:
    the same evaluations, and the seconds they took grow with the compile time."""
    timed = _timed(replay, 3.0, 0.1, tuple(PARAMS))
    instant = replay_lib.run_study(timed, seed=4, cap=40, sampler="tpe", workers=4)
    compiled = replay_lib.run_study(timed, seed=4, cap=40, sampler="tpe", workers=4, compile_times=True)
    assert compiled.values == instant.values
    assert instant.seconds[-1] == pytest.approx(40 * 0.1)
    # 40 compiles of 3 s on 4 slots take at least 30 s; the last measurement ends after them.
    assert compiled.seconds[-1] >= 30.0
    assert replay_lib.median_seconds_to([compiled], timed.optimum, 10.0) == compiled.seconds[0]


def test_a_timed_ga_measures_what_the_untimed_one_does(replay: replay_lib.Replay) -> None:
    timed = _timed(replay, 1.0, 0.25, tuple(PARAMS))
    plain = replay_lib.run_ga(timed, seed=5, cap=60)
    compiled = replay_lib.run_ga(timed, seed=5, cap=60, workers=4, compile_times=True)
    assert compiled.values == plain.values and len(compiled.values) == 60
    # The first generation: 20 compiles on 4 slots end at 5 s, so its last measurement ends after that.
    assert compiled.seconds[19] >= 5.0 and plain.seconds[19] == pytest.approx(20 * 0.25)


def test_the_genetic_algorithms_row_names_its_compile_slots_only_where_compiles_take_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With recorded compile times the GA compiles each generation on --workers slots, and its seconds
    depend on how many: rows of 4 and 16 slots are two rows, not one replacing the other in a merge."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    from scripts import bench_search_replay

    data = _write_cache(tmp_path / "tiny.json.gz")
    cache = data["cache"]
    assert isinstance(cache, dict)
    for record in cache.values():
        record.update(compile_time=1500.0, benchmark_time=100.0)  # ms, as Kernel Tuner writes them
    (tmp_path / "timed.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    spaces = {"timed": tmp_path / "timed.json.gz"}
    rows = {
        (workers, compile_times): bench_search_replay.run_all(spaces, ["ga"], 2, 40, 1, workers, compile_times)[0]
        for workers, compile_times in ((4, True), (16, True), (16, False))
    }
    assert [row["workers"] for row in rows.values()] == [4, 16, None]
    assert [row["compile"] for row in rows.values()] == ["recorded", "recorded", "instant"]
    assert len({bench_search_replay._row_key(row) for row in rows.values()}) == 3
