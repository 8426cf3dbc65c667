"""The Python processes autotune starts never import from the caller's current folder, where a
cloned project or a shared folder may hold an `autotune/` package or a module named like the
standard library's (the worker: tests/test_worker_protocol.py; tune on miss: tests/test_tune_on_miss.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from autotune.tune.devices import run_on_devices


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH, which spawned processes honour, is 3.11's")
def test_a_spawned_gpu_process_runs_no_package_of_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # multiprocessing's spawned interpreter starts as `python -c`: the current folder comes first.
    plant = tmp_path / "multiprocessing"
    plant.mkdir()
    (plant / "__init__.py").write_text("open(__file__ + '.PWNED', 'w').write('ran'); raise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    [result] = run_on_devices([0], dict)  # dict(device=0): a job any interpreter can run
    assert result.error is None and result.report == {"device": 0}
    assert not (plant / "__init__.py.PWNED").exists()
    assert "PYTHONSAFEPATH" not in os.environ  # set only while the processes start
