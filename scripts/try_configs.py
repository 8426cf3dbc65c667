"""Time hand-picked configs of one problem beside cuBLAS, on this machine's GPU: for trying a kernel
idea before a sweep. Configs are a base (the selected one, or --base JSON) with parameters varied
over a grid; those the space rules out are listed with the reason and skipped. Every config is
compiled first (in parallel, cached), then timed like `autotune bench` on the same buffers.

    python scripts/try_configs.py --op hgemv --m 131072 --n 256 --vary lanes=16,32 --vary rows=4,8
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace

from autotune import api, ops
from autotune.bench.compare import Bench
from autotune.build.compiler import CompilePool
from autotune.select.choose import Choice


def _grid(base: dict[str, int], vary: list[str]) -> list[dict[str, int]]:
    names, values = [], []
    for item in vary:
        name, _, listed = item.partition("=")
        names.append(name)
        values.append([int(v) for v in listed.split(",")])
    return [{**base, **dict(zip(names, combo, strict=True))} for combo in itertools.product(*values)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="hgemv")
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int)
    parser.add_argument("--trans", action="store_true")
    parser.add_argument("--db")
    parser.add_argument("--base", help="config JSON to start from (default: the selected config)")
    parser.add_argument("--vary", action="append", default=[], help="name=v1,v2,... (repeatable)")
    args = parser.parse_args()

    bench = Bench()
    gpu = bench.launcher.gpu
    selected = api.best(args.op, args.m, args.n, args.k, trans=args.trans, gpu=gpu.name, db=args.db, vendor=False)
    problem = selected.problem
    op = ops.for_problem(problem)
    base = json.loads(args.base) if args.base else dict(selected.config)
    space = op.space(problem)
    configs = []
    for config in _grid(base, args.vary):
        reason = space.check(config)
        if reason:
            print(f"skip {json.dumps(config)}: {reason}")
        else:
            configs.append(config)
    with CompilePool() as pool:
        for future in [pool.submit(ops.compile_job(problem, c, gpu.arch)) for c in configs]:
            future.result()
    print(f"{problem} on {gpu.name}: selected {selected.source} {json.dumps(selected.config)}")
    for config in configs:
        choice: Choice = replace(selected, config=config, source="tried")
        row = bench.compare_gemm(choice) if problem.op == "gemm" else bench.compare(choice)
        ratio = row.cublas_us / row.ours_us
        print(
            f"{row.ours_us:9.2f} us  cuBLAS {row.cublas_us:9.2f}  cuBLAS/ours {ratio:5.3f}  "
            f"err {row.max_error:.1e}  {json.dumps(config)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
