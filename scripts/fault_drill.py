"""Fault drill on the GPU machine: planted out-of-bounds write, hang, wrong values, NaN, trap and a
killed worker inside a real sweep, which is itself SIGKILLed midway and resumed. It passes when every
fault was survived and recorded as its kind and the database holds every completed measurement
exactly once.

    python scripts/fault_drill.py --out results     # writes results/faults_<gpu>.json

The tests import it as scripts.fault_drill: tests/test_gpu_faults.py runs a shorter drill,
tests/test_compile.py compiles the planted faults, tests/test_drill_polling.py checks the polling.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.bench.harness import report_path, write_json
from autotune.build.compiler import CompileJob, CompilePool, CompileResult
from autotune.core.dtypes import CUDA_TYPE
from autotune.core.fingerprint import local_gpus
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.measure.worker.client import Worker
from autotune.ops import gemv, source_hash
from autotune.tune.search import Budget
from autotune.tune.tuner import StoreMeasurer, Tuner

PROBLEM = Problem("gemv", "float16", 2048, 2048)
BODY = "  at_gemv::gemv_body"
NAN_T = "at_common::from_float<{t}>(__int_as_float(0x7fffffff))"
# Each block first waits a second of GPU time: long enough for the drill to kill the worker mid-measure.
SLOW = (
    '  { unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));\n'
    '    do { __nanosleep(1000); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); }'
    " while (t - t0 < 1000000000ull); }\n"
)


@dataclass(frozen=True)
class Fault:
    kind: str
    expected: Status
    config: Config
    rewrite: Callable[[str, str], str]  # (kernel source, CUDA element type) -> faulty source


def _with(config: Config, **changes: int) -> Config:
    return {**config, **changes}


_BASE = dict(gemv.DEFAULT_CONFIG)
FAULTS = (
    Fault(
        "out_of_bounds_write",
        Status.LAUNCH_ERROR,
        _with(_BASE, block=64),
        lambda s, t: s.replace(BODY, "  if (threadIdx.x == 0) ((volatile float*)y)[-(1ll << 36)] = 1.0f;\n" + BODY),
    ),
    Fault(
        "hang",
        Status.TIMEOUT,
        _with(_BASE, block=256),
        lambda s, t: s.replace(BODY, "  for (;;) __nanosleep(1000);\n" + BODY),
    ),
    Fault(
        "wrong_values",
        Status.WRONG_RESULT,
        _with(_BASE, block=512),
        lambda s, t: s.replace("(A, x, y, M, N, lda, alpha,", "(A, x, y, M, N, lda, 2.0f * alpha,"),
    ),
    Fault(
        "nan_output",
        Status.WRONG_RESULT,
        _with(_BASE, unroll=2),
        lambda s, t: s.replace(
            "counters);\n}",
            "counters);\n  if (blockIdx.x == 0 && threadIdx.x == 0) y[0] = " + NAN_T.format(t=t) + ";\n}",
        ),
    ),
    Fault("trap", Status.LAUNCH_ERROR, _with(_BASE, unroll=1), lambda s, t: s.replace(BODY, "  __trap();\n" + BODY)),
    # A slow but correct kernel: the drill kills the worker process while it is being measured.
    Fault("worker_killed", Status.CRASHED, _with(_BASE, rows=2), lambda s, t: s.replace(BODY, SLOW + BODY)),
)


class DrillMeasurer(StoreMeasurer):
    """The real measurer, with the planted faults' sources swapped in."""

    def compile_job(self, config: Config) -> CompileJob:
        job = super().compile_job(config)
        for fault in FAULTS:
            if config_key(fault.config) == config_key(config):
                source = fault.rewrite(job.source, CUDA_TYPE[PROBLEM.dtype])
                assert source != job.source, fault.kind
                return CompileJob(job.name, source, job.arch, f"{job.depends_hash}:{fault.kind}")
        return job

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        killer = None
        if config_key(config) == config_key(FAULTS[-1].config):
            # A worker that crashed on the fault before is replaced first, so that the kill lands
            # in this measurement and not in the new worker's setup.
            self._worker.ready()
            killer = threading.Timer(0.3, _kill_worker, args=(self._worker,))
            killer.start()
        try:
            return super().measure(config, compiled)
        finally:
            if killer is not None:
                killer.cancel()


def _kill_worker(worker: Worker) -> None:
    if worker.pid is not None:
        os.kill(worker.pid, signal.SIGKILL)


