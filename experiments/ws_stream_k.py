"""The ws GEMM family's stream-K (sk=1) beside the same configs data-parallel (sk=0) and torch.mm, each
config launched through the launch path (autotune's Runtime, the config given, AUTOTUNE_GEMM_FAMILY=ws),
timed in turns by CUDA events (autotune.bench.harness.steps_in_turns_us) on the same operands, each
result checked against float64 first. Prints one line a problem and writes JSON lines to --out. Run on
an H200 with torch:

    python experiments/ws_stream_k.py [--out FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ["AUTOTUNE_GEMM_FAMILY"] = "ws"

import torch

from autotune import ops
from autotune.bench.harness import steps_in_turns_us
from autotune.build.shipped import find_kernel
from autotune.core.problem import Problem
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice

TILES = {
    "128x256": dict(bm=128, bn=256, stages=3, group=8),
    "128x128": dict(bm=128, bn=128, stages=6, group=16),
    "256x128": dict(bm=256, bn=128, stages=3, group=8),
}
# (M, N, K, dtype, B stored N x K): the squares and the M = 4096 prefill shapes with the worst last wave
# in 128 x 256 tiles on 132 SMs (4608 columns: 4.36 waves; 3584: 3.39).
PROBLEMS = [
    (4096, 4096, 4096, "float16", True),
    (4096, 4096, 4096, "float16", False),
    (4096, 4096, 4096, "bfloat16", True),
    (8192, 8192, 8192, "float16", True),
    (8192, 8192, 8192, "bfloat16", False),
    (4096, 4608, 3584, "float16", True),
    (4096, 3584, 3584, "float16", True),
    (4096, 3584, 18944, "float16", True),
    (4096, 6144, 4096, "float16", True),
]


def configs(quick: bool, group: int | None = None) -> dict[str, dict[str, int]]:
    """Each tile of TILES with and without stream-K, and 128 x 256 in clusters of two; `group`: every
    config's tile order, where given (TILES's otherwise)."""
    out = {}
    order = {} if group is None else {"group": group}
    for name, tile in TILES.items():
        if quick and name != "128x256":
            continue
        for sk in (0, 1):
            out[f"{name}_sk{sk}"] = {**tile, **order, "cluster": 1, "sk": sk}
    out["128x256_c2"] = {**TILES["128x256"], **order, "cluster": 2, "sk": 0}
    return out


def measure(problems: list[Problem], chosen: dict[str, dict[str, int]], out: Path, rounds: int = 10) -> None:
    """Each config of `chosen` the problem's space holds, through the launch path, beside torch.mm: checked
    against float64 (C NaN-filled first, a second call on the scratch the first left), then timed in turns;
    a JSON line a problem appended to `out`, one line printed."""
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    jobs = [
        ops.compile_job(p, c, arch)
        for p in problems
        for c in chosen.values()
        if ops.for_problem(p).space(p).check(c) is None
    ]
    with ThreadPoolExecutor(8) as pool:  # nvcc in parallel into the kernel cache
        list(pool.map(find_kernel, jobs))
    for problem in problems:
        m, n, k = problem.m, problem.n, problem.k
        dtype = getattr(torch, problem.dtype)
        A = torch.empty(m, k, device="cuda", dtype=dtype).uniform_(-1, 1)
        W = torch.empty(n, k, device="cuda", dtype=dtype).uniform_(-1, 1)
        B = W.t() if problem.trans else W.t().contiguous()
        want = A.double() @ B.double()
        scale = (A.double().abs() @ B.double().abs()).max().item()
        runs, errors = {}, {}
        runs["torch.mm"] = lambda A=A, B=B, C=torch.empty(m, n, device="cuda", dtype=dtype): torch.mm(A, B, out=C)
        space = ops.for_problem(problem).space(problem)
        for name, config in chosen.items():
            if space.check(config) is not None:
                continue
            runtime = Runtime(lambda p, device, db, config=config: Choice(p, device.gpu.name, config, "measured"))
            C = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            for _ in range(2):  # the second call on the scratch the first left
                C.fill_(float("nan"))
                runtime.gemm(A, B, C)
            torch.cuda.synchronize()
            errors[name] = (C.double() - want).abs().max().item() / scale
            runs[name] = lambda runtime=runtime, A=A, B=B, C=C: runtime.gemm(A, B, C)
        del want
        steps = max(20, int(4e12 / (2 * m * n * k)) * 20)
        times = steps_in_turns_us(torch, runs, steps=min(steps, 400), rounds=rounds)
        row = {
            "problem": str(problem),
            "configs": {name: chosen[name] for name in runs if name in chosen},
            "times_us": times,
            "tflops": {name: 2 * m * n * k / us / 1e6 for name, us in times.items()},
            "vs_torch": {name: times["torch.mm"] / us for name, us in times.items()},
            "max_error": errors,
        }
        with out.open("a") as file:
            file.write(json.dumps(row) + "\n")
        ratios = " ".join(f"{name} {times[name]:.1f}us {row['vs_torch'][name]:.3f}x" for name in runs)
        bad = [name for name, e in errors.items() if not e < 1e-2]
        print(f"{problem}: {ratios}" + (f" WRONG {bad}" if bad else ""), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ws_stream_k.jsonl"))
    parser.add_argument("--quick", action="store_true", help="128 x 256 tiles only")
    parser.add_argument("--group", type=int, help="every config's tile order (default: TILES's)")
    parser.add_argument("--shapes", type=int, help="the first N problems of PROBLEMS only")
    args = parser.parse_args()
    problems = [Problem("gemm", d, m, n, k, trans=t) for m, n, k, d, t in PROBLEMS[: args.shapes]]
    measure(problems, configs(args.quick, args.group), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
