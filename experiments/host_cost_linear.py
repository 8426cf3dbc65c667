"""Host time per call of autotune.linear against F.linear at the decoder stack's shapes (batch 1 and
4), and a profile of where autotune.linear's host time goes. With --int4, the same for int4 weights
(autotune.quantize, group 128): x of shape (1, K), (K,) (what bench_decode passes) and (1, 1, K) (a
transformers decode step), the module's own call, and F.linear and our GEMV on the float16 weight beside
them, with the config each shape launches (docs/lowbit.md has the findings). With --grad, a training
step's calls at M = 512 (forward with a bias, the backward's dX GEMM), no autograd. With --model, where
eager `generate` of scripts/bench_model.py's Llama (8 layers) spends its host time, torch's copy and one
patched by autotune.patch: cProfile of 16 greedy tokens each. Run on the GPU machine:

    python experiments/host_cost_linear.py [--int4 | --grad | --model]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

import autotune
import autotune.runtime.torch_ops
from autotune.bench.harness import host_us_per_call

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


def report(label: str, calls: dict[str, Callable[[], object]]) -> None:
    """Host µs per call of each of `calls` (each run once first), on one line."""
    for call in calls.values():
        call()
    torch.cuda.synchronize()
    got = host_us_per_call(torch, calls, rounds=15)
    print(f"{label}: " + ", ".join(f"{c} {us:.1f} us" for c, us in got.items()), flush=True)


def profile(call: Callable[[], object]) -> None:
    """Where `call`'s host time goes: 3,000 calls queued behind GPU sleeps, the top functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(300):
        torch.cuda._sleep(1_000_000)
        for _ in range(10):
            call()
    profiler.disable()
    torch.cuda.synchronize()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


def float16() -> None:
    for batch in (1, 4):
        for name, (n, k) in SHAPES.items():
            W = torch.randn(n, k, device="cuda", dtype=torch.float16)
            x = torch.randn(batch, k, device="cuda", dtype=torch.float16)
            report(
                f"batch {batch} {name}",
                {
                    "F.linear": lambda x=x, W=W: F.linear(x, W),
                    "autotune.linear": lambda x=x, W=W: autotune.linear(x, W),
                    "torch.ops.autotune.linear": lambda x=x, W=W: torch.ops.autotune.linear(x, W),
                    "bare": (lambda x=x, W=W, k=k: autotune.gemv(W, x.view(k)))
                    if batch == 1
                    else (lambda x=x, W=W: autotune.gemm(x, W.T)),
                },
            )
        profile(lambda x=x, W=W: autotune.linear(x, W))


def int4() -> None:
    for name, (n, k) in SHAPES.items():
        W = torch.randn(n, k, device="cuda", dtype=torch.float16)
        qw = autotune.quantize(W, "int4", group=128)
        x = torch.randn(1, k, device="cuda", dtype=torch.float16)
        vector, step = x.view(k), x.view(1, 1, k)
        report(
            f"int4 {name}",
            {
                "F.linear": lambda x=x, W=W: F.linear(x, W),
                "int4 (1, K) x": lambda x=x, qw=qw: autotune.linear(x, qw),
                "int4 (K,) x": lambda v=vector, qw=qw: autotune.linear(v, qw),
                "int4 (1, 1, K) x": lambda s=step, qw=qw: autotune.linear(s, qw),
                "int4 module": lambda x=x, qw=qw: qw(x),
                "float16 gemv": lambda v=vector, W=W: autotune.gemv(W, v),
            },
        )
        # The launch each int4 call makes: whether its K split runs over a thread-block cluster, a launch
        # attribute the driver handles on every call.
        configs = {
            str(sig.choice.config)
            for sig in autotune.api.launch_path().signatures()
            if sig.choice.problem.op == "qgemm" and (sig.choice.problem.n, sig.choice.problem.k) == (n, k)
        }
        print(f"  int4 {name} launches: {'; '.join(sorted(configs))}", flush=True)
    profile(lambda v=vector, qw=qw: autotune.linear(v, qw))


def grad_calls(dtype: torch.dtype, profiled: bool) -> None:
    m, n, k = 512, 4096, 4096
    W = torch.randn(n, k, device="cuda", dtype=dtype)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    dy = torch.randn(m, n, device="cuda", dtype=dtype)
    report(
        f"{dtype} {m}x{n}x{k}",
        {
            "F.linear bias": lambda: F.linear(x, W, b),
            "autotune.linear bias": lambda: autotune.linear(x, W, b),
            "F.linear": lambda: F.linear(x, W),
            "autotune.linear": lambda: autotune.linear(x, W),
            "dY @ W": lambda: dy @ W,
            "autotune.gemm(dY, W)": lambda: autotune.gemm(dy, W),
        },
    )
    if profiled:
        profile(lambda: autotune.gemm(dy, W))
        profile(lambda: autotune.linear(x, W, b))


def model_generate() -> None:
    import copy
    import time

    from bench_model import PROMPT, llama

    theirs = llama(8)
    ours = autotune.patch(copy.deepcopy(theirs))
    prompt = torch.randint(0, theirs.config.vocab_size, (1, PROMPT), device="cuda")
    for name, model in (("torch", theirs), ("ours", ours)):
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm
            torch.cuda.synchronize()
            profiler = cProfile.Profile()
            begin = time.perf_counter()
            profiler.enable()
            model.generate(prompt, max_new_tokens=16, min_new_tokens=16, do_sample=False)
            profiler.disable()
            torch.cuda.synchronize()
        print(f"=== {name}: 16 tokens in {(time.perf_counter() - begin) * 1e3:.1f} ms (profiled)", flush=True)
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(22)
        stats.sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    if "--model" in sys.argv[1:]:
        model_generate()
    elif "--grad" in sys.argv[1:]:
        grad_calls(torch.bfloat16, False)
        grad_calls(torch.float16, True)
    else:
        int4() if "--int4" in sys.argv[1:] else float16()
