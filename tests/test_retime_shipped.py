"""scripts/retime_shipped.py on the CPU: which shipped problems it re-times, and its comparison of two runs."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune import ops

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
retime: Any = importlib.import_module("retime_shipped")


def test_it_takes_each_files_current_problems_in_turns() -> None:
    picked = retime.shipped_best("nvidia-h200", 3)
    assert len(picked) <= 12  # at most 3 from each of the GEMV, transposed GEMV, GEMM and N x K GEMM files
    kinds = [(problem.op, problem.trans) for problem, _, _ in picked[:4]]
    assert kinds == [("gemv", False), ("gemv", True), ("gemm", False), ("gemm", True)]
    for problem, config, stored_us in picked:
        assert ops.for_problem(problem).space(problem).check(config) is None
        assert stored_us > 0
    assert len({problem for problem, _, _ in picked}) == len(picked)


def test_the_comparison_reports_the_ratio_of_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(label: str, times: list[float | None]) -> Path:
        rows = [
            {"problem": f"p{i}", "config": {}, "stored_us": 10.0, "now_us": t, "status": "ok" if t else "wrong"}
            for i, t in enumerate(times)
        ]
        path = tmp_path / f"retime_{label}.json"
        path.write_text(json.dumps({"gpu": "G", "label": label, "rows": rows}))
        return path

    retime.main(["--compare", str(run("new", [10.0, 11.0, None])), str(run("old", [10.0, 10.0, 10.0]))])
    out = capsys.readouterr().out
    assert "new: 3 problems, 1 within 2% of the stored time" in out and "1 failed" in out
    assert "new / old over 2 problems: median 1.0500, 1 within 2%, range 1.0000-1.1000" in out
    assert "p1: 1.1000" in out


def _run(path: Path, label: str, times: dict[str, float | None]) -> Path:
    rows = [
        {"problem": p, "config": {"block": 64}, "stored_us": 10.0, "now_us": t, "status": "ok"}
        for p, t in times.items()
    ]
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "label": label, "rows": rows}))
    return path


def test_two_runs_are_compared_problem_by_problem_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _run(tmp_path / "a.json", "plan", {"p1": 10.0, "p2": 10.5, "p3": 9.0, "p4": None})
    pycuda = _run(tmp_path / "b.json", "pycuda", {"p1": 10.0, "p2": 10.0, "p3": 10.0, "p5": 1.0})
    keep = tmp_path / "retime.json"

    retime.compare(plan, pycuda, keep=keep)

    report = json.loads(keep.read_text())
    # Only problems timed in both count: p4 failed in the first run, p5 is in the second alone.
    assert report["summary"] == {"problems": 3, "median": 1.0, "within_2pct": 1, "lowest": 0.9, "highest": 1.05}
    assert report["rows"][1] == {
        "problem": "p2",
        "config": {"block": 64},
        "stored_us": 10.0,
        "plan_us": 10.5,
        "pycuda_us": 10.0,
    }
    assert "plan / pycuda over 3 problems: median 1.0000, 1 within 2%" in capsys.readouterr().out
