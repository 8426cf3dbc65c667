"""Whether a linear's weight, prefetched into L2 while the kernels between two linears run, takes time
off a decode step. Between our GEMVs a decode step runs norms, rotary and attention kernels that read
little from memory (about 26 µs a layer in the fused compiled float16 Llama step), and each GEMV starts
cold: its first loads wait on DRAM, and behind a kernel that never triggers a programmatic launch, its
head start is lost (experiments/gemv_after_other_kernels.py). Here a side stream, forked from the main
one, issues `cp.async.bulk.prefetch.L2` for the first MB of the next weight while the main stream runs a
stand-in for those kernels (torch.cuda._sleep for a given time), and joins before the next linear.

32 linears on distinct weights (cold in L2) in a CUDA graph, each followed by the gap; µs per linear and
gap, median replay, for the prefetched bytes and the fork point ("after": once the linear is done, so
the prefetch overlaps the gap only; "before": when the linear starts, so it also shares the linear's
DRAM time), ours (`autotune.linear`) and torch's `F.linear`.

On the GPU machine, from the repository root (torch and cupy there):
    python experiments/decode_l2_head_start.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cupy
import numpy
import torch
import torch.nn.functional as F

import autotune

SHAPES = [(6144, 4096), (4096, 4096), (4096, 14336), (28672, 4096)]  # (N, K): q/k/v, o, down, gate/up
COPIES = 32
REPLAYS = 20
GAPS_US = [3.0, 12.0]  # a fused norm's time; rotary, attention and a norm
PREFETCH_MB = [0, 4, 16, 32]
CHUNK = 64 * 1024  # bytes a bulk prefetch instruction asks for
THREADS = 128

SOURCE = r"""
extern "C" __global__ void prefetch_l2(const char* base, unsigned long long bytes, unsigned int chunk) {
    unsigned long long start = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) * chunk;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x * chunk;
    for (unsigned long long offset = start; offset < bytes; offset += stride) {
        unsigned long long left = bytes - offset;
        unsigned int size = left < chunk ? (unsigned int)left : chunk;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + offset), "r"(size) : "memory");
    }
}
"""


class Prefetcher:
    """Launches prefetch_l2 on a torch stream (through cupy, which shares torch's context)."""

    def __init__(self) -> None:
        self.kernel = cupy.RawKernel(SOURCE, "prefetch_l2")  # NVRTC, for the GPU's own architecture

    def __call__(self, weight: torch.Tensor, nbytes: int, stream: torch.cuda.Stream) -> None:
        nbytes = min(nbytes, weight.numel() * weight.element_size()) // 16 * 16
        chunks = -(-nbytes // CHUNK)
        blocks = max(1, -(-chunks // THREADS))
        with cupy.cuda.ExternalStream(stream.cuda_stream):
            args = (numpy.uint64(weight.data_ptr()), numpy.uint64(nbytes), numpy.uint32(CHUNK))
            self.kernel((blocks,), (THREADS,), args)


def cycles_per_us() -> float:
    """torch.cuda._sleep's cycles a microsecond on this GPU, timed on 10 million of them."""
    torch.cuda._sleep(1_000_000)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (begin.elapsed_time(end) * 1e3)


def replay_us(body: Callable[[], None]) -> float:
    """Median µs of one replay of `body` captured into a CUDA graph."""
    body()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        body()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    return statistics.median(times)


def step(
    linear: Callable[..., Any] | None,
    weights: list[torch.Tensor],
    x: torch.Tensor,
    gap: int,
    prefetch: Prefetcher,
    nbytes: int,
    fork_before: bool,
    side: torch.cuda.Stream,
) -> None:
    """Each weight's linear (none where `linear` is None) and a gap; the next weight's first `nbytes`
    prefetched on `side`, forked before or after the linear, joined before the next linear."""
    main = torch.cuda.current_stream()
    for index, weight in enumerate(weights):
        if nbytes and fork_before:
            side.wait_stream(main)
            prefetch(weights[(index + 1) % len(weights)], nbytes, side)
        if linear is not None:
            linear(x, weight)
        if nbytes and not fork_before:
            side.wait_stream(main)
            prefetch(weights[(index + 1) % len(weights)], nbytes, side)
        torch.cuda._sleep(gap)
        if nbytes:
            main.wait_stream(side)


def measure(n: int, k: int, prefetch: Prefetcher, side: torch.cuda.Stream, cycles: float) -> list[dict[str, Any]]:
    """One shape's rows: every gap, prefetch size and fork point, ours and torch's."""
    weights = [torch.randn(n, k, device="cuda", dtype=torch.float16) / k**0.5 for _ in range(COPIES)]
    x = torch.randn(1, 1, k, device="cuda", dtype=torch.float16)
    want = F.linear(x, weights[0]).double()
    error = float((autotune.linear(x, weights[0]).double() - want).abs().max() / want.abs().max())
    assert error < 1e-2, f"{n}x{k}: ours differs from F.linear by {error:.2e}"
    rows = []
    for gap_us in GAPS_US:
        gap = int(gap_us * cycles)
        alone = replay_us(lambda gap=gap: step(None, weights, x, gap, prefetch, 0, False, side)) / COPIES
        for name, linear in (("ours", autotune.linear), ("torch", F.linear)):
            for mb in PREFETCH_MB:
                for fork_before in (False, True) if mb else (False,):
                    us = replay_us(
                        lambda linear=linear, gap=gap, mb=mb, fork_before=fork_before: step(
                            linear, weights, x, gap, prefetch, mb << 20, fork_before, side
                        )
                    )
                    row = {"n": n, "k": k, "gap_us": alone, "linear": name, "prefetch_mb": mb}
                    row |= {"fork": "before" if fork_before else "after", "us": us / COPIES}
                    rows.append(row)
                    print(
                        f"{n:6}x{k:<6} gap {alone:5.2f} {name:5} prefetch {mb:2} MB {row['fork']:6}"
                        f" {row['us']:7.2f} us a linear and gap",
                        flush=True,
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    prefetch, side, cycles = Prefetcher(), torch.cuda.Stream(), cycles_per_us()
    rows = []
    for n, k in SHAPES:
        rows += measure(n, k, prefetch, side, cycles)
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
