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
