"""scripts/bench_tuning_vs_kernel_tuner.py on the CPU: Kernel Tuner's parameters and restrictions are our
Space, the launch it is given is the op's, the time-to-2% arithmetic, and the report's JSON."""

from __future__ import annotations

import importlib.util
import itertools
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune.core.problem import Problem
from autotune.core.space import Config, Space, config_key
from autotune.ops import gemv
from scripts import bench_tuning_vs_kernel_tuner as bench

KERNEL_TUNER = importlib.util.find_spec("kernel_tuner") is not None

# Shapes of the benchmark, and others where fewer vector widths or splits fit.
PROBLEMS = [Problem("gemv", "float16", m, n) for m, n in [*bench.SHAPES, (1000, 1001), (256, 131072), (4096, 24)]]

# A sub-space small enough to walk in full, with every parameter's extremes.
SUB_CHOICES = {
    "block": (64, 512),
    "lanes": (1, 8, 32, 512),
    "unroll": (1, 8),
    "rows": (1, 8),
    "policy": (0,),
    "cluster": (1, 2, 8),
    "split": (1, 2, 32),
    "persist": (0,),  # read by no clause of the constraint
    "prefetch": (0, 1),
}


def sub_space(problem: Problem) -> Space:
    full = bench.op_space(problem)
    params = tuple(replace(p, choices=SUB_CHOICES.get(p.name, p.choices)) for p in full.params)
    return Space(params, full.constraint)


def product(space: Space) -> list[Config]:
    names = space.names
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(p.choices for p in space.params))]


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_tune_params_are_the_space(problem: Problem) -> None:
    space = bench.op_space(problem)
    params = bench.kt_tune_params(space)
    assert list(params) == list(space.names)
    assert all(tuple(params[p.name]) == p.choices for p in space.params)


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_restrictions_accept_and_refuse_what_the_constraint_does(problem: Problem) -> None:
    space = sub_space(problem)
    strings = bench.kt_restriction_strings(problem)
    restriction = bench.kt_restriction_callable(space)
    points = product(space) + bench.random_points(bench.op_space(problem), 3000, seed=problem.m)
    assert bench.restrictions_agree(space, strings, points) == []
    assert all(restriction(c) == (space.constraint(c) is None) for c in points)
    valid = [c for c in product(space) if space.check(c) is None]
    assert 0 < len(valid) == space.size() < len(product(space))
    assert sum(bench.strings_accept(strings, c) for c in product(space)) == len(valid)


@pytest.mark.skipif(not KERNEL_TUNER, reason="kernel_tuner is not installed (a GPU machine benchmark dependency)")
@pytest.mark.parametrize("form", ["strings", "callable"])
def test_kernel_tuners_search_space_is_ours(form: str) -> None:
    from kernel_tuner.searchspace import Searchspace

    problem = Problem("gemv", "float16", 16384, 8192)
    space = sub_space(problem)
    restrictions: Any = (
        bench.kt_restriction_strings(problem) if form == "strings" else bench.kt_restriction_callable(space)
    )
    built = Searchspace(bench.kt_tune_params(space), restrictions, 1024, block_size_names=["block"])
    theirs = {tuple(point) for point in built.list}
    ours = {tuple(c.values()) for c in space}
    assert built.size == len(ours) and theirs == ours


def test_kernel_source_and_launch_are_the_ops() -> None:
    problem = Problem("gemv", "float16", 65536, 2048)
    space = bench.op_space(problem)
    grid, shared = bench.kt_geometry(problem, 132)
    floats, counters = bench.workspace_sizes(problem, space)
    configs = [c for c in bench.random_points(space, 4000, seed=7) if space.check(c) is None][:300]
    configs += gemv.OP.seed_configs(problem)
    for config in configs:
        launch = gemv.OP.launch(problem, config, 132)
        assert grid(config) == launch.grid and shared(config) == launch.shared_bytes
        assert launch.workspace_floats <= floats and launch.counters <= counters
        source = bench.kt_kernel_source(problem)(config)
        ours = gemv.OP.kernel_source(problem, config)
        assert source == ours.replace(gemv.OP.kernel_name(problem, config), bench.KT_KERNEL_NAME)
        assert f"{bench.KT_KERNEL_NAME}(const __half* A" in source
    options = bench.kt_compiler_options()
    assert "-O3" in options and any(o.endswith("kernels") for o in options)