def run_sweep(db: str, trials: int, measure_timeout: float) -> None:
    """The sweep under test (runs in a child process the drill may SIGKILL)."""
    from autotune.store import open_store

    # A planted hang should not cost the default minute.
    with Worker(measure_timeout=measure_timeout) as worker, CompilePool() as pool:
        gpu = worker.hello()
        store = open_store(db, import_shipped=False)
        tuner = Tuner(store, worker, pool, gpu, budget=Budget(trials), measurer=DrillMeasurer, seed=7)
        result = tuner.tune(PROBLEM, first=[f.config for f in FAULTS]).result
        # Why the sweep ended, for whoever reads the drill's output when it fails.
        print(f"drill sweep: measured {result.measured}, reused {result.reused}, stopped: {result.stopped}")


def _rows(db: Path) -> list[tuple[int, str, str, float | None, str]]:
    """The finished trials: (id, config key, status, time, source hash). A sweep also times cuBLASLt
    (autotune/tune/libraries.py): those rows carry the library's version as their source hash."""
    with sqlite3.connect(db) as connection:
        query = (
            "select id, config_key, status, time_us, source_hash from trials where status not in ('invalid', 'running')"
        )
        return [tuple(row) for row in connection.execute(query)]


def finished_so_far(db: Path, source: str) -> int:
    """Finished trials of our kernel source in the sweep's database while it runs: 0 until its
    migrations have made the tables (the file appears first), and while SQLite answers that the
    file is busy."""
    if not db.exists():
        return 0
    try:
        return sum(row[4] == source for row in _rows(db))
    except sqlite3.OperationalError:
        return 0


def _child(db: Path, trials: int, measure_timeout: float) -> subprocess.Popen[bytes]:
    # Run from the repository, where autotune imports without an install; this file's folder goes on the path.
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path.insert(0, {str(here)!r}); from fault_drill import run_sweep; "
        f"run_sweep({str(db)!r}, {trials}, {measure_timeout})"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=here.parent)


def drill(db: Path, *, trials: int = 40, kill_after: int = 14, measure_timeout: float = 8.0) -> dict[str, Any]:
    """Run the whole drill; returns the report that main() writes as JSON. Our kernels' rows (the
    problem's source hash) must number `trials`; cuBLASLt's rows, timed by the same sweep where the
    library is present, are counted apart and checked for duplicates and losses the same way."""
    source = source_hash(PROBLEM)
    child = _child(db, trials, measure_timeout)
    deadline = time.monotonic() + 300
    while child.poll() is None and time.monotonic() < deadline:
        if finished_so_far(db, source) >= kill_after:
            break
        time.sleep(0.1)
    killed = child.poll() is None
    if killed:
        child.send_signal(signal.SIGKILL)
    child.wait()
    before = {(row[1], row[4]): row for row in _rows(db) if row[2] == "ok"}
    resumed = _child(db, trials, measure_timeout)
    resumed_code = resumed.wait(timeout=900)
    after = _rows(db)
    by_key = {(row[1], row[4]): row for row in after}
    ours = [row for row in after if row[4] == source]
    faults = []
    for fault in FAULTS:
        row = by_key.get((config_key(fault.config), source))
        recorded = row[2] if row else "missing"
        faults.append(
            {
                "kind": fault.kind,
                "injected": True,
                "recorded_as": recorded,
                "expected": fault.expected.value,
                "survived": recorded == fault.expected.value,
            }
        )
    kept = all(by_key.get(key) == row for key, row in before.items())
    return {
        "problem": str(PROBLEM),
        "sweep_killed_midway": killed,
        "rows_before_kill": sum(key[1] == source for key in before),
        "resumed_exit_code": resumed_code,
        "faults": faults,
        "rows_expected": trials,
        "rows_found": len(ours),
        "vendor_rows": len(after) - len(ours),
        "duplicates": len(after) - len(by_key),
        "completed_rows_kept": kept,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    gpus = local_gpus()
    if not gpus:
        print("error: the fault drill needs an NVIDIA GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = {"gpu": gpus[0].name, **drill(Path(tmp) / "drill.db", trials=args.trials)}
    path = write_json(report_path(args.out, "faults", gpus[0].name), report)
    for fault in report["faults"]:
        print(f"{fault['kind']:22} recorded as {fault['recorded_as']:14} survived={fault['survived']}")
    print(
        f"killed midway: {report['sweep_killed_midway']}, rows expected {report['rows_expected']}, "
        f"found {report['rows_found']} (and {report['vendor_rows']} of cuBLASLt), duplicates {report['duplicates']}, "
        f"kept {report['completed_rows_kept']}"
    )
    ok = all(f["survived"] for f in report["faults"]) and report["rows_found"] == report["rows_expected"]
    ok = ok and report["duplicates"] == 0 and report["completed_rows_kept"]
    print(f"wrote {path}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
