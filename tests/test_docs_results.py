"""docs/results.md, the README's headline tables and the figures in the docs' prose are what
scripts/docs_results.py makes of results/*.json and the shipped kernels; the README's first example is what
`autotune best` prints."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not (ROOT / "results").is_dir(), reason="no results/ here (an sdist does not carry it)")
def test_results_docs_are_generated_from_the_json_files() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_results.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _docs_results() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    import docs_results

    return docs_results


@pytest.mark.skipif(not (ROOT / "results").is_dir(), reason="no results/ here (an sdist does not carry it)")
def test_a_stale_figure_in_prose_is_found_and_rewritten_and_a_reworded_one_is_reported() -> None:
    docs = _docs_results()
    path = docs.DOCS / "development.md"
    text = path.read_text()
    count = docs.shipped_kernels()["count"]
    assert f"`--rebuild` compiles all {count}" in text
    stale = text.replace(f"compiles all {count}", "compiles all 300")
    differences: list[str] = []
    missing: list[str] = []
    assert docs.with_figures(path, stale, differences, missing) == text
    assert differences == [f"docs/development.md: count is 300, db/kernels/index.json gives {count}"]
    assert missing == []
    docs.with_figures(path, text.replace("compiles all", "compiles every"), differences, missing)
    assert len(missing) == 1 and "development.md" in missing[0]


def test_the_int4_table_marks_what_was_not_measured_and_states_each_goal_met_or_missed() -> None:
    docs = _docs_results()
    row = {
        **{"format": "int4", "group": 128, "sym": True, "dtype": "float16", "m": 1, "n": 4096, "k": 4096},
        **{"ours_us": 10.0, "ours_fp16_us": 20.0, "torch_fp16_us": 40.0, "tinygemm_us": None, "gemlite_us": None},
        **{"bytes": 10_000_000, "max_rel_err": 3e-4, "peer_max_rel_err": 2e-4, "notes": []},
    }
    text = docs.lowbit_table({"copy_gbs": 2000.0, "rows": [row]})
    dash, times = docs.DASH, docs.TIMES
    assert f"| 1 | 4096{times}4096 | 10.00 | 20.00 | 40.00 | {dash} | {dash} | 1000 | 50.0 | 1.50 |" in text
    assert "M = 1 geomean speedup over torch float16: 4.00x (goal ≥ 3.2x, **met**)" in text
    assert "M = 1 geomean speedup over our float16: 2.00x (goal ≥ 2.7x, **missed**)" in text
    assert "Not measured: M = 1 geomean speedup over tinygemm;" in text


def test_a_figure_just_under_its_goal_shows_the_digit_that_misses_it() -> None:
    docs = _docs_results()
    rows = [
        {
            **{"format": "int4", "group": 128, "sym": True, "dtype": "float16", "m": m, "n": 4096, "k": 4096},
            **{"ours_us": 100.0, "ours_fp16_us": 80.0, "torch_fp16_us": torch_us, "tinygemm_us": None},
            **{"gemlite_us": None, "bytes": 10_000_000, "max_rel_err": 3e-4, "peer_max_rel_err": 2e-4, "notes": []},
        }
        for m, torch_us in ((1024, 79.8), (4096, 99.0))
    ]
    text = docs.lowbit_table({"copy_gbs": 2000.0, "rows": rows})
    assert "M≥1024 worst geomean speedup over torch float16: 0.798x (goal ≥ 0.8x, **missed**)" in text
    rows[0]["torch_fp16_us"] = 80.4  # 0.804 rounds to 0.80 and meets the goal: two digits
    text = docs.lowbit_table({"copy_gbs": 2000.0, "rows": rows})
    assert "M≥1024 worst geomean speedup over torch float16: 0.80x (goal ≥ 0.8x, **met**)" in text


@pytest.mark.shipped_records
def test_the_readmes_first_example_prints_what_best_prints(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    command = 'autotune best --m 4096 --n 8192 --gpu "NVIDIA H200"'
    assert command in readme
    shown = readme.split("which prints the config to run and its measured time:\n\n", 1)[1].split("\n\n", 1)[0]
    # As an 80-column terminal shows it: the config line wraps at the terminal's width.
    run = CliRunner().invoke(app, [*shlex.split(command)[1:], "--db", str(tmp_path / "new.db")], env={"COLUMNS": "80"})
    assert run.exit_code == 0, run.output
    assert [line.removeprefix("    ") for line in shown.splitlines()] == run.output.rstrip().splitlines()
