"""Time series of one GEMM problem's configs (and cuBLAS) on this machine's GPU: each config alone
after a rest, then all in turns, every sample printed. Shows how clocks settle under sustained load
and whether two configs rank the same from rest as in steady use (worker/timing.py's warm-up).

    python scripts/clock_drift.py --m 8192 --n 8192 --k 8192 \
        --config '{"bm":256,"bn":128,"bk":32,"wgs":2,"stages":7,"swizzle":8,"layout":0}' \
        --config '{"bm":256,"bn":128,"bk":64,"wgs":2,"stages":4,"swizzle":8,"layout":0}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from autotune import api, ops
from autotune.bench.compare import Bench
from autotune.build.compiler import CompilePool
from autotune.runtime.operands import describe

REST_S = 3.0  # idle seconds before each series: long enough for the clocks to recover
CALLS = 8  # calls a sample (about 17 ms of hgemm 8192^3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--config", action="append", required=True, help="config JSON (repeatable)")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    bench = Bench()
    torch, gpu = bench.torch, bench.launcher.gpu
    selected = api.best("gemm", args.m, args.n, args.k, dtype=args.dtype, gpu=gpu.name, vendor=False)
    problem = selected.problem
    configs = [json.loads(c) for c in args.config]
    with CompilePool() as pool:
        for future in [pool.submit(ops.compile_job(problem, c, gpu.arch)) for c in configs]:
            future.result()
    kind = getattr(torch, args.dtype)
    a = torch.rand(args.m, args.k, device="cuda", dtype=kind) * 2 - 1
    b = torch.rand(args.k, args.n, device="cuda", dtype=kind) * 2 - 1
    c = torch.empty(args.m, args.n, device="cuda", dtype=kind)
    da, db, dc = describe(a, "A"), describe(b, "B"), describe(c, "C")

    def ours(config: dict[str, int]) -> Callable[[int], None]:
        choice = replace(selected, config=config)
        return lambda _i: bench.launcher.gemm(choice, da, db, dc, 1.0, 0.0)

    launchers = [ours(config) for config in configs]
    names = [json.dumps(config) for config in configs] + ["cuBLAS"]
    launchers.append(lambda _i: torch.mm(a, b, out=c))
    # Raw samples of CALLS calls each, no warm-up (Timer.measure would hide the first, boosted ones).
    print(f"{problem} on {gpu.name}: us per call, samples of {CALLS} calls in order")
    for name, launch in zip(names, launchers, strict=True):
        time.sleep(REST_S)
        samples = [bench.timer.per_call_us(launch, CALLS) for _ in range(args.reps)]
        print(f"alone after rest  {' '.join(f'{s:7.0f}' for s in samples)}  {name}", flush=True)
    time.sleep(REST_S)
    turns: list[list[float]] = [[] for _ in launchers]
    for _ in range(args.reps):
        for launch, samples in zip(launchers, turns, strict=True):
            samples.append(bench.timer.per_call_us(launch, CALLS))
    for name, samples in zip(names, turns, strict=True):
        print(f"in turns          {' '.join(f'{s:7.0f}' for s in samples)}  {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
