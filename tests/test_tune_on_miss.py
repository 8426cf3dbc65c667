"""Tuning on a miss (autotune/runtime/tune_on_miss.py): each problem once, in a background process,
the launch path told after each success; failures logged, never raised; close() stops the child."""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from pathlib import Path

import pytest

from autotune.core.errors import AutotuneWarning
from autotune.core.problem import Problem
from autotune.runtime import tune_on_miss
from autotune.runtime.tune_on_miss import MissTuner, sweep_command

GEMV = Problem("gemv", "float16", 4000, 3000)
GEMM_NT = Problem("gemm", "bfloat16", 8, 11008, 4096, trans=True)


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_the_sweep_command_names_the_problem_as_the_cli_takes_it() -> None:
    argv = sweep_command(GEMV, 1, 32)
    assert argv[argv.index("-m") :] == [
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
    argv = sweep_command(GEMM_NT, 0, 8)
    assert argv[argv.index("--k") + 1] == "4096" and "--trans" in argv and "--db" not in argv


def test_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tune_on_miss.ENV, raising=False)
    assert not tune_on_miss.enabled()
    monkeypatch.setenv(tune_on_miss.ENV, "1")
    assert tune_on_miss.enabled()
    for text, on in (("true", True), (" Yes ", True), ("on", True), ("0", False), ("off", False), ("no", False)):
        monkeypatch.setenv(tune_on_miss.ENV, text)
        assert tune_on_miss.enabled() is on, text
    monkeypatch.setenv(tune_on_miss.ENV, "maybe")
    with pytest.warns(AutotuneWarning, match="'maybe' is neither 1 nor 0: tuning on a miss stays off"):
        assert not tune_on_miss.enabled()


@pytest.mark.parametrize(
    ("text", "used", "warned"),
    [
        ("", tune_on_miss.DEFAULT_TRIALS, None),
        ("100", 100, None),
        ("abc", tune_on_miss.DEFAULT_TRIALS, "'abc' is not a whole number of trials; using 32"),
        ("1e3", tune_on_miss.DEFAULT_TRIALS, "'1e3' is not a whole number of trials; using 32"),
        (str(10**20), tune_on_miss.MAX_TRIALS, f"is not from 1 to {tune_on_miss.MAX_TRIALS}; using 4096"),
        ("0", 1, "'0' is not from 1 to"),
    ],
)
def test_a_trials_setting_out_of_reason_is_warned_about_and_bounded(
    monkeypatch: pytest.MonkeyPatch, text: str, used: int, warned: str | None
) -> None:
    monkeypatch.setenv(tune_on_miss.TRIALS_ENV, text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tune_on_miss.trials() == used
    said = [str(warning.message) for warning in caught if issubclass(warning.category, AutotuneWarning)]
    if warned is None:
        assert said == []
    else:
        assert len(said) == 1 and tune_on_miss.TRIALS_ENV in said[0] and warned in said[0], said


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
        lambda p, d, t: [*python(code), str(runs), str(p), str(d)],
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
    tuner = MissTuner(lambda: told.append(1), lambda p, d, t: list(python(code)))
    with caplog.at_level(logging.WARNING, logger="autotune"):
        tuner.submit(GEMV, None, "NVIDIA H200")
        assert tuner.wait(60)
    assert tuner.generation == 0 and told == []
    assert f"the background tuning of {GEMV} failed: error: no GPU here" in caplog.text
    tuner.close()


def test_close_stops_the_running_sweep_and_drops_the_rest() -> None:
    tuner = MissTuner(lambda: None, lambda p, d, t: list(python("import time; time.sleep(60)")))
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


def _hostile_folder(folder: Path) -> Path:
    """A folder holding an `autotune/` package and a `runpy.py` that leave a PWNED file when run."""
    plant = "import pathlib; pathlib.Path(__file__).resolve().parent.parent.joinpath('PWNED').write_text('ran')\n"
    (folder / "autotune").mkdir(parents=True)
    for name in ("__init__.py", "__main__.py"):
        (folder / "autotune" / name).write_text(plant)
    (folder / "runpy.py").write_text(plant.replace(".parent.parent", ".parent"))
    return folder


@pytest.mark.parametrize("python_below_3_11", [False, True])
def test_a_hostile_autotune_package_in_the_current_folder_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python_below_3_11: bool
) -> None:
    folder = _hostile_folder(tmp_path / "cloned project")
    with monkeypatch.context() as patch:
        if python_below_3_11:  # the bootstrap form, which any Python runs
            patch.setattr(sys, "version_info", (3, 10, 0))
        argv = [*sweep_command(GEMV, 0, 1), "--help"]  # the real sweep command, answering at once
    assert ("-P" in argv) is not python_below_3_11
    monkeypatch.chdir(folder)
    tuner = MissTuner(lambda: None, lambda p, d, t: argv)
    tuner.submit(GEMV, None, "NVIDIA H200")
    assert tuner.wait(60)
    tuner.close()
    assert tuner.generation == 1  # the installed autotune ran the sweep (its --help) and exited 0
    assert not (folder / "PWNED").exists()


def test_the_database_url_reaches_the_sweep_in_its_environment_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A command line is readable by every local user (/proc/PID/cmdline), and so is a log.
    db = "postgresql+psycopg://autotune:S3cret-pw@127.0.0.1:5432/db?sslpassword=S3cret-key"
    seen = tmp_path / "seen.json"
    code = (
        "import json, os, sys; cmdline = open('/proc/self/cmdline').read();"
        " json.dump([os.environ.get('AUTOTUNE_DB'), cmdline], open(sys.argv[1], 'w'))"
    )
    tuner = MissTuner(lambda: None, lambda p, d, t: [*python(code), str(seen), *sweep_command(p, d, t)[1:]])
    with caplog.at_level(logging.INFO, logger="autotune"):
        tuner.submit(GEMV, db, "NVIDIA H200")
        assert tuner.wait(60)
    tuner.close()
    environment, cmdline = json.loads(seen.read_text())
    assert environment == db and "sweep" in cmdline
    assert "S3cret" not in cmdline and "S3cret" not in caplog.text
    assert "autotune:***@127.0.0.1:5432/db?sslpassword=***" in caplog.text
