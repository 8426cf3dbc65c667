"""Which kernels cuBLAS runs for the transposed GEMV y = Aᵀx (A row-major M x N, float16), and with what
grid: torch.mv(A.t(), x) under torch.profiler, its trace's kernel events (name, grid, block, registers,
shared memory, duration) printed a line each. The shapes are those where the narrow family trails cuBLAS
or its read floor (docs/findings.md).

    python3 experiments/cublas_trans_kernels.py > experiments/cublas_trans_kernels_<gpu>.txt
"""

import json
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

SHAPES = [(2304, 9216), (1536, 8960), (4096, 11008), (4096, 4096), (8192, 4096), (28672, 4096), (131072, 256)]


def kernels(m: int, n: int, dtype: torch.dtype) -> list[dict]:
    a = torch.randn(m, n, device="cuda", dtype=dtype)
    x = torch.randn(m, device="cuda", dtype=dtype)
    for _ in range(10):
        torch.mv(a.t(), x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            torch.mv(a.t(), x)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel"]


def main() -> None:
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in SHAPES:
            events = kernels(m, n, dtype)
            durations = sorted(e["dur"] for e in events)
            seen = {}
            for e in events:
                args = e.get("args", {})
                seen.setdefault(
                    e["name"],
                    (args.get("grid"), args.get("block"), args.get("registers per thread"), args.get("shared memory")),
                )
            median = durations[len(durations) // 2] if durations else float("nan")
            for name, (grid, block, regs, smem) in seen.items():
                print(
                    f"{str(dtype)[6:]:9} {m:6d}x{n:6d} {median:7.2f} us grid {grid} block {block} regs {regs} "
                    f"smem {smem} {name[:160]}"
                )


if __name__ == "__main__":
    main()
