"""The library families (autotune/ops/library.py: cuBLASLt's algorithms) as candidates of every sweep:
each candidate a library offers for the problem is checked and timed by the worker on the same
buffers, with the same method and through the same plan the launch path runs, and stored as a trial
of that family (config {config_key: rank}, source hash the library's version). The selection policy
then weighs the library's best against ours (autotune/select/choose.py)."""

from __future__ import annotations

import logging

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, toolchain
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import config_key
from autotune.measure.worker.client import Worker
from autotune.ops.library import Library
from autotune.store.rows import Provenance
from autotune.store.store import Store

log = logging.getLogger(__name__)


def _taking_part(problem: Problem) -> list[tuple[Library, str]]:
    """(library, this machine's version as a source hash) of each enabled library that serves the
    problem and is installed here, without a CUDA context."""
    found = []
    for library in ops.libraries():
        if library.serves(problem) and library.enabled():
            fingerprint = library.fingerprint()
            if fingerprint is not None:
                found.append((library, fingerprint))
    return found


def untimed(store: Store, problem: Problem, problem_id: int) -> bool:
    """Whether a library installed here was never timed on the problem."""
    return any(not store.completed_trials(problem_id, fingerprint) for _, fingerprint in _taking_part(problem))


def time_libraries(
    store: Store, worker: Worker, gpu: GpuInfo, gpu_id: int, problem: Problem, problem_id: int
) -> float | None:
    """Time every library candidate of the set-up problem not yet stored; the best time of all of
    them stored (None: none ran, or no library is installed here)."""
    times: list[float] = []
    for library, _ in _taking_part(problem):
        best = _time_library(library, store, worker, gpu, gpu_id, problem, problem_id)
        if best is not None:
            times.append(best)
    return min(times, default=None)


def _time_library(
    library: Library, store: Store, worker: Worker, gpu: GpuInfo, gpu_id: int, problem: Problem, problem_id: int
) -> float | None:
    try:
        count, fingerprint = worker.library_candidates(library.name)
    except AutotuneError as exc:
        log.info("%s: %s not timed: %s", problem, library.label, exc)
        return None
    where = Provenance(problem_id, gpu_id, fingerprint, toolchain(), gpu.driver, gpu.cuda)
    done = store.completed_trials(problem_id, fingerprint)
    times = [row.time_us for row in done if row.status is Status.OK and row.time_us]
    measured = {row.config_key for row in done}
    for rank in range(count):
        config = library.config(rank)
        if config_key(config) in measured:
            continue
        worker.ready()
        trial_id = store.start_trial(where, config)
        outcome = worker.measure_library(library.name, config)
        store.finish_trial(trial_id, outcome)
        if outcome.status is Status.OK and outcome.time_us:
            times.append(outcome.time_us)
        else:
            log.warning("%s: %s: %s %s", problem, library.describe(config), outcome.status.value, outcome.message)
    best = min(times, default=None)
    log.info("%s: %s, %d algorithms, best %s", problem, fingerprint, count, f"{best:.2f} us" if best else "none")
    return best
