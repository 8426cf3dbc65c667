"""How near copy bandwidth a plain device-to-device copy of a GEMV's traffic comes in the benchmarks'
isolated clock (bench_lowbit8's): torch copy_ of B/2 bytes (B bytes read plus written), L2 cold by
rotation, for the traffic of the 8-bit M = 1 shapes and a few sizes around them. On the GPU machine:

    PYTHONPATH=$PWD python3 experiments/copy_isolated.py experiments/copy_isolated_<gpu>.json
"""
import json
import sys
from pathlib import Path

import torch

from autotune.bench.compare import Bench
from autotune.bench.harness import IsolatedClock, rotation_copies

bench = Bench()
gpu = bench.launcher.gpu
copy_gbs = bench.copy_gbs()
clock = IsolatedClock(bench, 15)
sizes = {"4096x4096": 4096 * 4096, "6144x4096": 6144 * 4096, "4096x14336": 4096 * 14336,
         "3584x18944": 3584 * 18944, "28672x4096": 28672 * 4096, "37888x3584": 37888 * 3584,
         "256MB": 256 * 2**20, "1GB": 2**30}
rows = []
for name, traffic in sizes.items():
    half = traffic // 2
    copies = rotation_copies(traffic, gpu.l2_bytes)
    src = [torch.ones(half, dtype=torch.uint8, device="cuda") for _ in range(copies)]
    dst = [torch.empty_like(s) for s in src]
    times = clock.time({"copy": lambda i, src=src, dst=dst, copies=copies: dst[i % copies].copy_(src[i % copies])})
    us = times["copy_us"]
    gbs = traffic / us / 1e3
    row = {"shape": name, "bytes": traffic, "copy_us": us, "gbs": gbs, "pct_of_copy": 100 * gbs / copy_gbs,
           "separator_us": times["separator_us"], "copies": copies}
    rows.append(row)
    print(json.dumps(row), flush=True)
    del src, dst
Path(sys.argv[1]).write_text(json.dumps({"gpu": gpu.name, "copy_gbs": copy_gbs, "rows": rows}, indent=1))
