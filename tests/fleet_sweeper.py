"""One machine of a test fleet, run as a script: a claiming sweep with a fake worker into a shared
database. Journals "problem|config_key" after every finished trial, and "done problem" after every
problem it measured something of, so the test can count how often each config and each problem was
tuned. (A sweep that starts after another machine finished a listed problem claims it too, finds its
trials all stored and measures nothing: that is not tuning it twice.)

    python tests/fleet_sweeper.py URL JOURNAL LEASE_S TRIALS (list|pending) [GPU_NAME]
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from tests.fakes import InstantPool

PROBLEMS = [Problem("gemv", "float16", 1024 * (i + 1), 4096) for i in range(6)]
MEASURE_SECONDS = 0.02  # long enough that a kill lands in the middle of a problem


def gpu(name: str) -> GpuInfo:
    return GpuInfo(name, f"GPU-{name}", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")


class FakeWorker:
    def __init__(self) -> None:
        self.problem = PROBLEMS[0]

    def ready(self) -> None:
        pass

    def setup(self, problem: Problem, seed: int, fresh_memory: bool = False) -> dict[str, object]:
        self.problem = problem
        return {}

    def measure(self, cubin: Path, kernel: str, config: dict[str, int], timeout: float = 60.0) -> Outcome:
        time.sleep(MEASURE_SECONDS)
        t = 10.0 + sum(config.values()) % 97
        return Outcome(Status.OK, time_us=t, times_us=[t], gbs=1.0)


def main(
    url: str, journal: Path, lease_s: float, trials: int, mode: str, gpu_name: str = "Fleet GPU", die_after: int = 0
) -> Any:
    """Sweep with the fake worker; with `die_after`, SIGKILL this process after that many trials."""
    from autotune.store import open_store
    from autotune.tune.search import Budget
    from autotune.tune.tuner import Tuner, sweep_claimed

    log = journal.open("a", buffering=1)
    store = open_store(url, import_shipped=False)
    finish = store.finish_trial

    def logged_finish(trial_id: int, outcome: Outcome) -> None:
        key, where, _ = store._started[trial_id]
        finish(trial_id, outcome)
        log.write(f"{gpu_name}|{where.problem_id}|{key}\n")  # only once it returned
        if die_after and sum(1 for _ in journal.open()) >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)

    store.finish_trial = logged_finish  # type: ignore[method-assign]
    worker: Any = FakeWorker()
    tuner = Tuner(store, worker, InstantPool(), gpu(gpu_name), sampler="random", budget=Budget(trials), seed=1)
    report = sweep_claimed(tuner, store, PROBLEMS if mode == "list" else None, timedelta(seconds=lease_s))
    for item in report.problems:
        if item.result.measured:
            log.write(f"done {gpu_name} {item.problem}\n")
    store.close()
    return report


def device_job(device: int, url: str, folder: str, models: list[str], die_on: int | None) -> Any:
    """One GPU's sweep for autotune.tune.devices.run_on_devices: GPU `device` is of model
    models[device]; the process of GPU `die_on` is killed after three trials."""
    journal = Path(folder) / f"gpu{device}.log"
    return main(url, journal, 1.5, 10, "list", models[device], die_after=3 if device == die_on else 0)


if __name__ == "__main__":
    url, journal, lease_s, trials, mode, *rest = sys.argv[1:]
    main(url, Path(journal), float(lease_s), int(trials), mode, *rest)
