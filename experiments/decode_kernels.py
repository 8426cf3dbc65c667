"""Each kernel of a patched Llama's decode step, eager and under torch.compile, from torch.profiler: the
kernels by total time, then one replay's kernels in order with their durations. It showed that Inductor
names its fused norm and activation kernels after a low-bit linear's op (`triton_red_fused_..._qgemm_...`),
which the decode benchmark's split then counted as linears (autotune/bench/kernel_names.py); and that a
PDL-launched kernel's duration counts the wait for the kernel before it (the per-step sums it prints).

On the GPU machine, from the repository root (transformers and torch there):
    python experiments/decode_kernels.py [int4|int8|fp8|float16] [--layers 2] [--unfused] [--pdl]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import autotune
from autotune.bench.decode_graph import PROMPT, DecodeGraph, kernel_events, kernel_spans
from autotune.bench.kernel_names import exclusive_split, is_linear_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_model import llama  # scripts/ is not a package: on the path above

REPLAYS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", nargs="?", default="int4", choices=("int4", "int8", "fp8", "float16"))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--unfused", action="store_true", help="patch without fuse=True")
    parser.add_argument("--pdl", action="store_true", help="compiled: Inductor's Triton kernels launched with PDL")
    args = parser.parse_args()
    model = llama(args.layers)
    model = autotune.patch(model, None if args.weights == "float16" else args.weights, fuse=not args.unfused)
    prompt = torch.randint(0, 1000, (1, PROMPT), device="cuda")
    for compiled in (False, True):
        graph = DecodeGraph(model, prompt, compiled, pdl=args.pdl)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPLAYS):
                graph.graph.replay()
            torch.cuda.synchronize()
        print(f"== {args.weights} {'compiled' if compiled else 'eager'}: step {graph.time_us():.1f} us")
        totals = []
        for event in prof.key_averages():
            us = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
            if us and not event.key.startswith(("cudaGraph", "Memcpy", "Memset")):
                totals.append((us / REPLAYS, event.count // REPLAYS, event.key[:110]))
        for us, count, name in sorted(totals, reverse=True)[:16]:
            print(f"  {us:8.1f} us  x{count:<3d} {name}")
        kernels = kernel_events(prof)
        spans = kernel_spans(kernels)
        alone, linear_alone = exclusive_split(spans)
        summed = sum(end - start for _, start, end in spans)
        linear_summed = sum(end - start for name, start, end in spans if is_linear_kernel(name))
        print(
            f"  per step: durations summed {summed / REPLAYS:.1f} us (linears {linear_summed / REPLAYS:.1f}),"
            f" each alone {alone / REPLAYS:.1f} us (linears {linear_alone / REPLAYS:.1f})"
        )
        for event in kernels[: len(kernels) // REPLAYS]:
            print(f"    {event.device_time_total:7.1f} {event.name[:90]}")


if __name__ == "__main__":
    main()
