"""scripts/bench_lowbit8.py on the CPU: its plan, byte count and goal figures (the runs need the GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import bench_lowbit8  # noqa: E402


def _row(kind: str, n: int, k: int, ours: float, ours_fp16: float, torch_fp16: float) -> dict[str, Any]:
    return {
        "format": kind,
        "dtype": "float16",
        "m": 1,
        "n": n,
        "k": k,
        "ours_us": ours,
        "ours_fp16_us": ours_fp16,
        "torch_fp16_us": torch_fp16,
        "bytes": bench_lowbit8.unique_bytes(1, n, k),
    }


def test_the_plan_is_the_ops_eight_pairs_and_the_bytes_are_a_byte_a_weight() -> None:
    assert bench_lowbit8.pairs()[:2] == [(6144, 4096), (4096, 4096)] and len(bench_lowbit8.pairs()) == 8
    assert bench_lowbit8.unique_bytes(1, 4096, 4096) == 4096 * 4096 + 4096 * 2 + (4096 + 4096) * 2


def test_the_summary_states_each_goal_and_whether_it_is_met(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Over torch: 2.2x and 2x (geometric mean 2.098); over ours: 2x and 1.333x (1.633). 28672 x 4096 is
    # 112 MiB: 117.6 MB in 30 us is 3.92 TB/s, 98.0% of a 4 TB/s copy; 4096 x 4096 is under 32 MiB.
    rows = [_row("int8", 28672, 4096, 30.0, 60.0, 66.0), _row("int8", 4096, 4096, 6.0, 8.0, 12.0)]
    path = tmp_path / "lowbit8.json"
    path.write_text(json.dumps({"gpu": "GPU", "copy_gbs": 4000.0, "rows": rows}))
    assert bench_lowbit8.main(["--summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "int8 float16 M=1 geomean speedup over torch_fp16   2.098 (goal >= 1.9)  ok" in out
    assert "over ours_fp16    1.633 (goal >= 1.6)  ok" in out
    assert "worst % of copy, >= 32 MiB                   98.0 (goal >= 90.0)  ok" in out


def test_a_file_that_is_no_report_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text("[1, 2]")
    assert bench_lowbit8.main(["--summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_lowbit8: ") and "not a bench_lowbit8 report" in err and err.count("\n") == 1
