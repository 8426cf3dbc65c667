"""The test run itself: it leaves nothing behind in the temporary folder, and conftest.py is loaded
once (as pytest's `conftest`, never again as `tests.conftest`, which would run its hooks' setup twice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_run_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    temporary, basetemp = tmp_path / "tmp", tmp_path / "basetemp"
    temporary.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    env["TMPDIR"] = str(temporary)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}"]
    # test_bundle.py imports helpers of tests/ at collection; one of its tests is enough.
    command += ["tests/test_problem.py", "tests/test_bundle.py::test_c_strings_escape_what_c_would_read_otherwise"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(path.name for path in temporary.iterdir()) == []


def test_conftest_is_loaded_once() -> None:
    assert "tests.conftest" not in sys.modules
