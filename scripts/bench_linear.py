"""Benchmark: a decoder stack in plain torch with its linears as F.linear against autotune.linear, eager and
under torch.compile(mode="reduce-overhead"), on this GPU; writes results/linear_<gpu>.json.

Run on the GPU machine:  python scripts/bench_linear.py --out results
The stack is Llama-3-8B wide (hidden 4096, 32 query and 8 key/value heads of 128, MLP 14336): per
layer RMSNorm, fused qkv projection, attention of the new token over a KV cache of `kv_len` tokens,
output projection, RMSNorm, fused gate+up projection, SiLU gate, down projection, residuals. One
step decodes one token for each of `batch` sequences. Both variants run the same module, weights and
inputs; only the linear function differs. The step time is the median CUDA-event time of many steps
(the weights, 0.4 GB per layer in float16, are cold in L2 by their size alone), taken in rounds in
which the two variants take turns, after half a second of both running. Before timing, our output
is checked against F.linear's.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters
except ImportError:  # a GPU machine's benchmark: one line where torch is missing, not a traceback
    sys.exit("bench_linear: needs torch with CUDA (pip install torch), and a GPU to run on")

import autotune
import autotune.runtime.torch_ops  # registers torch.ops.autotune.linear
from autotune.bench.harness import report_path, require_cuda_torch, run_script, steps_in_turns_us, write_json

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP = 4096, 32, 8, 128, 14336
Linear = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Decoder(torch.nn.Module):
    """`layers` Llama-like blocks decoding one token per sequence over a fixed KV cache."""

    def __init__(self, layers: int, batch: int, kv_len: int, dtype: torch.dtype, linear: Linear) -> None:
        super().__init__()
        self.linear = linear

        def weight(rows: int, cols: int) -> torch.Tensor:
            return ((torch.rand(rows, cols, device="cuda", dtype=dtype) * 2 - 1) * (3.0 / cols) ** 0.5).contiguous()

        self.qkv = [weight((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN) for _ in range(layers)]
        self.o = [weight(HIDDEN, HEADS * HEAD_DIM) for _ in range(layers)]
        self.gate_up = [weight(2 * MLP, HIDDEN) for _ in range(layers)]
        self.down = [weight(HIDDEN, MLP) for _ in range(layers)]
        cache = (batch, KV_HEADS, kv_len, HEAD_DIM)
        self.k_cache = [torch.randn(cache, device="cuda", dtype=dtype) for _ in range(layers)]
        self.v_cache = [torch.randn(cache, device="cuda", dtype=dtype) for _ in range(layers)]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        batch = h.shape[0]
        for layer in range(len(self.qkv)):
            x = F.rms_norm(h, (HIDDEN,))
            qkv = self.linear(x, self.qkv[layer])
            q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
            q = q.view(batch, HEADS, 1, HEAD_DIM)
            keys = torch.cat([self.k_cache[layer], k.view(batch, KV_HEADS, 1, HEAD_DIM)], dim=2)
            values = torch.cat([self.v_cache[layer], v.view(batch, KV_HEADS, 1, HEAD_DIM)], dim=2)
            attended = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
            h = h + self.linear(attended.reshape(batch, HEADS * HEAD_DIM), self.o[layer])
            x = F.rms_norm(h, (HIDDEN,))
            gate, up = self.linear(x, self.gate_up[layer]).chunk(2, dim=-1)
            h = h + self.linear(F.silu(gate) * up, self.down[layer])
        return h


def step_with(model: Decoder, linear: Linear, h: torch.Tensor) -> torch.Tensor:
    """One eager step of `model` with its linears run by `linear`."""
    model.linear = linear
    return model(h)


def torch_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(x, weight)


def ours_eager(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return autotune.linear(x, weight)


def ours_op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.autotune.linear(x, weight)


def measure(batch: int, layers: int, kv_len: int, dtype: torch.dtype, steps: int) -> dict[str, Any]:
    torch.manual_seed(batch)
    model = Decoder(layers, batch, kv_len, dtype, torch_linear)
    h = torch.randn(batch, HIDDEN, device="cuda", dtype=dtype)
    row: dict[str, Any] = {"batch": batch, "layers": layers, "kv_len": kv_len}
    with torch.no_grad():
        want = model(h).float()
        model.linear = ours_eager
        got = model(h).float()
        error = ((got - want).norm() / want.norm()).item()
        if not error < 2e-2:
            raise SystemExit(f"batch {batch}: autotune.linear's stack differs from F.linear's by {error:.3g}")
        variants = {"torch": torch_linear, "ours": ours_eager}
        runs = {name: functools.partial(step_with, model, linear, h) for name, linear in variants.items()}
        eager = steps_in_turns_us(torch, runs, steps)
        row.update({f"{name}_eager_us": us for name, us in eager.items()})
        # Both compiled variants coexist (one module each, sharing the weights), so that their steps
        # can take turns like the eager ones.
        torch._dynamo.reset()  # nothing compiled for another batch size stays in the caches
        compiled = {}
        for name, linear in (("torch", torch_linear), ("ours", ours_op)):
            variant = copy.copy(model)
            variant.linear = linear
            compiled[name] = torch.compile(variant, mode="reduce-overhead", fullgraph=True)
            for _ in range(3):  # record the CUDA graph
                compiled[name](h)
        skips = dict(counters["inductor"])  # cudagraph_skips counts compiled graphs run without CUDA graphs
        if skips.get("cudagraph_skips"):
            print(f"batch {batch}: compiled without CUDA graphs: {skips}", flush=True)
        counters.clear()
        runs = {name: functools.partial(step, h) for name, step in compiled.items()}
        row.update({f"{name}_compiled_us": us for name, us in steps_in_turns_us(torch, runs, steps).items()})
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--kv-len", type=int, default=1024)
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    require_cuda_torch()
    dtype = getattr(torch, args.dtype)
    gpu = torch.cuda.get_device_name()
    rows = [measure(int(b), args.layers, args.kv_len, dtype, args.steps) for b in args.batches.split(",")]
    path = write_json(report_path(args.out, "linear", gpu), {"gpu": gpu, "dtype": args.dtype, "rows": rows}, indent=2)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_linear")
