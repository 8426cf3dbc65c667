"""Tuning-speed benchmark (GPU machine): how long each sampler takes to get within 2% of the best
config of a space, with the compile pool and with serial compilation.

The optimum is found by brute force: every valid point measured once. The full GEMV space has
~144,000 points per shape (~6,300 kernels), which would take hours, so this benchmark searches a
documented sub-space of ~1,700 points (BENCH_CHOICES below: the parameter values the tuned standard
shapes chose most) where brute force takes under a minute. Every compile starts from an empty cubin
cache, so compile time is counted.

    python scripts/bench_tuning.py --out results    # writes results/tuning_<gpu>.json
    python scripts/bench_tuning.py --spaces-only --out results   # only the brute force: each shape's
        # space with every config's time, as results/space_gemv_<m>x<n>_<gpu>.json.gz (search replays)
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.bench.harness import out_folder, read_json, report_path, run_script, write_progress, write_report
from autotune.build.compiler import CompileJob, CompilePool, CompileResult
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, slugify
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.measure.worker.client import Worker
from autotune.ops import gemv, source_hash
from autotune.tune.search import DEFAULT_SAMPLER, Budget, Measurer, Study
from autotune.tune.search import SAMPLERS as PRODUCT_SAMPLERS

BENCH_CHOICES = {
    "block": (64, 128, 256, 512),
    "lanes": (8, 32, 64, 128, 256, 512),
    "vec": (8,),
    "unroll": (1, 2, 4),
    "rows": (1, 2, 4),
    "x_smem": (0,),
    "policy": (0, 1),
    "split": (1, 4, 16),
    "persist": (0, 2),
}
SHAPES = [(4096, 8192), (1024, 1024), (256, 131072)]
SAMPLERS = (DEFAULT_SAMPLER, "tpe", "random", "grid")  # by default; --samplers takes any of the product's
MAX_TRIALS, MAX_SECONDS = 400, 60.0


def bench_space(problem: Problem) -> Space:
    # Parameters added to the GEMV space since this benchmark was fixed stay at their defaults.
    full = gemv.OP.space(problem)
    default = gemv.DEFAULT_CONFIG
    params = tuple(replace(p, choices=BENCH_CHOICES.get(p.name, (default[p.name],))) for p in full.params)
    return Space(tuple(Param(p.name, p.choices, p.compiled) for p in params), full.constraint)


class _Measurer(Measurer):
    def __init__(self, worker: Worker, gpu: GpuInfo, problem: Problem) -> None:
        self._worker, self._gpu, self._problem = worker, gpu, problem
        # Every measured config with its outcome and the seconds its compile and its measurement took:
        # a brute force's log is a replayable space (write_space).
        self.log: list[tuple[Config, Outcome, float, float]] = []

    def compile_job(self, config: Config) -> CompileJob:
        p = self._problem
        arch = gemv.OP.compile_arch(p, self._gpu.arch)
        return CompileJob(gemv.OP.kernel_name(p, config), gemv.OP.kernel_source(p, config), arch, source_hash(p))

    def crashes(self, config: Config) -> int:
        return 0

    def record_invalid(self, config: Config, reason: str) -> None:
        pass

    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        begin = time.monotonic()
        if compiled.cubin is None:
            outcome = Outcome(Status.COMPILE_ERROR, compiled.message)
        else:
            outcome = self._worker.measure(compiled.cubin, compiled.job.name, config)
        self.log.append((dict(config), outcome, compiled.seconds, time.monotonic() - begin))
        return outcome


def search(
    worker: Worker,
    gpu: GpuInfo,
    problem: Problem,
    sampler: str,
    budget: Budget,
    workers: int | None,
    seed: int,
    space_out: Path | None = None,
) -> tuple[float, int, float | None, list[list[float]]]:
    """(seconds, trials, best us, trace) of one search from a cold compile cache; with `space_out`,
    every config it measured is written there as a Kernel Tuner cache file (write_space)."""
    trace: list[list[float]] = []
    measurer = _Measurer(worker, gpu, problem)
    start = time.monotonic()

    def on_trial(_config: Config, _outcome: Outcome, result: Any) -> None:
        if result.best_us is not None:
            trace.append([round(time.monotonic() - start, 3), result.measured, result.best_us])

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as cache, CompilePool(workers, Path(cache)) as pool:
        study = Study(bench_space(problem), measurer, pool, sampler=sampler, seed=seed, on_trial=on_trial)
        result = study.run(budget)
    seconds = time.monotonic() - start
    if space_out is not None:
        write_space(space_out, gpu, problem, bench_space(problem), measurer.log)
    return seconds, result.measured, result.best_us, trace


_FAILED = {Status.COMPILE_ERROR: "CompilationFailedConfig"}  # Kernel Tuner's words for a failed config


def write_space(
    path: Path, gpu: GpuInfo, problem: Problem, space: Space, log: list[tuple[Config, Outcome, float, float]]
) -> None:
    """The measured configs as a Kernel Tuner cache file (scripts/search_replay.py replays it): a valid
    config's key holds its time in us, or a failure string; configs the constraints rule out are absent,
    as in Kernel Tuner's files. Each record also keeps its compile and measurement times in ms (with a cold
    compile cache and this machine's compile pool), which `bench_search_replay.py --compile-times` replays."""
    names = [p.name for p in space.params]
    cache = {
        ",".join(str(config[name]) for name in names): {
            "time": outcome.time_us if outcome.ok else _FAILED.get(outcome.status, "RuntimeFailedConfig"),
            "compile_time": round(compile_s * 1e3, 2),  # ms, as Kernel Tuner records them
            "benchmark_time": round(measure_s * 1e3, 2),
        }
        for config, outcome, compile_s, measure_s in log
    }
    data = {
        "device_name": gpu.name,
        "kernel_name": f"{problem.op} {problem.dtype} {problem.m}x{problem.n}",
        "objective": "time",
        "tune_params_keys": names,
        "tune_params": {p.name: list(p.choices) for p in space.params},
        # Configs that differ only in the other parameters run one cubin: a replay compiles it once.
        "compiled_params": [p.name for p in space.params if p.compiled],
        "cache": cache,
    }
    path.write_bytes(gzip.compress(json.dumps(data).encode()))


