"""The test run itself: it leaves nothing behind in the temporary folder, and conftest.py is loaded
once (as pytest's `conftest`, never again as `tests.conftest`, which would run its hooks' setup twice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import nvcc

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


def test_a_worker_that_did_not_start_the_background_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under pytest-xdist one worker starts the nvcc background and the others wait for its lock
    (tests/nvcc.py): here the background this process starts, and a second process that waits for it."""
    fake = tmp_path / "bin" / "nvcc"  # slow enough that the waiter starts before it ends
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nsleep 1\nfor last; do :; done\necho built > "$last"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    for name in ("process", "runs", "lock"):  # this run's own background stays as it is
        monkeypatch.setattr(nvcc._Background, name, None)
    cubins, runs = tmp_path / "cubins", tmp_path / "runs"
    nvcc.start_background([nvcc.NvccRun(("--fake",))], cubins, runs)
    waiter = (
        "import sys; from pathlib import Path; from tests import nvcc; run = nvcc.NvccRun(('--fake',))\n"
        "nvcc.start_background([run], Path(sys.argv[1]), Path(sys.argv[2]), start=False)\n"
        "nvcc.wait_for_background(); print(nvcc._kept(run, Path(sys.argv[2])))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", waiter, str(cubins), str(runs)], cwd=REPO, capture_output=True, text=True, timeout=60
        )
    finally:
        nvcc.wait_for_background()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("NvccDone(returncode=0"), done.stdout  # the background's result, there once it ended
