"""scripts/retime_shipped.py --compare: two workers' re-times of the shipped records set side by side,
and with --keep the file docs/design.md quotes (results/retime_<gpu>.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import retime_shipped  # noqa: E402


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

    retime_shipped.compare(plan, pycuda, keep=keep)

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
