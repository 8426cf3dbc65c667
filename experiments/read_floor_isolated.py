"""The read floor in the low-bit benchmarks' isolated clock: how near copy bandwidth a kernel that only
reads a weight's bytes comes when each call is followed by an empty kernel, as bench_lowbit.py and
bench_lowbit8.py time ours (autotune/bench/harness.py: IsolatedClock). Every read-kernel variant of
autotune/measure/floor.py is timed on rotating buffers (L2 cold), isolated and back to back; the
fastest isolated one is the least time any GEMV reading those bytes can take in that clock. The sizes
are the packed weights of the 8-bit and int4 M = 1 shapes (codes and scales) and a few around them.
On the GPU machine:

    PYTHONPATH=$PWD python3 experiments/read_floor_isolated.py experiments/read_floor_isolated_<gpu>.json
"""

import functools
import json
import sys

import torch

from autotune.bench.compare import Bench
from autotune.bench.harness import IsolatedClock, rotation_copies
from autotune.measure.floor import VARIANTS, ReadKernel, ReadKernels, words_for

bench = Bench()
gpu = bench.launcher.gpu
copy_gbs = bench.copy_gbs()
clock = IsolatedClock(bench, 9)
kernels = ReadKernels(gpu, bench.kernels)
MB = 10**6
sizes = {
    "int4 4096x14336": 30.3 * MB,
    "int4 3584x18944": 35.1 * MB,
    "int4 28672x4096": 60.6 * MB,
    "int4 37888x3584": 70.1 * MB,
    "8-bit 4096x14336": 58.8 * MB,
    "8-bit 3584x18944": 67.9 * MB,
    "8-bit 28672x4096": 117.6 * MB,
    "8-bit 37888x3584": 135.9 * MB,
    "256 MB": 256 * MB,
}
out = torch.zeros(2, dtype=torch.int32, device="cuda")


def read_call(variant: ReadKernel, buffers: list[torch.Tensor], words: int, i: int) -> None:
    kernels.launch(variant, buffers[i % len(buffers)].data_ptr(), words, out.data_ptr())


def timed(name: str, nbytes: int) -> dict[str, object]:
    """The fastest read variant of `nbytes`, isolated and back to back, as a row."""
    words = words_for(nbytes)
    copies = rotation_copies(nbytes, gpu.l2_bytes)
    buffers = [torch.ones(words * 4, dtype=torch.int32, device="cuda") for _ in range(copies)]
    times = clock.time({v.name: functools.partial(read_call, v, buffers, words) for v in VARIANTS})
    best = min(VARIANTS, key=lambda v: times[f"{v.name}_us"])
    best_b2b = min(VARIANTS, key=lambda v: times[f"{v.name}_b2b_us"])
    us, b2b = times[f"{best.name}_us"], times[f"{best_b2b.name}_b2b_us"]
    return {
        "shape": name,
        "bytes": nbytes,
        "isolated_us": us,
        "isolated_kernel": best.describe(),
        "pct_of_copy": 100 * nbytes / us / 1e3 / copy_gbs,
        "b2b_us": b2b,
        "b2b_kernel": best_b2b.describe(),
        "b2b_pct_of_copy": 100 * nbytes / b2b / 1e3 / copy_gbs,
        "separator_us": times["separator_us"],
        "copies": copies,
    }


rows = []
for name, nbytes in sizes.items():
    rows.append(timed(name, int(nbytes)))
    print(json.dumps(rows[-1]), flush=True)
with open(sys.argv[1], "w") as handle:
    json.dump({"gpu": gpu.name, "copy_gbs": copy_gbs, "rows": rows}, handle, indent=1)
