"""scripts/bench_tuning.py on the CPU: a brute force's log written as a Kernel Tuner cache file reads back
through scripts/search_replay.py as the same space (every valid config, its time, failures as failures)."""

from __future__ import annotations

import itertools
from pathlib import Path

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import config_key
from scripts import bench_tuning
from scripts import search_replay as replay_lib

H200 = GpuInfo("NVIDIA H200", "GPU-0", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")


def test_a_brute_force_log_replays_as_the_space_it_measured(tmp_path: Path) -> None:
    problem = Problem("gemv", "float16", 1024, 1024)
    space = bench_tuning.bench_space(problem)
    valid = list(itertools.islice(space, 40))
    assert len(valid) == 40
    log = []
    for i, config in enumerate(valid):
        if i == 3:
            outcome = Outcome(Status.COMPILE_ERROR, "ptxas: too many registers")
        elif i == 5:
            outcome = Outcome(Status.LAUNCH_ERROR, "too many resources requested")
        else:
            outcome = Outcome(Status.OK, time_us=10.0 + i, times_us=[10.0 + i])
        log.append((config, outcome, 1.5, 0.2))
    path = tmp_path / "space.json.gz"
    bench_tuning.write_space(path, H200, problem, space, log)

    replay = replay_lib.load(path)
    assert replay.names == space.names
    assert replay.optimum == 10.0
    assert len(replay.values) == 40
    by_key = {config_key(config): replay.value(config) for config in valid}
    assert by_key[config_key(valid[0])] == 10.0
    assert by_key[config_key(valid[39])] == 49.0
    assert by_key[config_key(valid[3])] is None and by_key[config_key(valid[5])] is None
    # A config of the space that the brute force did not measure is invalid in the replay.
    unmeasured = next(c for c in space if config_key(c) not in by_key)
    assert replay.space.check(unmeasured) is not None
    assert replay.space.check(valid[7]) is None