def test_incumbents_are_the_improvements_within_the_budget() -> None:
    a, b, c = {"x": 1}, {"x": 2}, {"x": 3}
    trials = [(5.0, 10.0, a), (1.0, 12.0, b), (7.0, 11.0, c), (9.0, 9.0, c), (61.0, 1.0, b)]
    assert bench.incumbents(trials, 60.0) == [(1.0, 12.0, b), (5.0, 10.0, a), (9.0, 9.0, c)]


def test_seconds_to_2pct_medians_and_ratios() -> None:
    fast, close, slow = {"x": 1}, {"x": 2}, {"x": 3}
    retimed = {config_key(fast): 100.0, config_key(close): 101.9, config_key(slow): 110.0}
    steps = [{"t": 3.0, "config": slow}, {"t": 8.0, "config": close}, {"t": 20.0, "config": fast}]
    assert bench.seconds_to_target(steps, retimed, 100.0, 0.02) == 8.0
    assert bench.seconds_to_target(steps[:1], retimed, 100.0, 0.02) is None
    # A config its own tool timed fast but that re-times slow does not count.
    assert bench.seconds_to_target([{"t": 1.0, "config": {"x": 9}}], retimed, 100.0, 0.02) is None
    # A run that never reached counts as its whole budget.
    assert bench.median_seconds([None, 10.0], 60.0) == 35.0
    assert bench.median_seconds([None, None, 4.0], 60.0) == 60.0
    assert bench.median_seconds([], 60.0) is None
    assert bench.ratio(10.0, 40.0) == 0.25 and bench.ratio(None, 4.0) is None and bench.ratio(1.0, None) is None


def _row(tool: str, strategy: str, records: str | None, repeat: int, seconds: float | None) -> dict[str, Any]:
    return {
        "tool": tool,
        "strategy": strategy,
        "records": records,
        "m": 16384,
        "n": 8192,
        "repeat": repeat,
        "seconds_to_2pct": seconds,
    }


def test_summary_takes_kernel_tuners_better_strategy() -> None:
    rows = [
        _row("kernel_tuner", "random_sample", None, 0, None),
        _row("kernel_tuner", "random_sample", None, 1, 50.0),  # median 55
        _row("kernel_tuner", "bayes_opt", None, 0, 40.0),
        _row("kernel_tuner", "bayes_opt", None, 1, None),  # median 50: the better
        _row("autotune", "tpe", "none", 0, 20.0),
        _row("autotune", "tpe", "none", 1, 30.0),  # 25
        _row("autotune", "tpe", "other_shapes", 0, 10.0),
        _row("autotune", "tpe", "other_shapes", 1, 20.0),  # 15
    ]
    line = bench.summarize(rows, 60.0)["16384x8192"]
    assert line["median_seconds_to_2pct"] == {
        "autotune/tpe/none": 25.0,
        "autotune/tpe/other_shapes": 15.0,
        "kernel_tuner/bayes_opt": 50.0,
        "kernel_tuner/random_sample": 55.0,
    }
    assert line["kernel_tuner_better"] == "kernel_tuner/bayes_opt"
    assert line["ratio_empty_vs_kernel_tuner"] == 0.5 and line["goal_empty_met"] is True
    assert line["ratio_other_shapes_vs_kernel_tuner"] == 0.3 and line["goal_other_shapes_met"] is True
    assert line["reached_2pct"]["kernel_tuner/random_sample"] == 1 and line["runs"]["autotune/tpe/none"] == 2


