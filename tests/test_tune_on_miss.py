"""Tuning on a miss (autotune/runtime/tune_on_miss.py): each problem once, in a background process,
the launch path told after each success; failures logged, never raised; close() stops the child."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import pytest

from autotune.core.problem import Problem
from autotune.runtime import tune_on_miss
from autotune.runtime.tune_on_miss import MissTuner, sweep_command

GEMV = Problem("gemv", "float16", 4000, 3000)
GEMM_NT = Problem("gemm", "bfloat16", 8, 11008, 4096, trans=True)


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_the_sweep_command_names_the_problem_as_the_cli_takes_it() -> None:
    argv = sweep_command(GEMV, None, 1, 32)
    assert argv[1:] == [
        "-m",
        "autotune",
        "-q",
        "sweep",
        "--op",
        "gemv",
        "--dtype",
        "float16",
        "--m",
        "4000",
        "--n",
        "3000",
        "--trials",
        "32",
        "--device",
        "1",
    ]
    argv = sweep_command(GEMM_NT, "sqlite:///x.db", 0, 8)
    assert argv[argv.index("--k") + 1] == "4096" and "--trans" in argv
    assert argv[-2:] == ["--db", "sqlite:///x.db"]


def test_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tune_on_miss.ENV, raising=False)
    assert not tune_on_miss.enabled()
    monkeypatch.setenv(tune_on_miss.ENV, "1")
    assert tune_on_miss.enabled()
    monkeypatch.setenv(tune_on_miss.TRIALS_ENV, "nonsense")
    assert tune_on_miss.trials() == tune_on_miss.DEFAULT_TRIALS


def test_each_problem_is_tuned_once_without_the_switch_and_the_launch_path_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tune_on_miss.ENV, "1")
    runs = tmp_path / "runs"
    # Each run appends its problem, its GPU and whether it saw the switch (a sweep must not tune its misses).
    code = (
        "import os, sys; switch = os.environ.get('AUTOTUNE_TUNE_ON_MISS', '-');"
        " open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + ' ' + switch + '\\n')"
    )
    told: list[int] = []
    tuner = MissTuner(
        lambda: told.append(tuner.generation),
        lambda p, db, d, t: [*python(code), str(runs), str(p), str(d)],
        locate=lambda name: 3 if name == "NVIDIA H200" else 0,
    )
    for problem in (GEMV, GEMM_NT, GEMV, GEMV):
        tuner.submit(problem, None, "NVIDIA H200")
    assert tuner.wait(60)
    assert runs.read_text().splitlines() == [f"{GEMV} 3 -", f"{GEMM_NT} 3 -"]  # GPU 3 is the H200
    assert tuner.generation == 2 and told == [1, 2]
    tuner.submit(GEMV, "sqlite:///other.db", "NVIDIA H200")  # another database is another problem
    assert tuner.wait(60) and tuner.generation == 3
    tuner.close()


def test_a_failed_sweep_is_logged_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    told: list[int] = []
    code = "import sys; print('error: no GPU here', file=sys.stderr); sys.exit(1)"
    tuner = MissTuner(lambda: told.append(1), lambda p, db, d, t: list(python(code)))
    with caplog.at_level(logging.WARNING, logger="autotune"):
        tuner.submit(GEMV, None, "NVIDIA H200")
        assert tuner.wait(60)
    assert tuner.generation == 0 and told == []
    assert f"the background tuning of {GEMV} failed: error: no GPU here" in caplog.text
    tuner.close()


def test_close_stops_the_running_sweep_and_drops_the_rest() -> None:
    tuner = MissTuner(lambda: None, lambda p, db, d, t: list(python("import time; time.sleep(60)")))
    tuner.submit(GEMV, None, "NVIDIA H200")
    tuner.submit(GEMM_NT, None, "NVIDIA H200")
    deadline = time.monotonic() + 30
    while tuner._child is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child = tuner._child
    assert child is not None
    began = time.monotonic()
    tuner.close()
    assert child.wait(10) != 0 and time.monotonic() - began < 10
    thread = tuner._thread
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()  # the thread ends with the child, and reports nothing
    tuner.submit(Problem("gemv", "float32", 5, 5), None, "NVIDIA H200")  # closed: nothing more starts
    assert tuner.generation == 0
