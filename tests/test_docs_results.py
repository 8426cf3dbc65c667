"""docs/results.md and the README's headline tables are what scripts/docs_results.py makes of results/*.json."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
