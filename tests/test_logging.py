"""Logging: the `autotune` logger, the CLI's -v / -q, AUTOTUNE_LOG, and the sweep's on_trial hook."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.core.log import cli_level
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.ops import gemv
from autotune.store import Store
from autotune.tune.search import Budget
from autotune.tune.tuner import Tuner
from tests.fakes import InstantPool, modelled_time_us
from tests.test_tuner import H200, FakeWorker

REPO = Path(__file__).resolve().parents[1]
SHAPE = Problem("gemv", "float16", 4096, 8192)


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_LOG"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=environment)


def test_the_library_says_nothing_unless_asked() -> None:
    quiet = _python("import logging, autotune; logging.getLogger('autotune.x').warning('hidden')")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    shown = _python("import logging, autotune; logging.getLogger('autotune.x').info('shown')", AUTOTUNE_LOG="info")
    assert shown.returncode == 0 and "INFO autotune.x: shown" in shown.stderr


def test_a_bad_autotune_log_is_one_warning_line_not_a_failed_import() -> None:
    bad = _python("import autotune", AUTOTUNE_LOG="loud")
    assert bad.returncode == 0
    assert bad.stderr.strip().splitlines() == [
        "AUTOTUNE_LOG='loud': choose one of DEBUG, INFO, WARNING, ERROR; logging stays at WARNING"
    ]


@pytest.mark.parametrize(
    ("verbose", "quiet", "env", "level"),
    [
        (0, False, "", logging.WARNING),
        (1, False, "", logging.INFO),
        (2, False, "error", logging.DEBUG),
        (0, True, "debug", logging.ERROR),
        (0, False, "debug", logging.DEBUG),
        (0, False, "loud", logging.WARNING),
    ],
)
def test_cli_levels(monkeypatch: pytest.MonkeyPatch, verbose: int, quiet: bool, env: str, level: int) -> None:
    monkeypatch.setenv("AUTOTUNE_LOG", env)
    assert cli_level(verbose, quiet) == level


def test_a_sweep_logs_each_problem_and_trial_and_calls_on_trial(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gemv.OP, "seed_configs", lambda problem: [])
    seen: list[tuple[Problem, Config, Outcome]] = []
    tuner = Tuner(
        store,
        FakeWorker({1: Status.CRASHED}),  # type: ignore[arg-type]
        InstantPool(),  # type: ignore[arg-type]
        H200,
        sampler="random",
        budget=Budget(6),
        seed=3,
        confirm=False,
        on_trial=lambda problem, config, outcome: seen.append((problem, config, outcome)),
    )
    with caplog.at_level(logging.DEBUG, logger="autotune"):
        report = tuner.tune(SHAPE)
    assert len(seen) == report.result.measured == 6
    for problem, config, outcome in seen:
        assert problem == SHAPE and gemv.OP.space(SHAPE).check(config) is None
        if outcome.status is Status.OK:
            assert outcome.time_us == modelled_time_us(config)
    messages = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("autotune.tune.tuner", "INFO", f"tuning {SHAPE} on {H200.name} (1 of 1): 0 trials stored") in messages
    trials = [m for name, level, m in messages if level == "DEBUG" and name == "autotune.tune.tuner"]
    assert len(trials) == 6 and all(m.startswith(str(SHAPE)) for m in trials)
    done = [m for name, level, m in messages if level == "INFO" and m.startswith(f"{SHAPE}: best")]
    assert len(done) == 1 and f"{report.result.best_us:.2f} us" in done[0]


def test_the_python_api_hands_on_trial_to_the_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import autotune
    from autotune.tune import tuner

    given: dict[str, Any] = {}

    def fake_run_sweep(problems: Any, open_store: Any, **kwargs: Any) -> Any:
        given.update(kwargs)
        return tuner.SweepReport(H200, "sqlite://")

    def hook(problem: Problem, config: Config, outcome: Outcome) -> None:
        pass

    monkeypatch.setattr(tuner, "run_sweep", fake_run_sweep)
    autotune.sweep("hgemv", 4096, 8192, trials=2, db=str(tmp_path / "t.db"), on_trial=hook)
    assert given["on_trial"] is hook
