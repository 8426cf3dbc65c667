"""cuBLASLt as a candidate of every sweep: each algorithm its heuristic offers for the problem is
checked and timed by the worker on the same buffers, with the same method as our configs, and
stored as a trial of the `cublas` family (config {"cublas_algo": rank}, source hash the library's
version). The selector then answers cuBLAS wherever it is the fastest measured."""

from __future__ import annotations

import logging
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, toolchain
from autotune.core.outcome import Status
from autotune.core.problem import Problem
from autotune.core.space import config_key
from autotune.measure.worker.client import Worker
from autotune.store.rows import Provenance
from autotune.vendor.mapping import OPS as VENDOR_OPS
from autotune.vendor.mapping import vendor_config

log = logging.getLogger(__name__)


def local_fingerprint() -> str | None:
    """The cuBLASLt version this machine's worker will load, without a CUDA context; None without one."""
    from autotune import vendor
    from autotune.vendor import cublaslt

    return cublaslt.fingerprint() if vendor.enabled() and cublaslt.available() else None


def vendor_missing(store: Any, problem: Problem, problem_id: int) -> bool:
    """Whether this machine's cuBLASLt was never timed on the problem."""
    if problem.op not in VENDOR_OPS:
        return False
    fingerprint = local_fingerprint()
    return fingerprint is not None and not store.completed_trials(problem_id, fingerprint)


def time_vendor(
    store: Any, worker: Worker, gpu: GpuInfo, gpu_id: int, problem: Problem, problem_id: int
) -> float | None:
    """Time every cuBLASLt algorithm of the set-up problem not yet stored; the best time of all of
    them stored (None: none ran, or the library is missing)."""
    if problem.op not in VENDOR_OPS:
        return None
    try:
        count, fingerprint = worker.vendor_algorithms()
    except AutotuneError as exc:
        log.info("%s: cuBLASLt not timed: %s", problem, exc)
        return None
    where = Provenance(problem_id, gpu_id, fingerprint, toolchain(), gpu.driver, gpu.cuda)
    done = store.completed_trials(problem_id, fingerprint)
    times = [row.time_us for row in done if row.status is Status.OK and row.time_us]
    measured = {row.config_key for row in done}
    for rank in range(count):
        config = vendor_config(rank)
        if config_key(config) in measured:
            continue
        worker.ready()
        trial_id = store.start_trial(where, config)
        outcome = worker.measure_vendor(config)
        store.finish_trial(trial_id, outcome)
        if outcome.status is Status.OK and outcome.time_us:
            times.append(outcome.time_us)
        else:
            log.warning("%s: cuBLASLt algorithm %d: %s %s", problem, rank, outcome.status.value, outcome.message)
    best = min(times, default=None)
    log.info("%s: %s, %d algorithms, best %s", problem, fingerprint, count, f"{best:.2f} us" if best else "none")
    return best
