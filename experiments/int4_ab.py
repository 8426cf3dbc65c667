"""Time the int4 op's configs with one tree's kernels, for A/B runs of a kernel edit on one GPU.

A tree is a copy of autotune/ and kernels/ (`git archive REV autotune kernels | tar -x -C DIR`); run
this once per tree, alternating, each with PYTHONPATH at its tree, and compare the medians:

    PYTHONPATH=DIR python experiments/int4_ab.py old configs.json >> ab.jsonl
    PYTHONPATH=. python experiments/int4_ab.py new configs.json >> ab.jsonl

configs.json maps "DTYPE VARIANT M N K" to a config (the shipped picks, say, from `autotune.api.best`).
With --wgmma only the wgmma picks are timed, plus the wgmma kernel's first seeds on float16 g128 at M
32 and 64 where the pick is the mma.sync kernel. Every config runs once against float64 (NaN-poisoned
out), then 25 times, each call after a 512 MB read that leaves L2 holding other, clean lines: one JSON
line a config with the median time in microseconds (CUDA events) and the relative error.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

import autotune
from autotune import ops
from autotune.build.compiler import CompilePool
from autotune.ops import qgemm
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice


def _items(picks: dict[str, dict[str, int]], wgmma_only: bool) -> list[tuple[ops.Problem, dict[str, int], str]]:
    items = []
    for key, config in picks.items():
        dtype, variant, m, n, k = key.split()
        problem = ops.make_problem("qgemm", dtype, int(m), int(n), int(k), variant=variant)
        if not wgmma_only or config.get("wgmma", 0):
            items.append((problem, config, "pick"))
        elif dtype == "float16" and variant == "g128" and problem.m >= 32 and qgemm.wgmma_serves(problem):
            for seed in qgemm._WGMMA_SEEDS[:4]:
                c = {**qgemm._WGMMA_PINNED, **seed, "mt": seed["mt"] if problem.m > 32 else min(seed["mt"], 4)}
                if qgemm.OP.space(problem).check(c) is None:
                    items.append((problem, c, "seed"))
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", help="a label for this tree's rows")
    parser.add_argument("configs", help="JSON: 'DTYPE VARIANT M N K' -> config")
    parser.add_argument("--wgmma", action="store_true", help="the wgmma picks and seeds only")
    args = parser.parse_args()
    items = _items(json.loads(Path(args.configs).read_text()), args.wgmma)
    with CompilePool() as pool:
        for future in [pool.submit(ops.compile_job(p, c, "sm_90")) for p, c, _ in items]:
            result = future.result()
            assert result.ok, result.message[-2000:]
    flush = torch.zeros(128 * 2**20, dtype=torch.float32, device="cuda")
    weights: dict[tuple[int, int, str, str], tuple[object, torch.Tensor]] = {}
    for problem, config, what in items:
        torch.manual_seed(problem.n)
        dtype = getattr(torch, problem.dtype)
        key = (problem.n, problem.k, problem.dtype, problem.variant)
        if key not in weights:
            weights.clear()
            qw = autotune.quantize(
                torch.randn(problem.n, problem.k, device="cuda", dtype=dtype),
                "int4",
                group=128,
                sym=problem.variant == "g128",
            )
            weights[key] = (qw, qw.dequantize(torch.float32).double())
        qw, deq = weights[key]
        runtime = Runtime(lambda p, device, db, c=config: Choice(p, device.gpu.name, c, "measured"))
        x = torch.randn(problem.m, problem.k, device="cuda", dtype=dtype)
        out = torch.full((problem.m, problem.n), float("nan"), device="cuda", dtype=dtype)
        runtime.call(qgemm.OP, x, qw.qweight, qw.scales, qw.zeros, out=out)
        want = x.double() @ deq.T
        err = float((out.double() - want).abs().max() / want.abs().max())
        times = []
        for _ in range(25):
            flush.sum()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            runtime.call(qgemm.OP, x, qw.qweight, qw.scales, qw.zeros, out=out)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        name = f"{problem.dtype} {problem.variant} {problem.m} {problem.n} {problem.k}"
        row = dict(tree=args.tree, key=name, what=what, us=round(statistics.median(times), 2), err=err, config=config)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
