"""Benchmark: what autotune runs on GEMV shapes that no tuned config fits, beside cuBLAS, on this GPU.

A reduction length that is no multiple of the 16-byte vector rules out every config the shipped
records hold. For each such shape this times, in one run with bench_gemv.py's method (same buffers,
samples in turns with cuBLAS, errors against float64), the candidates a selector could answer with:
  fitted   the nearest tuned shape's config moved onto this shape by Space.fit (what autotune answers)
  fitted_u8  the same with unroll=8: narrower loads leave fewer bytes in flight (non-transposed only)
  valid    the nearest tuned shape whose config runs here as it is (the rule before Space.fit), where
           one exists and differs from `fitted`
  default  the safe default config (what autotune answered before where no tuned config was valid)
  tuned    with --trials N: the best config of an N-trial sweep of this very shape
and writes results/untuned_<gpu>.json after every row, so that a cut-off run keeps what it measured.

    python scripts/bench_untuned.py --out results [--trials 16] [--db PATH]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from autotune import api, ops
from autotune.bench.compare import Bench
from autotune.bench.harness import MAX_ERROR, report_path, run_script, write_json
from autotune.build.compiler import CompilePool
from autotune.core.problem import Problem
from autotune.ops import make_problem, source_hash
from autotune.select.choose import Choice, nearest

# (dtype, M, N, trans): odd N, N a multiple of 4 but not 8 (16-bit), of 2 but not 4 (float32), small
# and large matrices, and the transposed layout.
MISFITS = [
    ("float16", 5000, 7001, False),
    ("bfloat16", 4096, 4100, False),
    ("float16", 4096, 4095, False),
    ("float32", 4096, 4098, False),
    ("float16", 1000, 1002, False),
    ("float32", 2048, 2047, False),
    ("float16", 5000, 7001, True),
]


def nearest_valid(problem: Problem, gpu: str, db: str | None) -> Choice | None:
    """The selector's rule before Space.fit: the nearest tuned shape whose config runs here as it is."""
    rows = api.store(db).tuned(gpu, problem.op, problem.dtype, source_hash(problem), trans=problem.trans)
    check = ops.for_problem(problem).space(problem).check
    for row in nearest(rows, problem.shape):
        if check(row.config) is None:
            return Choice(problem, gpu, dict(row.config), "valid", row.time_us, row.gbs, row.problem.shape)
    return None


def candidates(problem: Problem, gpu: str, db: str | None) -> dict[str, Choice]:
    selected = api.best(
        "gemv", problem.m, problem.n, trans=problem.trans, dtype=problem.dtype, gpu=gpu, db=db, vendor=False
    )
    found = {"fitted" if selected.source == "estimate" else selected.source: selected}
    valid = nearest_valid(problem, gpu, db)
    if valid is not None and valid.config != selected.config:
        found["valid"] = valid
    # Narrower loads leave fewer bytes in flight per thread: the same config with the most steps
    # a thread may unroll, to see whether fitting should raise it too.
    if not problem.trans and selected.source == "estimate" and selected.config["unroll"] < 8:
        deeper = {**selected.config, "unroll": 8}
        if ops.for_problem(problem).space(problem).check(deeper) is None:
            found["fitted_u8"] = replace(selected, config=deeper, source="fitted_u8")
    default = ops.for_problem(problem).default_config(problem)
    if default != selected.config:
        found["default"] = replace(selected, config=default, source="default", time_us=None, from_shape=None)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database (default: AUTOTUNE_DB or the per-user one; shipped records imported)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for untuned_<gpu>.json")
    parser.add_argument(
        "--trials", type=int, default=0, help="also sweep each shape this many trials and time its best"
    )
    args = parser.parse_args()

    bench = Bench()
    gpu = bench.launcher.gpu.name
    problems = [make_problem("gemv", dtype, m, n, None, trans) for dtype, m, n, trans in MISFITS]
    plans = {problem: candidates(problem, gpu, args.db) for problem in problems}
    if args.trials:
        for problem in problems:
            api.sweep(
                "gemv", problem.m, problem.n, trans=problem.trans, dtype=problem.dtype, trials=args.trials, db=args.db
            )
            tuned = api.best(
                "gemv",
                problem.m,
                problem.n,
                trans=problem.trans,
                dtype=problem.dtype,
                gpu=gpu,
                db=args.db,
                vendor=False,
            )
            plans[problem]["tuned"] = replace(tuned, source="tuned")
    with CompilePool() as pool:  # every kernel built up front, in parallel
        jobs = [
            ops.compile_job(c.problem, c.config, bench.launcher.gpu.arch) for p in plans.values() for c in p.values()
        ]
        for future in [pool.submit(job) for job in jobs]:
            future.result()

    copy_gbs = bench.copy_gbs()
    print(f"{gpu}: device-to-device copy {copy_gbs:.0f} GB/s", flush=True)
    rows: list[dict[str, Any]] = []
    path = report_path(args.out, "untuned", gpu)
    args.out.mkdir(parents=True, exist_ok=True)
    wrong = 0
    for problem, plan in plans.items():
        for name, choice in plan.items():
            row = bench.compare(choice)
            correct = row.max_error <= MAX_ERROR  # False for NaN too
            wrong += not correct
            row.pct_copy = 100.0 * row.ours_gbs / copy_gbs
            rows.append(
                {
                    "problem": str(problem),
                    "trans": problem.trans,
                    "candidate": name,
                    "correct": correct,
                    "from_shape": choice.from_shape,
                    **asdict(row),
                }
            )
            print(
                f"{problem!s:34} {name:8} {row.ours_us:9.2f} us  cuBLAS {row.cublas_us:9.2f}  "
                f"cuBLAS/ours {row.speedup:5.2f}  {row.pct_copy:5.1f}% of copy  "
                f"err {row.max_error:.1e}{'' if correct else ' WRONG'}  {json.dumps(row.config)}",
                flush=True,
            )
            write_json(path, {"gpu": gpu, "copy_gbs": copy_gbs, "rows": rows})
    print(f"wrote {path}" + (f"; {wrong} results WRONG (error over {MAX_ERROR})" if wrong else ""))
    return 1 if wrong else 0


if __name__ == "__main__":
    run_script(main, "bench_untuned")
