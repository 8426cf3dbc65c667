"""Does the tuning worker time a config as the launch path runs it? For a few shipped problems, their
stored best config timed (1) in the worker, several fresh setups in a row, each after a different
problem, and (2) through the launch path callers use (autotune/bench's ChoiceLauncher, the same Timer),
in the same call on the same GPU. Prints one line per measurement and a summary per problem.

    PYTHONPATH=$PWD python experiments/worker_vs_launch_path.py [--rounds 4]

The split-K GEMVs of few rows (hgemv 8x131072, 2x65536: 3-7 us, latency-bound) are the ones
scripts/retime_shipped.py saw 5% slower in the worker than the older worker and the launch path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from autotune import api, ops
from autotune.bench.compare import Bench
from autotune.build.compiler import CompilePool
from autotune.core.problem import Problem
from autotune.measure.worker.client import Worker

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = [("float16", 8, 131072), ("float16", 2, 65536), ("float16", 4096, 8192)]
OTHER = Problem("gemv", "float16", 8192, 8192)  # set up in between: a big problem's buffers first


def stored_best(dtype: str, m: int, n: int) -> dict[str, int]:
    best: tuple[float, dict[str, int]] | None = None
    for text in (ROOT / "db" / "records" / "nvidia-h200.jsonl").read_text().splitlines():
        line = json.loads(text)
        if line.get("kind") != "trial" or line.get("op") != "gemv" or line.get("time_us") is None:
            continue
        if (line["dtype"], line["m"], line["n"], line.get("trans", False)) != (dtype, m, n, False):
            continue
        if best is None or line["time_us"] < best[0]:
            best = (line["time_us"], line["config"])
    assert best is not None, (dtype, m, n)
    return best[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with Worker() as worker, CompilePool() as pool:
        gpu = worker.hello()
        for dtype, m, n in PROBLEMS:
            problem = ops.make_problem("gemv", dtype, m, n, None, False)
            config = stored_best(dtype, m, n)
            compiled = pool.submit(ops.compile_job(problem, config, gpu.arch)).result()
            assert compiled.cubin is not None
            times = results.setdefault(
                str(problem), {"worker": [], "worker after a big problem": [], "launch path": []}
            )
            for round_ in range(args.rounds):
                worker.setup(problem, seed=round_)
                outcome = worker.measure(compiled.cubin, compiled.job.name, config)
                times["worker"].append(outcome.time_us or float("nan"))
                print(f"{problem} worker setup {round_}: {outcome.time_us:.2f} us ({outcome.sm_mhz} MHz)", flush=True)
                worker.setup(OTHER, seed=round_)
                worker.setup(problem, seed=round_)
                outcome = worker.measure(compiled.cubin, compiled.job.name, config)
                times["worker after a big problem"].append(outcome.time_us or float("nan"))
                print(f"{problem} worker after {OTHER}: {outcome.time_us:.2f} us", flush=True)
    # The launch path in this process, after the worker has gone (one process on the GPU at a time).
    bench = Bench()
    for dtype, m, n in PROBLEMS:
        choice = api.best("gemv", m, n, dtype=dtype, gpu=bench.launcher.gpu.name, vendor=False)
        problem = str(choice.problem)
        for round_ in range(args.rounds):
            row = bench.compare(choice)
            results[problem]["launch path"].append(row.ours_us)
            print(f"{problem} launch path {round_}: {row.ours_us:.2f} us (config {choice.config})", flush=True)
    for problem, kinds in results.items():
        summary = ", ".join(
            f"{kind} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for kind, v in kinds.items()
        )
        print(f"{problem}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