def _state(budget: float = 60.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    specs = bench.plan_runs([(16384, 8192)], 2, budget, [])
    rng = random.Random(1)
    space = bench.op_space(Problem("gemv", "float16", 16384, 8192))
    pool = [c for c in bench.random_points(space, 2000, seed=3) if space.check(c) is None][:12]
    runs, times = {}, {}
    for index, spec in enumerate(specs):
        steps = []
        for t in sorted(rng.uniform(1, budget) for _ in range(3)):
            config = pool[rng.randrange(len(pool))]
            steps.append({"t": round(t, 3), "own_us": 70.0 - t / 10, "config": config})
            times[config_key(config)] = 60.0 + (index % 5)
        kind = bench.KIND_BY_LABEL[spec["kind"]]
        runs[spec["id"]] = {
            **{k: spec[k] for k in ("id", "m", "n", "budget_s", "repeat", "seed")},
            "kind": kind.label,
            "tool": kind.tool,
            "strategy": kind.strategy,
            "records": kind.records,
            "dtype": "float16",
            "trials": 20 + index,
            "space_build_s": 6.5 if kind.tool == "kernel_tuner" else 0.0001,
            "space_size": 2325312 if kind.tool == "kernel_tuner" else None,
            "incumbents": steps,
            "own_best_us": steps[-1]["own_us"],
            "error": None,
            "gpu": "NVIDIA H200",
        }
    state = {"format": bench.FORMAT, "gpu": "NVIDIA H200", "budget_s": budget, "kt_restrictions": "strings"}
    state["runs"] = runs
    ids = sorted(runs)
    state["retimed"] = {"16384x8192": {"runs": ids, "gpu": "NVIDIA H200", "passes": 3, "configs": times}}
    return state, specs


def test_report_json_has_the_fields_the_issue_names(tmp_path: Path) -> None:
    state, specs = _state()
    assert bench.shapes_ready(state, specs) == []  # re-timed over exactly its runs: nothing to redo
    report = bench.build_report(state, specs, bench.TOLERANCE)
    report = json.loads(json.dumps(report))  # plain JSON all through
    assert {"gpu", "space_note", "shapes", "rows", "summary"} <= set(report)
    assert report["complete"] is True and len(report["rows"]) == 8
    shape = report["shapes"][0]
    assert shape["matrix_bytes"] >= bench.MIN_MATRIX_BYTES and shape["valid_points"] == 2325312
    assert shape["optimum_us"] == 60.0
    need = {"tool", "strategy", "records", "dtype", "m", "n", "budget_s", "repeat", "seconds_to_2pct", "best_us"}
    for row in report["rows"]:
        assert need | {"trials", "space_build_s"} <= set(row)
        assert row["tool"] in ("kernel_tuner", "autotune")
        assert row["records"] in (("none", "other_shapes") if row["tool"] == "autotune" else (None,))
        reached = [t for t, us, _ in row["timeline"] if us is not None and us <= 1.02 * shape["optimum_us"]]
        assert row["seconds_to_2pct"] == (reached[0] if reached else None)
    line = report["summary"]["16384x8192"]
    assert {"ratio_empty_vs_kernel_tuner", "ratio_other_shapes_vs_kernel_tuner", "kernel_tuner_better"} <= set(line)
    if importlib.util.find_spec("matplotlib") is not None:
        png = bench.plot(report, tmp_path / "plot.png")
        assert png.stat().st_size > 1000


def test_a_shape_is_retimed_again_when_its_runs_change() -> None:
    state, specs = _state()
    state["retimed"]["16384x8192"]["runs"] = state["retimed"]["16384x8192"]["runs"][:-1]
    assert bench.shapes_ready(state, specs) == [(16384, 8192)]
    del state["runs"][specs[0]["id"]]
    assert bench.shapes_ready(state, specs) == []  # not every run done yet


def test_kernel_tuner_cache_file_is_read_as_written(tmp_path: Path) -> None:
    """A cache file still open (trailing comma, no closing braces), as a killed run leaves it."""
    start = 1_800_000_000.0
    (tmp_path / "clock.json").write_text(json.dumps({"start_unix": start}))
    (tmp_path / "space.json").write_text(json.dumps({"seconds": 6.25, "size": 99}))
    head = {"device_name": "NVIDIA H200", "kernel_name": bench.KT_KERNEL_NAME, "tune_params_keys": ["block", "vec"]}
    text = json.dumps({**head, "cache": {}}, indent="")[:-3]

    def entry(key: str, t: float, block: int, time_ms: float | str) -> str:
        from datetime import datetime, timezone

        stamp = str(datetime.fromtimestamp(start + t, tz=timezone.utc))
        return "\n" + json.dumps({key: {"block": block, "vec": 8, "time": time_ms, "timestamp": stamp}})[1:-1] + ","

    text += entry("128,8", 4.0, 128, 0.07) + entry("64,8", 9.0, 64, "CompilationFailedConfig")
    text += entry("256,8", 12.5, 256, 0.065) + entry("512,8", 70.0, 512, 0.01)
    (tmp_path / "kt_cache.json").write_text(text)
    got = bench.collect_kernel_tuner(tmp_path, 60.0)
    assert got["trials"] == 3 and got["ok_trials"] == 2 and got["space_build_s"] == 6.25 and got["space_size"] == 99
    assert [(s["t"], s["config"]["block"]) for s in got["incumbents"]] == [(4.0, 128), (12.5, 256)]
    assert got["own_best_us"] == pytest.approx(65.0)


@pytest.mark.shipped_records
def test_other_shapes_records_leave_the_shape_out(tmp_path: Path) -> None:
    from autotune.store import open_store

    problem = Problem("gemv", "float16", 4096, 8192)  # a shipped shape
    path, gpu = bench.filtered_records(problem, "NVIDIA H200", tmp_path / "records.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert gpu == "NVIDIA H200" and lines[0]["kind"] == "gpu"
    trials = lines[1:]
    assert trials and all(t["dtype"] == "float16" and t["op"] == "gemv" and not t["trans"] for t in trials)
    assert all((t["m"], t["n"]) != (4096, 8192) for t in trials)
    with open_store(str(tmp_path / "db.sqlite"), import_shipped=False) as store:
        assert store.import_records(path) == len(trials)


def test_plan_and_only() -> None:
    specs = bench.plan_runs(bench.SHAPES, 2, 60.0, [])
    assert len(specs) == 24 and len({s["id"] for s in specs}) == 24
    assert [s["repeat"] for s in specs[:8]] == [0] * 4 + [1] * 4 and specs[8]["m"] != specs[0]["m"]
    chosen = bench.plan_runs(bench.SHAPES, 2, 60.0, ["65536x2048/*", "*/kt-bayes_opt/r1"])
    assert len(chosen) == 8 + 2


def test_autotune_runs_take_the_sampler_asked_for() -> None:
    """--sampler sets what autotune's runs search with and how their rows and summary name them; Kernel
    Tuner's runs keep their strategies."""
    specs = bench.plan_runs([(16384, 8192)], 1, 60.0, [], "tpe-fresh")
    assert {s["strategy"] for s in specs if s["kind"].startswith("autotune")} == {"tpe-fresh"}
    assert {s["strategy"] for s in specs if s["kind"].startswith("kt-")} == {"random_sample", "bayes_opt"}
    assert all(bench._base_result(s)["strategy"] == s["strategy"] for s in specs)
    rows = [
        _row("kernel_tuner", "bayes_opt", None, 0, 40.0),
        _row("autotune", "tpe-fresh", "none", 0, 20.0),
        _row("autotune", "tpe-fresh", "other_shapes", 0, 10.0),
    ]
    line = bench.summarize(rows, 60.0)["16384x8192"]
    assert line["ratio_empty_vs_kernel_tuner"] == 0.5 and line["ratio_other_shapes_vs_kernel_tuner"] == 0.25


def test_dry_run_writes_the_plan(tmp_path: Path) -> None:
    code = bench.main(
        ["--dry-run", "--out", str(tmp_path), "--shapes", "65536x2048", "--check-points", "300", "--skip-kt-space"]
    )
    assert code == 0
    plan = json.loads((tmp_path / "tuning_vs_kernel_tuner_plan.json").read_text())
    assert len(plan["runs"]) == 8 and plan["shapes"][0]["restriction_strings"]
    with pytest.raises(SystemExit):
        bench.main(["--dry-run", "--out", str(tmp_path), "--shapes", "1024x1024"])  # under 256 MiB
