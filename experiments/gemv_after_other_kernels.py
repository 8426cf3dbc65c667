"""What a decode step's GEMV costs right after another library's kernels, against back to back: ours
(`autotune.linear`) and torch's `F.linear`, each on 32 distinct weights (cold in L2), captured into a
CUDA graph and replayed. "back to back": 32 linears in a row (ours then start under the one before,
by programmatic dependent launch). "after a norm": each linear behind an RMSNorm's few ATen kernels,
as in a transformers decode step. Each linear's kernel is timed by torch.profiler in the replays. It tests
why the fused float16 step's small GEMVs took 13-15% longer than their isolated times
(docs/models.md).

On the GPU machine, from the repository root (torch there):
    python experiments/gemv_after_other_kernels.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import autotune
from autotune.bench.decode_graph import kernel_events, kernel_spans
from autotune.bench.kernel_names import exclusive_times, is_linear_kernel

SHAPES = [(6144, 4096), (4096, 4096), (4096, 14336), (28672, 4096)]  # (N, K): q/k/v, o, down, gate/up
COPIES = 32
REPLAYS = 30


def norm(x: torch.Tensor) -> torch.Tensor:
    """An RMSNorm without its weight, as transformers' Llama writes it: a few small ATen kernels."""
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


def linear_kernel_us(body: Callable[[], None]) -> float:
    """Median µs of the linears' kernels in replays of `body` captured into a CUDA graph, each counted
    from the later of its start and the end of the kernels before it (torch.profiler; a kernel launched
    with programmatic dependent launch starts early and waits, and its duration counts the wait)."""
    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    alone = exclusive_times(kernel_spans(kernel_events(prof)))
    return statistics.median(time for name, time in alone if is_linear_kernel(name))


def sequence(linear: Callable[..., object], weights: list[torch.Tensor], x: torch.Tensor, norms: bool) -> None:
    """One linear a weight, each behind a norm of x where `norms`."""
    for weight in weights:
        linear(norm(x) if norms else x, weight)


def measure(n: int, k: int) -> dict[str, float]:
    """One shape's row: µs a linear's kernel, ours and torch's, back to back and after a norm."""
    weights = [torch.randn(n, k, device="cuda", dtype=torch.float16) / k**0.5 for _ in range(COPIES)]
    x = torch.randn(1, 1, k, device="cuda", dtype=torch.float16)
    want = F.linear(x, weights[0]).double()
    error = float((autotune.linear(x, weights[0]).double() - want).abs().max() / want.abs().max())
    assert error < 1e-2, f"{n}x{k}: ours differs from F.linear by {error:.2e}"
    row: dict[str, float] = {"n": n, "k": k}
    for name, linear in (("ours", autotune.linear), ("torch", F.linear)):
        for norms in (False, True):
            key = f"{name}_{'after_norm' if norms else 'back_to_back'}_us"
            row[key] = linear_kernel_us(lambda linear=linear, norms=norms: sequence(linear, weights, x, norms))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for n, k in SHAPES:
        row = measure(n, k)
        rows.append(row)
        print(
            f"{n:6}x{k:<6} ours back to back {row['ours_back_to_back_us']:6.2f}"
            f" after a norm {row['ours_after_norm_us']:6.2f} | torch back to back {row['torch_back_to_back_us']:6.2f}"
            f" after a norm {row['torch_after_norm_us']:6.2f}",
            flush=True,
        )
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
