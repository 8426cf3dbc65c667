"""Confirmation: a study's leaders measured again on freshly allocated, refilled buffers.

A kernel's time can depend on where its buffers landed in memory, and one set of buffers can favour
one config by more than the gap between the leaders. On the H200, float16 8192x4096 at block=64
lanes=64 measured 17.28 us in a sweep, 0.01 us ahead of block=128 lanes=128, and then 17.6-18.2 us
in every later run while the other held 17.1-17.3. So the configs within CONFIRM_WITHIN of the best
are measured once more on a second set of buffers and keep the slower of their two times: the one
chosen is fast wherever its caller's arrays happen to lie.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from autotune.build.compiler import CompileJob, CompilePool
from autotune.core.errors import AutotuneError
from autotune.core.outcome import Outcome
from autotune.core.space import Config
from autotune.measure.worker.client import SetupLost, WorkerLost
from autotune.store.rows import TrialRow

CONFIRM_TOP = 4  # leaders looked at
CONFIRM_WITHIN = 0.03  # ... of which those this close to the best are confirmed
CONFIRM_ROUNDS = 2  # sets of buffers a confirmed leader has been measured on
# A confirmed leader that turns out slower can let an unconfirmed one into the window: confirm again,
# a bounded number of times.
MAX_PASSES = 3


class Remeasurer(Protocol):
    """What confirmation needs from the tuner's side (autotune/tune/tuner.py's StoreMeasurer)."""

    def compile_job(self, config: Config) -> CompileJob: ...
    def leaders(self, top: int) -> list[TrialRow]: ...
    def fresh_buffers(self) -> None: ...
    def remeasure(self, trial: TrialRow, cubin: Path, kernel: str) -> Outcome: ...


def unconfirmed(leaders: list[TrialRow]) -> list[TrialRow]:
    """The leaders within CONFIRM_WITHIN of the fastest that still lack a round (fastest first)."""
    if not leaders or leaders[0].time_us is None:
        return []
    window = leaders[0].time_us * (1 + CONFIRM_WITHIN)
    return [t for t in leaders if t.time_us is not None and t.time_us <= window and t.rounds < CONFIRM_ROUNDS]


def confirm_leaders(measurer: Remeasurer, pool: CompilePool) -> int:
    """Measure the problem's unconfirmed leaders on new buffers until every leader within the window
    is confirmed; returns how many measurements that took. Every round goes into the store."""
    measured = 0
    for _ in range(MAX_PASSES):
        trials = unconfirmed(measurer.leaders(CONFIRM_TOP))
        if not trials:
            break
        try:
            measurer.fresh_buffers()
        except (AutotuneError, WorkerLost):
            break  # the leaders stay as they are; the next sweep of this problem tries again
        compiling = [(trial, pool.submit(measurer.compile_job(trial.config))) for trial in trials]
        for trial, future in compiling:
            compiled = future.result()
            if compiled.cubin is None:
                continue  # it compiled for the study: a toolchain hiccup, left for the next sweep
            try:
                measurer.remeasure(trial, compiled.cubin, compiled.job.name)
            except SetupLost:
                return measured  # no worker can be given the problem: the next sweep confirms the rest
            measured += 1
    return measured
