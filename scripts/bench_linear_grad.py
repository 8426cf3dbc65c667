"""Benchmark: a training step's linear, forward and backward, autotune.linear against F.linear on this
GPU (issue: backward at M >= 512 at least 0.9x F.linear's time, or the docs call it correctness-only);
writes results/linear_grad_<gpu>.json.

Run on the GPU machine:  python scripts/bench_linear_grad.py --out results
For each shape (rows M of x, W of N x K, Llama-3-8B's projections) and dtype: y = linear(x, W, b) and
y.backward(dY) with x, W and b requiring gradients (dX through our GEMM, dW through torch's matmul,
autotune/runtime/linear_grad.py), timed by CUDA events as the median of rounds in which the two take
turns, two ways: one step at a time from an idle GPU (`*_ms`: the host's work included, as a small
training step meets it) and QUEUED steps queued behind a sleeping kernel (`*_gpu_ms`: the GPU's time
alone, as a step of a larger model meets it). The gradients are checked against F.linear's first (max
relative error of each, against a float64 product). --profile prints torch.profiler's kernel table of
both at the first shape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # a GPU machine's benchmark: one line where torch is missing, not a traceback
    sys.exit("bench_linear_grad: needs torch with CUDA (pip install torch), and a GPU to run on")

import autotune
from autotune.bench.harness import median_event_ms, report_path, require_cuda_torch, run_script, write_json

# (M, N, K): Llama-3-8B's q/o projection, gate+up and down, at a few training batch x sequence sizes.
SHAPES = [(512, 4096, 4096), (2048, 4096, 4096), (2048, 28672, 4096), (2048, 4096, 14336), (8192, 4096, 4096)]
DTYPES = ("float16", "bfloat16")
ROUNDS, REPS, QUEUED = 5, 20, 10


def step(linear: Any, x: Any, w: Any, b: Any, dy: Any) -> None:
    linear(x, w, b).backward(dy)


def queued_step_ms(x: Any, w: Any, b: Any, dy: Any, linear: Any) -> float:
    """GPU time of one step, QUEUED steps timed behind a sleeping kernel so the host stays ahead."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)  # about 25 ms: longer than the host takes to queue the steps
    start.record()
    for _ in range(QUEUED):
        step(linear, x, w, b, dy)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / QUEUED


def profile(m: int, n: int, k: int, dtype: str) -> None:
    """torch.profiler's table of the kernels and host calls of a few steps of each."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    x, w, b, dy = inputs(m, n, k, dtype)
    for name, linear in (("ours", autotune.linear), ("torch", F.linear)):
        step(linear, x, w, b, dy)
        torch.cuda.synchronize()
        with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step(linear, x, w, b, dy)
            torch.cuda.synchronize()
        print(f"--- {name} {dtype} {m}x{n}x{k}, 5 steps")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=60))


def relative_errors(x: Any, w: Any, b: Any, dy: Any) -> dict[str, float]:
    """Each gradient of ours against a float64 product, and F.linear's against the same."""
    found: dict[str, float] = {}
    exact = [t.double().detach().requires_grad_(True) for t in (x, w, b)]
    F.linear(*exact).backward(dy.double())
    for name, linear in (("ours", autotune.linear), ("torch", F.linear)):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
        step(linear, *leaves, dy)
        for label, got, right in zip(("dx", "dw", "db"), leaves, exact, strict=True):
            scale = right.grad.abs().max().clamp_min(1e-30)
            found[f"{name}_{label}"] = float((got.grad.double() - right.grad).abs().max() / scale)
    return found


def inputs(m: int, n: int, k: int, dtype: str) -> tuple[Any, Any, Any, Any]:
    kind = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, generator=gen, device="cuda").to(kind).requires_grad_(True)
    w = (torch.randn(n, k, generator=gen, device="cuda") / k**0.5).to(kind).requires_grad_(True)
    b = torch.randn(n, generator=gen, device="cuda").to(kind).requires_grad_(True)
    dy = torch.randn(m, n, generator=gen, device="cuda").to(kind)
    return x, w, b, dy


def measure(m: int, n: int, k: int, dtype: str) -> dict[str, Any]:
    x, w, b, dy = inputs(m, n, k, dtype)
    row: dict[str, Any] = {"m": m, "n": n, "k": k, "dtype": dtype, **relative_errors(x, w, b, dy)}
    samples: dict[str, list[float]] = {f"{name}_{kind}": [] for name in ("ours", "torch") for kind in ("ms", "gpu_ms")}
    for _ in range(ROUNDS):
        for name, linear in (("ours", autotune.linear), ("torch", F.linear)):
            step(linear, x, w, b, dy)  # warm: selection, kernels, cuBLAS handles
            samples[f"{name}_ms"].append(median_event_ms(torch, lambda lin=linear: step(lin, x, w, b, dy), REPS))
            samples[f"{name}_gpu_ms"].append(queued_step_ms(x, w, b, dy, linear))
    row.update({key: statistics.median(values) for key, values in samples.items()})
    row["ratio"] = row["torch_ms"] / row["ours_ms"]  # above 1: ours faster
    row["gpu_ratio"] = row["torch_gpu_ms"] / row["ours_gpu_ms"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--profile", action="store_true", help="print torch.profiler's tables first")
    args = parser.parse_args()
    require_cuda_torch()
    gpu = torch.cuda.get_device_name(0)
    if args.profile:
        for dtype in DTYPES[:1]:
            profile(*SHAPES[0], dtype)
    rows = []
    print(f"{gpu}: forward + backward of one linear, ours against F.linear (ratio above 1: ours faster)")
    for m, n, k in SHAPES:
        for dtype in DTYPES:
            row = measure(m, n, k, dtype)
            rows.append(row)
            worst = max(row["ours_dx"] / max(row["torch_dx"], 1e-12), row["ours_dw"] / max(row["torch_dw"], 1e-12))
            print(
                f"{dtype:9} {m:5}x{n:5}x{k:5}  one step: ours {row['ours_ms']:6.3f} ms torch {row['torch_ms']:6.3f}"
                f" {row['ratio']:4.2f}x  queued: ours {row['ours_gpu_ms']:6.3f} torch {row['torch_gpu_ms']:6.3f}"
                f" {row['gpu_ratio']:4.2f}x  error vs torch's {worst:4.2f}x",
                flush=True,
            )
    path = write_json(report_path(args.out, "linear_grad", gpu), {"gpu": gpu, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_linear_grad")
