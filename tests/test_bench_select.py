"""scripts/bench_select.py on the CPU: the held-out set keeps its rules (sizes, dtypes, layouts, none in the
shipped records), the regret and goal arithmetic, the report's rows, the timing's bookkeeping on a fake
torch, one shape end to end with the sweep faked, and the dry run."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from autotune import ops
from autotune.core.problem import DTYPES, Problem
from autotune.ops import standard_shapes

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
if str(SCRIPTS) not in sys.path:  # the script imports the scripts beside it, as `python scripts/x.py` runs it
    sys.path.insert(0, str(SCRIPTS))
bench: Any = importlib.import_module("bench_select")

H200, H100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"


def by_op(op: str) -> list[Any]:
    return [s for s in bench.HELD_OUT if s.op == op]


# -- the held-out set ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["gemv", "gemm"])
def test_held_out_has_20_shapes_per_op_in_every_dtype(op: str) -> None:
    shapes = by_op(op)
    assert len(shapes) >= 20
    assert set(Counter(s.dtype for s in shapes)) == set(DTYPES)
    assert min(Counter(s.dtype for s in shapes).values()) >= 5
    for shape in shapes:
        problem = shape.problem()  # a valid problem: sizes in range, K where the op has it
        assert (problem.m, problem.n, problem.k or None, problem.trans) == (shape.m, shape.n, shape.k, shape.trans)
    assert len({s.id for s in bench.HELD_OUT}) == len(bench.HELD_OUT)


@pytest.mark.parametrize("op", ["gemv", "gemm"])
def test_held_out_has_odd_short_wide_and_tall_narrow_shapes(op: str) -> None:
    found = Counter(c for s in by_op(op) for c in bench.categories(s))
    for category in ("odd", "prime", "short_wide", "tall_narrow"):
        assert found[category] >= 2, category
    assert any({1001, 999} <= {s.m, s.n, s.k} for s in by_op(op))
    short_wide = [s for s in by_op(op) if "short_wide" in bench.categories(s)]
    assert all(s.m <= 8 and s.n >= 65536 for s in short_wide)
    assert all(s.n <= 8 for s in by_op(op) if "tall_narrow" in bench.categories(s))


def test_held_out_gemvs_include_transposed_ones_in_every_dtype() -> None:
    transposed = [s for s in by_op("gemv") if s.trans]
    assert len(transposed) >= 4
    assert {s.dtype for s in transposed} == set(DTYPES)
    assert all(s.k is None and s.layout is None for s in by_op("gemv"))


def test_held_out_gemms_cover_both_row_ranges_in_both_layouts() -> None:
    gemms = by_op("gemm")
    for layout in ("kn", "nk"):
        mine = [s for s in gemms if s.layout == layout]
        assert sum(1 for s in mine if s.m <= 16) >= 3, layout
        assert sum(1 for s in mine if 17 <= s.m <= 256) >= 3, layout
    assert any(s.m > 256 for s in gemms)
    assert all(s.k is not None for s in gemms)


@pytest.mark.shipped_records
def test_no_held_out_shape_is_in_the_shipped_records() -> None:
    shipped = bench.shipped_problems()
    assert {H200, H100} <= set(shipped)
    for gpu in (H200, H100):
        clash = [s.id for s in bench.HELD_OUT if s.problem() in shipped[gpu]]
        assert clash == [], gpu


def test_no_held_out_shape_is_a_standard_or_planned_shape() -> None:
    """Shapes a later sweep of a standard set (any dtype, any layout), or issue 30's planned LLM GEMM
    set, would store: the held-out set stays held out as records are added."""
    gemv = set(standard_shapes("gemv"))
    gemm = set(standard_shapes("gemm"))
    projections = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]  # Llama-3-8B qkv, o, gate_up, down
    projections += [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]  # Qwen2-7B
    gemm |= {(m, n, k) for m in (2, 8, 32, 128, 512, 4096) for n, k in projections}
    gemm |= {(4, 6144, 4096), (4, 28672, 4096), (4, 4096, 14336)}  # the decoder's batch-4 projections
    for shape in bench.HELD_OUT:
        sizes = (shape.m, shape.n) if shape.op == "gemv" else (shape.m, shape.n, shape.k)
        assert sizes not in (gemv if shape.op == "gemv" else gemm), shape.id


@pytest.mark.shipped_records
def test_no_held_out_size_is_stored_or_listed_in_any_dtype_or_layout() -> None:
    """Stricter than the two above: a held-out shape's sizes are in no GPU's shipped records and in none
    of the ops' shape files (shapes.txt, edge_shapes.txt, llm_shapes.txt), whatever the dtype or layout,
    so that neither a record of the same sizes nor a later sweep of a listed set leaks an answer."""
    known: set[tuple[str, tuple[int, ...]]] = set()
    for problems in bench.shipped_problems().values():
        known |= {(p.op, tuple(d for d in (p.m, p.n, p.k) if d)) for p in problems}
    listed = 0
    for op in ("gemv", "gemm"):
        for path in Path(ops.get(op).shapes_file).parent.glob("*shapes.txt"):
            shapes = ops.parse_shapes(path.read_text(), str(path), ops.shape_dims(op))
            known |= {(op, tuple(shape)) for shape in shapes}
            listed += 1
    assert listed == 6  # shapes.txt, edge_shapes.txt and llm_shapes.txt of both
    clash = [s.id for s in bench.HELD_OUT if (s.op, tuple(d for d in (s.m, s.n, s.k) if d)) in known]
    assert clash == []


def test_the_held_out_set_is_the_one_the_h200_results_measured() -> None:
    """Frozen: results/select_nvidia-h200.json measured exactly these shapes."""
    rows = json.loads((ROOT / "results" / "select_nvidia-h200.json").read_text())["rows"]
    assert [row["id"] for row in rows] == [s.id for s in bench.HELD_OUT]


def test_a_stored_held_out_shape_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    stored = [bench.HELD_OUT[3].problem(), Problem("gemv", "float16", 4096, 8192)]
    monkeypatch.setattr(bench.api, "stored_problems", lambda **_: stored)
    with pytest.raises(SystemExit, match=re.escape(str(stored[0]))):
        bench.check_not_stored(H200, "unused.db")
    monkeypatch.setattr(bench.api, "stored_problems", lambda **_: stored[1:])
    assert bench.check_not_stored(H200, "unused.db") == []


def test_only_and_the_split_over_gpus() -> None:
    assert [s.id for s in bench.select_shapes(["gemm/*/nk"])] == [s.id for s in by_op("gemm") if s.layout == "nk"]
    assert bench.select_shapes([]) == list(bench.HELD_OUT)
    parts = bench.split_over(bench.HELD_OUT, 4)
    assert sorted(s.id for part in parts for s in part) == sorted(s.id for s in bench.HELD_OUT)
    loads = [sum(bench.estimate_s(s) for s in part) for part in parts]
    assert max(loads) - min(loads) <= max(bench.ESTIMATE_S.values())
    done = [{"op": "gemv", "m": 5, "seconds": 100.0}]
    assert bench.estimate_s(bench.HELD_OUT[0], done) == pytest.approx(125.0)
    assert bench.estimate_s(by_op("gemm")[-1], done) == bench.ESTIMATE_S["gemm"]


# -- regret, summary, rows ------------------------------------------------------------------------------


def test_regret_is_over_the_least_of_sweep_pick_and_cublas() -> None:
    assert bench.regret_of(10.0, 8.0, 9.0) == (8.0, pytest.approx(0.25))
    assert bench.regret_of(10.0, 12.0, 11.0) == (10.0, 0.0)  # the pick is the best: no regret
    assert bench.regret_of(10.0, None, 5.0) == (5.0, pytest.approx(1.0))  # cuBLAS counts as tuned
    assert bench.regret_of(10.0, None, 20.0) == (10.0, 0.0)


def synthetic(op: str, regrets: list[float], vs_cublas: float = 1.2) -> list[dict[str, Any]]:
    rows = []
    for index, regret in enumerate(regrets):
        pick_us = 10.0
        rows.append(
            {
                "op": op,
                "id": f"{op}/float16/{index}",
                "regret": regret,
                "pick_us": pick_us,
                "cublas_us": pick_us * vs_cublas,
                "source": "estimate",
            }
        )
    return rows


def test_summary_goal_met() -> None:
    rows = synthetic("gemv", [0.0, 0.02, 0.10, 0.0]) + synthetic("gemm", [0.01] * 3, vs_cublas=0.99)
    summary = bench.summarize(rows)
    gemv, gemm = summary["gemv"], summary["gemm"]
    assert gemv["regret_geomean"] == pytest.approx((1.02 * 1.10) ** 0.25 - 1)
    assert gemv["worst_regret"] == 0.10 and gemv["worst_shape"] == "gemv/float16/2"
    assert gemv["goal_met"] and gemm["goal_met"]  # 0.99x cuBLAS is not below 0.98x
    assert gemv["below_098_cublas"] == 0 and gemm["vs_cublas_geomean"] == pytest.approx(0.99)
    assert gemv["shapes"] == 4 and gemv["planned"] == len(by_op("gemv")) and not gemv["complete"]
    assert gemv["sources"] == {"estimate": 4}


@pytest.mark.parametrize(
    ("regrets", "vs_cublas", "missed"),
    [
        ([0.06] * 4, 1.2, "regret_geomean"),  # geometric mean 6%
        ([0.0, 0.0, 0.0, 0.16], 1.2, "worst_regret"),  # geometric mean 3.8%, worst 16%
        ([0.0] * 4, 0.97, "none_below_cublas"),  # every pick below 0.98x cuBLAS
    ],
)
def test_summary_goal_missed(regrets: list[float], vs_cublas: float, missed: str) -> None:
    line = bench.summarize(synthetic("gemm", regrets, vs_cublas))["gemm"]
    assert not line["goal_met"]
    assert [name for name, ok in line["goal"].items() if not ok] == [missed]
    assert "gemv" in bench.summarize(synthetic("gemm", regrets))  # planned, none measured
    assert bench.summarize(synthetic("gemm", regrets))["gemv"]["goal_met"] is None


def test_a_wrong_pick_misses_the_goal() -> None:
    rows = synthetic("gemv", [0.0, 0.0])
    rows[1]["pick_correct"] = False
    line = bench.summarize(rows)["gemv"]
    assert line["wrong_picks"] == ["gemv/float16/1"] and not line["goal_met"]


def fake_row(shape: Any, pick_us: float = 10.0, sweep_us: float | None = 8.0, cublas_us: float = 12.0) -> Any:
    pick = {
        "source": "estimate",
        "config": {"block": 128},
        "predicted_us": 9.5,
        "basis": "roofline",
        "from_shape": None,
    }
    timing: dict[str, Any] = {"pick_us": pick_us, "cublas_us": cublas_us, "cublas_call": "torch.mv", "pick_error": 1e-4}
    sweep: dict[str, Any] = {"config": None, "trials": 40, "stopped": "budget reached", "seconds": 6.0}
    if sweep_us is not None:
        timing.update(sweep_best_us=sweep_us, sweep_correct=True)
        sweep.update(config={"block": 256}, stored_us=sweep_us)
    return bench.make_row(shape, pick, timing, sweep, H200, 20.0)


def test_rows_hold_the_keys_issue_30_names() -> None:
    gemv, gemm = by_op("gemv")[-1], by_op("gemm")[0]
    row = fake_row(gemv)
    assert list(row)[: len(bench.ROW_KEYS)] == list(bench.ROW_KEYS)
    assert (row["op"], row["k"], row["layout"], row["trans"]) == ("gemv", None, None, True)
    assert (row["tuned_us"], row["regret"], row["tuned_by"]) == (8.0, pytest.approx(0.25), "sweep")
    assert row["vs_cublas"] == pytest.approx(1.2)
    row = fake_row(gemm, sweep_us=None, cublas_us=5.0)
    assert (row["op"], row["k"], row["layout"]) == ("gemm", gemm.k, gemm.layout)
    assert (row["tuned_us"], row["tuned_by"], row["sweep_best_us"]) == (5.0, "cublas", None)
    report = bench.build_report({"gpu": H200, "trials": 40, "patience": None, "rows": {gemm.id: row}, "errors": {}})
    text = json.dumps(report)  # plain JSON
    assert json.loads(text)["rows"][0]["id"] == gemm.id
    assert report["held_out"] == {"gemv": len(by_op("gemv")), "gemm": len(by_op("gemm"))}
    assert not report["complete"] and report["summary"]["gemm"]["shapes"] == 1


def test_state_keeps_rows_of_one_gpu_and_resumes_with_the_same_trials(tmp_path: Path) -> None:
    args = SimpleNamespace(trials=40, patience=None)
    state = bench.new_state(args)
    said: list[str] = []
    shape = by_op("gemv")[0]
    assert bench.add_result(state, shape.id, fake_row(shape), None, said.append)
    other = {**fake_row(shape), "gpu": H100}
    assert not bench.add_result(state, "x", other, None, said.append)
    assert bench.add_result(state, "y", None, "RuntimeError: boom", said.append)
    assert state["gpu"] == H200 and list(state["rows"]) == [shape.id] and state["errors"] == {"y": "RuntimeError: boom"}
    path = tmp_path / bench.STATE_FILE
    bench.write_json(path, state)
    assert bench.load_state(path, args)["rows"][shape.id]["regret"] == pytest.approx(0.25)
    with pytest.raises(SystemExit, match="--trials 40"):
        bench.load_state(path, SimpleNamespace(trials=64, patience=None))


# -- the timing's bookkeeping, on numpy ------------------------------------------------------------------


class FakeTensor:
    """What the timing asks of a torch tensor, on numpy."""

    def __init__(self, array: Any) -> None:
        self.a = np.asarray(array)

    def _of(self, other: Any) -> Any:
        return other.a if isinstance(other, FakeTensor) else other

    def __mul__(self, other: Any) -> FakeTensor:
        return FakeTensor(self.a * self._of(other))

    def __sub__(self, other: Any) -> FakeTensor:
        return FakeTensor(self.a - self._of(other))

    def __truediv__(self, other: Any) -> FakeTensor:
        return FakeTensor(self.a / self._of(other))

    def __matmul__(self, other: Any) -> FakeTensor:
        return FakeTensor(self.a @ self._of(other))

    def __float__(self) -> float:
        return float(self.a)

    def t(self) -> FakeTensor:
        return FakeTensor(self.a.T)

    def double(self) -> FakeTensor:
        return FakeTensor(self.a.astype(np.float64))

    def abs(self) -> FakeTensor:
        return FakeTensor(np.abs(self.a))

    def clamp_min(self, low: float) -> FakeTensor:
        return FakeTensor(np.maximum(self.a, low))

    def max(self) -> FakeTensor:
        return FakeTensor(np.max(self.a))

    def fill_(self, value: float) -> None:
        self.a[...] = value


def _into(out: FakeTensor | None, result: Any) -> FakeTensor:
    if out is None:
        return FakeTensor(result)
    out.a[...] = result
    return out


def fake_torch() -> Any:
    rng = np.random.default_rng(1)

    def rand(*shape: int, device: str, dtype: Any) -> FakeTensor:
        return FakeTensor(rng.random(shape).astype(dtype))

    def empty(*shape: int, device: str, dtype: Any) -> FakeTensor:
        return FakeTensor(np.empty(shape, dtype))

    return SimpleNamespace(
        float32=np.float32,
        float16=np.float16,
        bfloat16=np.float32,  # numpy has none: the bookkeeping is what is checked
        rand=rand,
        empty=empty,
        mv=lambda a, x, out=None: _into(out, a.a @ x.a),
        mm=lambda a, b, out=None: _into(out, a.a @ b.a),
        matmul=lambda a, b: FakeTensor(a.a @ b.a),
        nn=SimpleNamespace(functional=SimpleNamespace(linear=lambda x, w: FakeTensor(x.a @ w.a.T))),
        cuda=SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None),
    )


class FakeBench:
    """Bench's parts the timing uses: torch, the launcher of ours, the interleaved timer."""

    def __init__(self, wrong: frozenset[str] = frozenset()) -> None:
        self.torch = fake_torch()
        self.wrong = wrong
        self.launcher = SimpleNamespace(gemv=self._gemv, gemm=self._gemm, gpu=SimpleNamespace(name=H200))
        self.timer = SimpleNamespace(measure_interleaved=self._measure)
        self.calls: list[int] = []

    def copies(self, nbytes: int) -> int:
        return 3

    def _off(self, choice: Any) -> float:
        return 0.5 if choice.source in self.wrong else 0.0

    def _gemv(self, choice: Any, a: Any, x: Any, y: Any, alpha: float, beta: float) -> None:
        matrix = a.a.T if choice.problem.trans else a.a
        y.a[...] = matrix @ x.a + self._off(choice)

    def _gemm(self, choice: Any, a: Any, b: Any, c: Any, alpha: float, beta: float) -> None:
        c.a[...] = a.a @ b.a + self._off(choice)

    def _measure(self, launchers: list[Any], reps: int) -> list[list[float]]:
        for launch in launchers:
            launch(0)
            launch(4)  # a later rotation: another copy of the buffers
        self.calls.append(len(launchers))
        return [[10.0 + index] * reps for index in range(len(launchers))]