def write(folder: Path, gpu: GpuInfo, rows: list[dict[str, Any]], *, done: bool = False) -> Path:
    """The report (`done`), else the rows so far beside it: a run cut short never replaces a whole report."""
    report = {"gpu": gpu.name, "limits": {"trials": MAX_TRIALS, "seconds": MAX_SECONDS}, "rows": rows}
    path = report_path(folder, "tuning", gpu.name)
    return write_report(path, report) if done else write_progress(path, report)


def known_optimum(report: Path, m: int, n: int) -> tuple[int, float, float]:
    """(space size, optimum us, brute-force seconds) of a shape from an earlier report of this script."""
    try:
        for row in read_json(report)["rows"]:
            if (row["m"], row["n"]) == (m, n):
                return row["space_size"], row["optimum_us"], row["brute_force_seconds"]
    except AutotuneError as error:
        raise SystemExit(f"error: --optimum-from: {error}") from None
    except (KeyError, TypeError):
        raise SystemExit(f"error: --optimum-from: {report} is not a report of this script") from None
    raise SystemExit(f"error: --optimum-from: {report} has no row for {m}x{n}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--only", type=int, nargs="+", default=list(range(len(SHAPES))), help="indices into SHAPES")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=PRODUCT_SAMPLERS)
    parser.add_argument("--merge", type=Path, help="an earlier report whose other rows (shape, sampler) are kept")
    parser.add_argument(
        "--optimum-from",
        type=Path,
        help="take each shape's optimum from this earlier report instead of measuring the brute force again",
    )
    parser.add_argument("--serial-seconds", type=float, default=MAX_SECONDS, help="time limit of a serial search")
    parser.add_argument("--seed", type=int, default=1, help="the samplers' seed (repeat with others to see the spread)")
    parser.add_argument(
        "--workers", type=int, help="compile processes of the pooled searches (default: one per CPU core)"
    )
    parser.add_argument(
        "--spaces-only", action="store_true", help="the brute force alone, each shape's space written for replays"
    )
    args = parser.parse_args()
    rerun = {(*SHAPES[i], sampler) for i in args.only for sampler in args.samplers}
    out_folder(args.out)
    try:  # checked before the first search, not after hours of them
        earlier = read_json(args.merge)["rows"] if args.merge else []
        rows: list[dict[str, Any]] = [r for r in earlier if (r["m"], r["n"], r["sampler"]) not in rerun]
    except AutotuneError as error:
        print(f"error: --merge: {error}", file=sys.stderr)
        return 2
    except (KeyError, TypeError):
        print(f"error: --merge: {args.merge} is not a report of this script (rows of m, n, sampler)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with Worker() as worker:
        gpu = worker.hello()
        for m, n in (SHAPES[i] for i in args.only):
            problem = Problem("gemv", "float16", m, n)
            worker.setup(problem, seed=m + n)
            if args.optimum_from:
                size, optimum, seconds = known_optimum(args.optimum_from, m, n)
                print(f"{problem}: optimum {optimum:.2f} us over {size} points, from {args.optimum_from}", flush=True)
            else:
                size = bench_space(problem).size()
                space_file = args.out / f"space_{problem.op}_{m}x{n}_{slugify(gpu.name)}.json.gz"
                seconds, _, measured, _ = search(
                    worker, gpu, problem, "grid", Budget(size), args.workers, 0, space_file
                )
                assert measured is not None
                optimum = measured
                print(f"{problem}: brute force over {size} points in {seconds:.0f} s, optimum {optimum:.2f} us")
                print(f"  wrote {space_file}", flush=True)
                if args.spaces_only:
                    continue
            target = Budget(MAX_TRIALS, MAX_SECONDS, target_us=1.02 * optimum)
            serial_target = Budget(MAX_TRIALS, args.serial_seconds, target_us=1.02 * optimum)
            for sampler in args.samplers:
                t, trials, best, trace = search(worker, gpu, problem, sampler, target, args.workers, args.seed)
                serial, _, serial_best, _ = search(worker, gpu, problem, sampler, serial_target, 1, args.seed)
                reached = best is not None and best <= 1.02 * optimum
                serial_reached = serial_best is not None and serial_best <= 1.02 * optimum
                rows.append(
                    {
                        "op": "hgemv",
                        "dtype": "float16",
                        "m": m,
                        "n": n,
                        "sampler": sampler,
                        "space_size": size,
                        "optimum_us": optimum,
                        "optimum_from": str(args.optimum_from) if args.optimum_from else None,
                        "brute_force_seconds": seconds,
                        "reached": reached,
                        "best_us": best,
                        "seconds_to_2pct": t if reached else None,
                        "trials_to_2pct": trials if reached else None,
                        # None when the serial search hit its time limit first: then it took longer
                        # than serial_seconds_run, which is a bound, not a time to 2%.
                        "serial_seconds_to_2pct": serial if serial_reached else None,
                        "serial_seconds_run": serial,
                        "serial_reached": serial_reached,
                        "trace": trace,
                    }
                )
                serial_text = f"{serial:5.1f} s" if serial_reached else f"not within {serial:5.1f} s"
                print(
                    f"  {sampler:6} {'reached' if reached else 'MISSED'} 2% in {t:5.1f} s, {trials:3} trials"
                    f"; serial compile {serial_text}",
                    flush=True,
                )
                write(args.out, gpu, rows)  # after every search: a run cut short keeps what it measured
    if args.spaces_only:  # the spaces alone: the tuning report is left as it is
        return 0
    print(f"wrote {write(args.out, gpu, rows, done=True)}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_tuning")
