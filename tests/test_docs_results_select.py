"""scripts/docs_results.py's sections for bench_select.py and bench_tuning_vs_kernel_tuner.py, on tiny synthetic
reports (and, where results/ has them, agreeing with the summaries the benchmarks wrote)."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
if str(SCRIPTS) not in sys.path:  # the script imports the scripts beside it, as `python scripts/x.py` runs it
    sys.path.insert(0, str(SCRIPTS))
docs: Any = importlib.import_module("docs_results")
X = docs.TIMES  # the multiplication sign the docs write shapes with

GOAL = {"regret_geomean_at_most": 0.05, "worst_regret_at_most": 0.15, "none_below_cublas_fraction": 0.98}


def _select_row(
    op: str, m: int, n: int, k: int | None, pick: float, sweep: float, cublas: float, **extra: Any
) -> dict[str, Any]:
    tuned = min(pick, sweep, cublas)
    return {
        "op": op,
        "dtype": "float16",
        "m": m,
        "n": n,
        "k": k,
        "trans": extra.get("trans", False),
        "layout": extra.get("layout"),
        "source": extra.get("source", "estimate"),
        "pick_us": pick,
        "sweep_best_us": sweep,
        "tuned_us": tuned,
        "cublas_us": cublas,
        "regret": pick / tuned - 1,
        "pick_correct": True,
    }


def _select_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"gpu": "Test GPU", "trials": 40, "goal": GOAL, "rows": rows}


def test_select_summary_counts_regret_cublas_and_the_goal() -> None:
    rows = [
        _select_row("gemv", 1024, 1024, None, pick=4.0, sweep=2.0, cublas=5.0),  # regret 100%, 1.25x cuBLAS
        _select_row("gemv", 3, 100003, None, pick=10.0, sweep=8.0, cublas=5.0, trans=True),  # regret 100%, 0.5x
        _select_row("gemm", 4, 4096, 4096, pick=10.0, sweep=12.0, cublas=10.1, layout="nk", source="default"),
    ]
    text = docs.select_table(_select_report(rows))
    gemv = next(line for line in text.splitlines() if line.startswith("**GEMV**"))
    assert "2 shapes (picks from `estimate` 2)" in gemv
    assert f"regret geometric mean 100.0%, worst 100.0% (float16 1024{X}1024, A x)" in gemv
    assert f"1 of 2 below 0.98{X} cuBLAS" in gemv
    assert f"cuBLAS / pick geometric mean {math.sqrt(1.25 * 0.5):.3f} (worst 0.50)" in gemv
    assert "the sweep's best faster than cuBLAS on 1 of 2" in gemv
    assert gemv.endswith("**missed**.")
    gemm = next(line for line in text.splitlines() if line.startswith("**GEMM**"))
    assert "regret geometric mean 0.0%" in gemm and "0 of 1 below" in gemm and gemm.endswith("**met**.")
    assert f"| gemv | float16 | 3{X}100003 | Aᵀx | `estimate` | 10.00 | 8.00 | 5.00 | 5.00 | 100.0% | 0.50 |" in text
    assert (
        f"| gemm | float16 | 4{X}4096{X}4096 | B N{X}K | `default` | 10.00 | 12.00 | 10.00 | 10.10 | 0.0% | 1.01 |"
        in text
    )


def test_select_goal_is_missed_by_a_wrong_pick() -> None:
    row = _select_row("gemv", 64, 64, None, pick=1.0, sweep=1.0, cublas=2.0)
    row["pick_correct"] = False
    line = docs.select_summary(_select_report([row]), "gemv")
    assert "1 of 1 picks wrong" in line and line.endswith("**missed**.")


def _kt_row(
    m: int, tool: str, strategy: str, records: str | None, seconds: float | None, trials: int
) -> dict[str, Any]:
    return {
        "tool": tool,
        "strategy": strategy,
        "records": records,
        "m": m,
        "n": 64,
        "seconds_to_2pct": seconds,
        "trials": trials,
        "best_us": 10.0,
    }


def _kt_report() -> dict[str, Any]:
    kt, at = "kernel_tuner", "autotune"
    rows = [
        # shape 128x64: Kernel Tuner never gets there (counts as the 60 s budget); ours does
        _kt_row(128, kt, "random_sample", None, None, 40),
        _kt_row(128, kt, "random_sample", None, None, 44),
        _kt_row(128, kt, "bayes_opt", None, None, 26),
        _kt_row(128, kt, "bayes_opt", None, None, 28),
        _kt_row(128, at, "tpe", "none", 10.0, 300),
        _kt_row(128, at, "tpe", "none", 20.0, 400),
        _kt_row(128, at, "tpe", "other_shapes", 3.0, 350),
        _kt_row(128, at, "tpe", "other_shapes", None, 360),  # (3 + 60) / 2 = 31.5 s: misses 1/3
        # shape 256x64: random_sample is the better one, bayes_opt half never gets there
        _kt_row(256, kt, "random_sample", None, 20.0, 45),
        _kt_row(256, kt, "bayes_opt", None, None, 27),
        _kt_row(256, at, "tpe", "none", 12.0, 330),
        _kt_row(256, at, "tpe", "other_shapes", 5.0, 340),
    ]
    shapes = [{"m": m, "n": 64, "dtype": "float16", "optimum_us": 9.9} for m in (128, 256)]
    return {"gpu": "Test GPU", "budget_s": 60.0, "tolerance": 0.02, "shapes": shapes, "rows": rows}


def test_kt_summary_medians_budget_better_strategy_and_ratios() -> None:
    summary = docs.kt_summary(_kt_report())
    assert list(summary) == [f"128{X}64", f"256{X}64"]
    first = summary[f"128{X}64"]
    assert first["better"] == "kernel_tuner/bayes_opt"  # a tie at the budget goes to the first name, as the bench
    assert first["kinds"]["kernel_tuner/random_sample"] == {
        "runs": 2,
        "reached": 0,
        "median_s": 60.0,
        "trials": 42.0,
        "best_us": 10.0,
    }
    assert first["kinds"]["autotune/tpe/other_shapes"]["median_s"] == 31.5
    assert first["ratios"] == {"autotune/tpe/none": 0.25, "autotune/tpe/other_shapes": 31.5 / 60}
    second = summary[f"256{X}64"]
    assert second["better"] == "kernel_tuner/random_sample"
    assert second["ratios"] == {"autotune/tpe/none": 0.6, "autotune/tpe/other_shapes": 0.25}


def test_kt_table_says_met_and_missed() -> None:
    text = docs.kt_table(_kt_report())
    assert (
        f"| 128{X}64 | 9.90 | Kernel Tuner `bayes_opt` | 60.0 s | 15.0 s | 0.250 (met) | 31.5 s | 0.525 (missed) |"
        in text
    )
    assert (
        f"| 256{X}64 | 9.90 | Kernel Tuner `random_sample` | 20.0 s | 12.0 s | 0.600 (missed) | 5.0 s | 0.250 (met) |"
        in text
    )
    assert f"| 128{X}64 | Kernel Tuner `random_sample` | 0 of 2 | never (60 s) | 42 | 10.00 |" in text
    assert f"| 128{X}64 | autotune (TPE), other shapes' records | 1 of 2 | 31.5 s | 355 | 10.00 |" in text


def test_stems_leave_out_resume_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for stem in (
        "tuning_vs_kernel_tuner_nvidia-h200",
        "tuning_vs_kernel_tuner_runs",
        "select_nvidia-h200",
        "select_state",
    ):
        (tmp_path / f"{stem}.json").write_text("{}")
    monkeypatch.setattr(docs, "RESULTS", tmp_path)
    assert docs._stems("tuning_vs_kernel_tuner") == ["tuning_vs_kernel_tuner_nvidia-h200"]
    assert docs._stems("select") == ["select_nvidia-h200"]
    assert docs._stems("tuning") == []


KT_FILE = ROOT / "results" / "tuning_vs_kernel_tuner_nvidia-h200.json"
SELECT_FILE = ROOT / "results" / "select_nvidia-h200.json"


@pytest.mark.skipif(not KT_FILE.is_file(), reason="no results/ here (an sdist does not carry it)")
def test_kt_summary_agrees_with_the_benchmarks_own() -> None:
    report = json.loads(KT_FILE.read_text())
    ours = docs.kt_summary(report)
    for key, theirs in report["summary"].items():
        line = ours[key.replace("x", X)]
        assert line["better"] == theirs["kernel_tuner_better"]
        assert {kind: k["median_s"] for kind, k in line["kinds"].items()} == pytest.approx(
            theirs["median_seconds_to_2pct"]
        )
        assert line["ratios"]["autotune/tpe/none"] == pytest.approx(theirs["ratio_empty_vs_kernel_tuner"])
        assert line["ratios"]["autotune/tpe/other_shapes"] == pytest.approx(
            theirs["ratio_other_shapes_vs_kernel_tuner"]
        )


@pytest.mark.skipif(not SELECT_FILE.is_file(), reason="no results/ here (an sdist does not carry it)")
def test_select_summary_agrees_with_the_benchmarks_own() -> None:
    report = json.loads(SELECT_FILE.read_text())
    for op, theirs in report["summary"].items():
        line = docs.select_summary(report, op)
        assert f"regret geometric mean {100 * theirs['regret_geomean']:.1f}%" in line
        assert f"worst {100 * theirs['worst_regret']:.1f}%" in line
        assert f"{theirs['below_098_cublas']} of {theirs['shapes']} below" in line
        assert f"cuBLAS / pick geometric mean {theirs['vs_cublas_geomean']:.3f}" in line
        assert line.endswith("**met**." if theirs["goal_met"] else "**missed**.")


def test_pick_line_counts_cublas_picks_and_the_shapes_below_cublas() -> None:
    """Under a GEMM benchmark's table: cuBLAS / pick, its worst shape and those below 0.98x cuBLAS;
    nothing for a report without pick times (an older file) or for bench_select's rows."""
    rows = [
        {"dtype": "float16", "m": 4, "n": 4096, "k": 4096, "ours_us": 10.0, "cublas_us": 11.0, "pick_us": 10.0,
         "pick_source": "measured", "pick_config": {"vec": 8}},
        {"dtype": "float16", "m": 4, "n": 28672, "k": 4096, "ours_us": 60.0, "cublas_us": 57.0, "pick_us": 59.0,
         "pick_source": "measured", "pick_config": {"cublas_algo": 1}},
    ]  # fmt: skip
    line = docs.pick_line({"rows": rows})
    assert "cuBLASLt on 1 of 2 shapes" in line
    assert f"worst 0.97 (float16 4{X}28672{X}4096)" in line
    assert f"below 0.98x cuBLAS: float16 4{X}28672{X}4096." in line
    rows[1]["cublas_us"] = 59.0
    assert "none below 0.98x cuBLAS" in docs.pick_line({"rows": rows})
    assert docs.pick_line({"rows": [{k: v for k, v in r.items() if k != "pick_us"} for r in rows]}) == ""
    assert docs.pick_line(_select_report([_select_row("gemm", 8, 4096, 4096, 10.0, 9.0, 11.0)])) == ""
