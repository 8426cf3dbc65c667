"""Why the ws GEMM family trails cuBLAS most where N is large (float16 4096x28672x4096 at 0.90x torch.mm,
where 4096^3 runs 0.97x): tile orders (`group`: tile rows walked column by column) with and without
clusters of two on the M = 4096 prefill set, beside torch.mm, through the launch path
(experiments/ws_stream_k.py's `measure`: checked against float64, timed in turns). With --profile, the
named configs and torch.mm run a few times each for Nsight Compute instead. Run on an H200 with torch:

    python experiments/ws_tile_order.py [--out FILE] [--squares] [--groups 1 4 8 16] [--shapes 2 6 1]
    ncu --set full -k regex:"gemm|nvjet" python experiments/ws_tile_order.py --profile 128x256_s3_g8_c1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["AUTOTUNE_GEMM_FAMILY"] = "ws"

import torch
from ws_stream_k import measure

from autotune.core.problem import Problem
from autotune.ops import gemm as gemm_op
from autotune.runtime.launcher import Runtime
from autotune.select.choose import Choice

# (M, N, K, dtype, B stored N x K): the M = 4096 prefill set (autotune/ops/gemm/llm_shapes.txt's N K
# pairs), the two widest in bfloat16 too, and 4096^3.
PREFILL = gemm_op.llm_nk_pairs()
PROBLEMS = [(4096, n, k, "float16", True) for n, k in PREFILL] + [
    (4096, 28672, 4096, "bfloat16", True),
    (4096, 37888, 3584, "bfloat16", True),
]
PROFILED = (4096, 28672, 4096, "float16", True)
# --squares: 8192^3 (64 tile rows of 128) in both dtypes and layouts, for groups of 64 (a whole column).
SQUARES = [(8192, 8192, 8192, d, t) for d in ("float16", "bfloat16") for t in (True, False)]


def configs(groups: tuple[int, ...] = (8, 16, 32)) -> dict[str, dict[str, int]]:
    """128 x 256 tiles (3 stages, the most that fit beside C's staging) in groups of `groups` tile rows,
    alone and in clusters of two; 128 x 128 with 6 stages in groups of 16 and 32."""
    out = {}
    for group in groups:
        for cluster in (1, 2):
            out[f"128x256_s3_g{group}_c{cluster}"] = dict(bm=128, bn=256, stages=3, group=group, cluster=cluster, sk=0)
    for group in (16, 32):
        out[f"128x128_s6_g{group}_c1"] = dict(bm=128, bn=128, stages=6, group=group, cluster=1, sk=0)
    return out


def profile(names: list[str]) -> None:
    """Each named config and torch.mm on float16 4096x28672x4096, 6 calls each."""
    m, n, k, dtype_name, trans = PROFILED
    problem = Problem("gemm", dtype_name, m, n, k, trans=trans)
    dtype = getattr(torch, dtype_name)
    A = torch.empty(m, k, device="cuda", dtype=dtype).uniform_(-1, 1)
    B = torch.empty(n, k, device="cuda", dtype=dtype).uniform_(-1, 1).t()
    C = torch.empty(m, n, device="cuda", dtype=dtype)
    chosen = configs((1, 4, 8, 16, 32, 64))
    for name in names:
        config = chosen[name]
        runtime = Runtime(lambda p, device, db, config=config: Choice(p, device.gpu.name, config, "measured"))
        for _ in range(6):
            runtime.gemm(A, B, C)
        print(problem, name, flush=True)
    for _ in range(6):
        torch.mm(A, B, out=C)
    torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("ws_tile_order.jsonl"))
    parser.add_argument("--profile", nargs="*", help="config names to run for Nsight Compute")
    parser.add_argument("--squares", action="store_true", help="8192^3, groups of 16, 32 and 64")
    parser.add_argument("--groups", type=int, nargs="+", help="the 128 x 256 tiles' groups (default 8 16 32)")
    parser.add_argument("--shapes", type=int, nargs="+", help="only these problems (indices into the set)")
    args = parser.parse_args()
    if args.profile is not None:
        profile(args.profile)
        return 0
    shapes = SQUARES if args.squares else PROBLEMS
    shapes = [shapes[i] for i in args.shapes] if args.shapes else shapes
    problems = [Problem("gemm", d, m, n, k, trans=t) for m, n, k, d, t in shapes]
    groups = tuple(args.groups) if args.groups else (16, 32, 64) if args.squares else (8, 16, 32)
    measure(problems, configs(groups), args.out, rounds=6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
