"""cuBLAS (torch) and our tuned kernels on the shapes where we trail, one after the other, for Nsight
Compute to compare (kernel names, grids, clusters, registers, DRAM throughput). `skinny` (the
default) runs the skinny GEMM shapes, `gemv` the usual-layout GEMV ones. On the GPU machine, with the
shipped records in the database:

    ncu --clock-control none --launch-count 60 --metrics gpu__time_duration.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,\
launch__registers_per_thread,launch__cluster_dim_x,launch__shared_mem_per_block_dynamic \
        python3 scripts/profile_vs_cublas.py [skinny|gemv]

docs/findings.md states what one such run on the H200 showed for the skinny GEMM at 14336^2.
"""

from __future__ import annotations

import sys

try:
    import torch
except ImportError:  # a GPU machine's benchmark: one line where torch is missing, not a traceback
    sys.exit("profile_vs_cublas: needs torch with CUDA (pip install torch), and a GPU to run on")

import autotune

GEMV_SHAPES = [(131072, 256), (256, 131072), (4096, 8192), (2048, 2048)]


def gemv() -> None:
    for m, n in GEMV_SHAPES:
        a = torch.rand(m, n, device="cuda", dtype=torch.float16) - 0.5
        x = torch.rand(n, device="cuda", dtype=torch.float16) - 0.5
        for _ in range(3):
            torch.mv(a, x)
            autotune.gemv(a, x)
        torch.cuda.synchronize()


def skinny() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    for m, n in [(16, 14336), (2, 14336), (16, 4096)]:
        a = torch.rand(m, n, device="cuda", dtype=torch.float16) - 0.5
        b = torch.rand(n, n, device="cuda", dtype=torch.float16) - 0.5
        for _ in range(3):
            torch.mm(a, b)
            autotune.gemm(a, b)
        torch.cuda.synchronize()
    x = torch.rand(2048, device="cuda", dtype=torch.float16)
    A = torch.rand(2048, 2048, device="cuda", dtype=torch.float16)
    for _ in range(3):
        torch.mv(A.t(), x)
        autotune.gemv(A, x, trans=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"skinny": skinny, "gemv": gemv}[sys.argv[1] if len(sys.argv) > 1 else "skinny"]()