def choice_of(shape: Any, source: str, config: dict[str, int]) -> Any:
    return SimpleNamespace(problem=shape.problem(), source=source, config=config)


SMALL = [
    bench.Shape("gemv", "float16", 33, 17, None, False, ""),
    bench.Shape("gemv", "float32", 33, 17, None, True, ""),
    bench.Shape("gemm", "float16", 5, 12, 7, False, ""),
    bench.Shape("gemm", "float32", 20, 6, 9, True, ""),
]


@pytest.mark.parametrize("shape", SMALL, ids=lambda s: s.id)
def test_timing_checks_ours_and_takes_the_faster_cublas_call(shape: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.runtime.operands.describe", lambda array, name: array)
    fake = FakeBench()
    pick, tuned = choice_of(shape, "estimate", {"a": 1}), choice_of(shape, "measured", {"a": 2})
    timing = bench.time_together(fake, pick, tuned, reps=3)
    assert fake.calls == [4]  # pick, the sweep's best and two cuBLAS calls, in one measurement
    assert (timing["pick_us"], timing["sweep_best_us"], timing["cublas_us"]) == (10.0, 11.0, 12.0)
    assert timing["pick_correct"] and timing["sweep_correct"] and timing["pick_error"] < 1e-2
    assert timing["cublas_call"] == next(iter(timing["cublas_calls_us"]))
    assert len(timing["cublas_calls_us"]) == 2
    same = bench.time_together(fake, pick, choice_of(shape, "measured", {"a": 1}), reps=3)
    assert fake.calls[-1] == 3 and same["sweep_best_us"] == same["pick_us"]
    alone = bench.time_together(FakeBench(wrong=frozenset({"estimate"})), pick, None, reps=3)
    assert not alone["pick_correct"] and "sweep_best_us" not in alone


# -- dry run --------------------------------------------------------------------------------------------


@pytest.mark.stress  # the selector on all 51 held-out shapes from the shipped records: 8 s
@pytest.mark.shipped_records
def test_dry_run_checks_the_set_and_prints_each_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert bench.main(["--dry-run", "--gpus", "4", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    for shape in bench.HELD_OUT:
        line = next(text for text in lines if f"] {shape.id} " in text)
        assert re.search(r" (measured|estimate|default) ", line), line
        assert "measured" not in line.split()  # none of them is a tuned shape
    assert f"none stored for {H200}" in lines[-1] and "--gpus 4" in lines[-1]
    assert list(tmp_path.iterdir()) == []  # it writes nothing


@pytest.mark.stress
@pytest.mark.shipped_records
def test_a_run_keeps_its_rows_resumes_and_writes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() on one 'GPU' with Bench and the sweep faked: the state after each shape, the report,
    and --resume doing only what is left."""
    import autotune.bench.compare as measure_bench
    import autotune.tune.tuner as tuner

    monkeypatch.setattr("autotune.runtime.operands.describe", lambda array, name: array)
    monkeypatch.setattr(measure_bench, "Bench", FakeBench)
    monkeypatch.setattr(bench, "gpu_names", lambda: [])  # no nvidia-smi: the GPU's name comes from the run
    swept: list[Problem] = []

    def fake_sweep(problems: list[Problem], open_store: Any, **options: Any) -> Any:
        """A sweep that stores nothing new: the scratch database answers with the estimate again."""
        assert H200 in open_store().gpu_names()  # seeded with the shipped records
        assert (options["budget"].trials, options["budget"].patience, options["seed"]) == (40, None, None)
        swept.extend(problems)
        result = SimpleNamespace(stopped="budget reached", reused=0, measured=options["budget"].trials)
        return SimpleNamespace(problems=[SimpleNamespace(result=result)])

    monkeypatch.setattr(tuner, "run_sweep", fake_sweep)
    out, work = tmp_path / "out", tmp_path / "work"
    first, second = "gemv/float16/512x512", "gemm/float16/7x1001x999/nk"
    common = ["--out", str(out), "--work", str(work), "--reps", "2", "--no-plot"]
    assert bench.main([*common, "--only", first]) == 0
    state = json.loads((out / bench.STATE_FILE).read_text())
    assert list(state["rows"]) == [first] and state["gpu"] == H200
    assert bench.main([*common, "--only", first, second, "--resume"]) == 0
    assert [p.shape for p in swept] == [(512, 512), (7, 1001, 999)]  # the first shape is not done again
    report = json.loads((out / "select_nvidia-h200.json").read_text())
    assert [r["id"] for r in report["rows"]] == [first, second]
    assert not report["complete"] and report["summary"]["gemm"]["shapes"] == 1
    assert all(set(bench.ROW_KEYS) <= set(r) for r in report["rows"])
    row = report["rows"][1]  # no sweep best: the pick (10 us, the fake's first) against cuBLAS (11 us)
    assert (row["source"], row["sweep_best_us"], row["tuned_us"], row["regret"]) == ("estimate", None, 10.0, 0.0)
    assert (row["cublas_us"], row["sweep_trials"], row["gpu"]) == (11.0, 40, H200)
    assert (work / "dbs" / "gemm-float16-7x1001x999-nk.db").is_file()
    assert "regret geometric mean" in capsys.readouterr().out


def test_a_dry_run_names_the_picks_changed_since_the_last_run_and_keeps_the_rest_to_resume(tmp_path: Path) -> None:
    """The last run's file in --out: a shape whose pick differs (or that the file lacks) is named, and
    --changed-state keeps the other rows, so that --resume on the GPU times only the changed ones."""
    shapes = list(bench.HELD_OUT[:3])
    rows = [{"id": s.id, "config": {"cublas_algo": 0}} for s in shapes[:2]]
    report = {"gpu": H200, "trials": 40, "patience": None, "rows": rows}
    (tmp_path / "select_nvidia-h200.json").write_text(json.dumps(report))
    picks = [SimpleNamespace(config={"cublas_algo": 0}), SimpleNamespace(config={"cublas_algo": 1})]
    picks.append(SimpleNamespace(config={"cublas_algo": 0}))
    said: list[str] = []
    args = SimpleNamespace(out=tmp_path, changed_state=tmp_path / "state.json", trials=40, patience=None)
    assert bench.changed_since(args, H200, shapes, picks, said.append) == [shapes[1].id, shapes[2].id]
    state = json.loads((tmp_path / "state.json").read_text())
    assert list(state["rows"]) == [shapes[0].id] and (state["gpu"], state["trials"]) == (H200, 40)
    assert state["format"] == bench.FORMAT and "picks changed since" in said[0]
    assert (
        bench.changed_since(
            SimpleNamespace(out=tmp_path / "none", changed_state=None), H200, shapes, picks, said.append
        )
        == []
    )


def test_a_parameter_that_joined_the_space_since_is_no_change_of_pick(tmp_path: Path) -> None:
    """A narrow config of an earlier run's file, written before `bands` joined the family, is the pick
    the selector names with bands=0 today (Op.stored_config): the same kernel, not to be timed again."""
    shape = next(s for s in bench.HELD_OUT if s.id == "gemv/float32/4099x12289/t")
    before = {"block": 1024, "width": 32, "vec": 1, "unroll": 4, "prefetch": 1, "lean": 0, "per_sm": 0}
    report = {"gpu": H200, "trials": 40, "patience": None, "rows": [{"id": shape.id, "config": before}]}
    (tmp_path / "select_nvidia-h200.json").write_text(json.dumps(report))
    args = SimpleNamespace(out=tmp_path, changed_state=None)
    same = SimpleNamespace(config={**before, "bands": 0})
    assert bench.changed_since(args, H200, [shape], [same], lambda _: None) == []
    other = SimpleNamespace(config={**before, "bands": 12})
    assert bench.changed_since(args, H200, [shape], [other], lambda _: None) == [shape.id]
