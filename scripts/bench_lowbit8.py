"""Benchmark: our 8-bit weight-only product (int8 and float8 e4m3 codes, a scale a row) beside float16 (our
GEMV/GEMM and torch's) on the dequantized weight, on this GPU; writes results/lowbit8_<gpu>.json.

Run on the GPU machine (needs torch with CUDA and PyCUDA):
    python scripts/bench_lowbit8.py --out results                 # both kinds, the 8 (N, K) pairs, M = 1
    python scripts/bench_lowbit8.py --m 1 4 16 --kinds int8       # some M, one kind
    python scripts/bench_lowbit8.py --summary results/lowbit8_nvidia-h200.json

For each kind, activation dtype and (N, K) pair of autotune/ops/q8gemm/shapes.txt, a random weight
(normal, 1/sqrt(K)) is quantized with format.quantize8 and, for every M, these run on the same x: ours
(autotune.call("q8gemm") on the codes and scales), ours_fp16 (autotune.linear on the dequantized weight in
the activations' dtype) and torch_fp16 (the faster of torch.mv at M = 1 and F.linear on it), timed in turns
by the benchmarks' isolated clock (autotune/bench/harness.py: each call followed by an empty non-PDL
kernel, less its own time; `*_b2b_us` back to back), the weights rotating over copies that together
exceed the L2 several times, so every call reads them from DRAM. `bytes` counts what must move once
(codes, scales, x, y); `copy_gbs` is a device-to-device copy of the same run. max_rel_err is
max|y - y64| / max|y64| of ours against a float64 product on the exact weight (codes times scales);
peer_max_rel_err the same for F.linear on the weight rounded to the activations' dtype.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.bench.harness import read_json
from autotune.core.errors import AutotuneError
from autotune.core.problem import read_shapes_file
from autotune.ops.q8gemm import OP

KINDS = ("int8", "fp8")
DTYPES = ("float16",)
BIG_BYTES = 32 * 2**20  # matrices this big (one byte a weight) are held to the copy-bandwidth goal
# Issue 51's goals at M = 1 (geometric means over the pairs; every big matrix's share of copy).
GOALS = {"torch_fp16": 1.9, "ours_fp16": 1.6, "copy_pct": 90.0}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for lowbit8_<gpu>.json")
    parser.add_argument("--m", type=int, nargs="+", default=[1], help="rows of x (default: 1)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--dtypes", nargs="+", choices=("float16", "bfloat16"), default=list(DTYPES))
    parser.add_argument("--reps", type=int, default=7, help="timed samples per variant (median kept)")
    parser.add_argument("--summary", type=Path, metavar="JSON", help="print the goal figures of a report, nothing run")
    return parser.parse_args(argv)


def pairs() -> list[tuple[int, int]]:
    """The (N, K) pairs of the op's standard shapes, in file order."""
    return list(dict.fromkeys((n, k) for _, n, k in read_shapes_file(OP.shapes_file, ("M", "N", "K"))))


def unique_bytes(m: int, n: int, k: int, item: int = 2) -> int:
    """Codes (a byte a weight), a scale a row, x and y."""
    return n * k + n * item + (m * k + m * n) * item


def _geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The goal figures at M = 1, per kind and dtype."""
    lines = [f"{report.get('gpu', '?')}: copy {report['copy_gbs']:.0f} GB/s"]
    cases = dict.fromkeys((r["format"], r["dtype"]) for r in report["rows"])
    for kind, dtype in cases:
        rows = [r for r in report["rows"] if (r["format"], r["dtype"]) == (kind, dtype) and r["m"] == 1]
        for peer in ("torch_fp16", "ours_fp16"):
            value = _geomean([r[f"{peer}_us"] / r["ours_us"] for r in rows])
            shown = "n/a" if value is None else f"{value:.3f}"
            verdict = "" if value is None else ("  ok" if value >= GOALS[peer] else "  MISSED")
            lines.append(
                f"{kind} {dtype} M=1 geomean speedup over {peer:10} {shown:>7} (goal >= {GOALS[peer]}){verdict}"
            )
        big = [r for r in rows if r["n"] * r["k"] >= BIG_BYTES]
        shares = [100.0 * r["bytes"] / (r["ours_us"] * 1e3) / report["copy_gbs"] for r in big]
        worst = min(shares, default=None)
        shown = "n/a" if worst is None else f"{worst:.1f}"
        verdict = "" if worst is None else ("  ok" if worst >= GOALS["copy_pct"] else "  MISSED")
        lines.append(
            f"{kind} {dtype} M=1 worst % of copy, >= 32 MiB {shown:>22} (goal >= {GOALS['copy_pct']}){verdict}"
        )
    return lines


def _quantized_copies(torch: Any, kind: str, dtype: str, n: int, k: int, copies: int) -> list[dict[str, Any]]:
    """`copies` weights: codes and scales on the GPU and the dense weight rounded to `dtype`; the first
    also holds the exact weight in float64 (codes times scales), for the errors."""
    import numpy as np

    from autotune.core import dtypes
    from autotune.ops.q8gemm import format as q8format

    made = []
    rng = np.random.default_rng(n * 7 + k)
    for copy in range(copies):
        w = (rng.standard_normal((n, k), dtype=np.float32) / math.sqrt(k)).astype(np.float32)
        weight = q8format.quantize8(w, kind, dtype)
        scales = dtypes.decode(weight.scales, dtype).astype(np.float32)
        exact = torch.from_numpy(q8format.codes_values(weight.codes, kind)).cuda().double()
        exact *= torch.from_numpy(scales).cuda().double()[:, None]
        made.append(
            {
                "codes": torch.from_numpy(weight.codes).cuda(),
                "scales": torch.from_numpy(scales).to(getattr(torch, dtype)).cuda(),
                "exact": exact if copy == 0 else None,
                "rounded": exact.to(getattr(torch, dtype)),
            }
        )
        del exact
    return made


def _rel_err(torch: Any, y: Any, want: Any) -> float:
    got = y.double().reshape(want.shape)
    if not bool(torch.isfinite(got).all()):
        return math.nan
    return float((got - want).abs().max() / want.abs().max())


def measure_row(torch: Any, clock: Any, weights: list[dict[str, Any]], kind: str, dtype: str, m: int) -> dict[str, Any]:
    import autotune

    n, k = weights[0]["codes"].shape
    c = len(weights)
    xs = [torch.randn(m, k, device="cuda", dtype=getattr(torch, dtype)) for _ in weights]
    F = torch.nn.functional
    runs = {
        "ours": lambda i: autotune.call(
            "q8gemm", xs[i % c], weights[i % c]["codes"], weights[i % c]["scales"], options=(kind,)
        ),
        "ours_fp16": lambda i: autotune.linear(xs[i % c], weights[i % c]["rounded"]),
        "torch_linear": lambda i: F.linear(xs[i % c], weights[i % c]["rounded"]),
    }
    if m == 1:
        y = torch.empty(n, device="cuda", dtype=xs[0].dtype)
        runs["torch_mv"] = lambda i: torch.mv(weights[i % c]["rounded"], xs[i % c][0], out=y)
    exact = xs[0].double() @ weights[0]["exact"].T
    rounded = xs[0].double() @ weights[0]["rounded"].double().T
    errors = {
        "ours": _rel_err(torch, runs["ours"](0), exact),
        "peer": _rel_err(torch, runs["torch_linear"](0), rounded),
    }
    runs["ours_fp16"](0)
    torch.cuda.synchronize()
    times = clock.time(runs)
    torch_name = min(
        (name for name in ("torch_mv", "torch_linear") if f"{name}_us" in times), key=lambda s: times[f"{s}_us"]
    )
    return {
        "format": kind,
        "dtype": dtype,
        "m": m,
        "n": n,
        "k": k,
        "ours_us": times["ours_us"],
        "ours_fp16_us": times["ours_fp16_us"],
        "torch_fp16_us": times[f"{torch_name}_us"],
        "torch_fp16_call": torch_name,
        "bytes": unique_bytes(m, n, k),
        "max_rel_err": errors["ours"],
        "peer_max_rel_err": errors["peer"],
        "ours_b2b_us": times["ours_b2b_us"],
        "ours_fp16_b2b_us": times["ours_fp16_b2b_us"],
        "torch_fp16_b2b_us": times[f"{torch_name}_b2b_us"],
        "separator_us": times["separator_us"],
        "copies": c,
    }


def run(args: argparse.Namespace) -> Path:
    try:
        import torch
    except ImportError:
        raise AutotuneError("needs torch with CUDA (the GPU machine)") from None
    from autotune.bench.compare import Bench
    from autotune.bench.harness import IsolatedClock, report_path, rotation_copies, write_json

    bench = Bench()
    gpu = bench.launcher.gpu
    copy_gbs = bench.copy_gbs()
    report: dict[str, Any] = {"gpu": gpu.name, "copy_gbs": copy_gbs, "l2_bytes": gpu.l2_bytes, "rows": []}
    path = report_path(args.out, "lowbit8", gpu.name)
    clock = IsolatedClock(bench, args.reps)
    print(f"{gpu.name}: device-to-device copy {copy_gbs:.0f} GB/s", flush=True)
    for kind in args.kinds:
        for dtype in args.dtypes:
            for n, k in pairs():
                weights = _quantized_copies(
                    torch, kind, dtype, n, k, rotation_copies(unique_bytes(1, n, k), gpu.l2_bytes)
                )
                for m in args.m:
                    row = measure_row(torch, clock, weights, kind, dtype, m)
                    report["rows"].append(row)
                    print(json.dumps(row), flush=True)
                del weights
                torch.cuda.empty_cache()
                write_json(path, report)  # a run cut short keeps the pairs it finished
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        path = args.summary or run(args)
        report = read_json(path)
        if not isinstance(report, dict) or "copy_gbs" not in report or not isinstance(report.get("rows"), list):
            raise AutotuneError(f"{path} is not a bench_lowbit8 report (no copy_gbs and rows)")
    except AutotuneError as exc:
        print(f"bench_lowbit8: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
