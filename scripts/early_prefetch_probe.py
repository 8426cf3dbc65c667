"""Probe: how much of a GEMV's matrix to prefetch before it waits for the call before, and where to.

For each shape, the shipped config runs as is and with kernels/gemv_static_a.cu's prefetch of the
first DEPTH vectors of each of a thread's rows into L1 or into L2 only, all timed in one interleaved
measurement beside cuBLAS on the same rotating buffers, every variant first checked on poisoned y.
Prints a table and writes early_prefetch_<gpu>.json into --out.

    python scripts/early_prefetch_probe.py --out results
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import api
from autotune.bench import Bench, _max_error
from autotune.fingerprint import slugify
from autotune.launch import describe
from autotune.ops import gemv, gemv_static_a
from autotune.problem import Problem

SHAPES = [
    ("float16", 1024, 1024),
    ("float16", 2048, 2048),
    ("float16", 4096, 4096),
    ("float16", 4096, 8192),
    ("float16", 8192, 8192),
    ("float16", 28672, 4096),
    ("float16", 4096, 14336),
    ("float16", 8192, 28672),
    ("float16", 256, 131072),
    ("float16", 1024, 65536),
    ("float16", 128256, 4096),
    ("float32", 1024, 1024),
    ("float32", 4096, 4096),
    ("float32", 8192, 8192),
    ("float32", 28672, 4096),
]
# (level, depth): 1 = L1, 2 = L2 only; depth in vectors per row, None = the whole first step (UNROLL).
VARIANTS: list[tuple[int, int | None]] = [(1, None), (1, 1), (2, None), (2, 1), (2, 2)]


class Variant:
    """gemv_static_a's instance with one (level, depth), behind the op interface the launcher calls."""

    ARG_TYPES = gemv.ARG_TYPES
    PROGRAMMATIC_LAUNCH = True

    def __init__(self, level: int, depth: int | None) -> None:
        self.level, self.depth = level, depth
        self.label = f"L{level}:{'step' if depth is None else depth}"

    def kernel_file(self, problem: Problem) -> str:
        return gemv_static_a.KERNEL_FILE

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        return f"{gemv_static_a.kernel_name(problem, config)}_L{self.level}d{self.depth or 0}"

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        source = gemv_static_a.kernel_source(problem, config, self.level, self.depth)
        return source.replace(gemv_static_a.kernel_name(problem, config), self.kernel_name(problem, config))

    def compile_arch(self, problem: Problem, arch: str) -> str:
        return arch

    def space(self, problem: Problem) -> Any:
        return gemv.space(problem)

    def default_config(self, problem: Problem) -> Any:
        return gemv.default_config(problem)

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Any:
        return gemv.launch(problem, config, sm_count)


def probe(bench: Bench, dtype: str, m: int, n: int, variants: list[Variant], db: str | None) -> dict[str, Any]:
    """One shape: the shipped config plain and as each variant, then cuBLAS, one interleaved measurement."""
    torch, launcher = bench.torch, bench.launcher
    choice = api.best("gemv", m, n, dtype=dtype, gpu=launcher.gpu.name, db=db)
    kind = getattr(torch, dtype)
    copies = bench._copies(choice.problem.matrix_bytes)
    a = [torch.rand(m, n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
    x = [torch.rand(n, device="cuda", dtype=kind) * 2 - 1 for _ in range(copies)]
    y = torch.full((m,), float("nan"), device="cuda", dtype=kind)
    da, dx, dy = [describe(t, "A") for t in a], [describe(t, "x") for t in x], describe(y, "y")

    def call(variant: Variant | None) -> Any:
        def run(i: int) -> None:
            pointers = (da[i % copies].pointer, dx[i % copies].pointer, dy.pointer)
            launcher._call(choice, pointers, (m, n), 1.0, 0.0, variant)

        return run

    def cublas(i: int) -> None:
        torch.mv(a[i % copies], x[i % copies], out=y)

    launches = [call(None), *(call(v) for v in variants)]
    a64, x64 = a[0].double(), x[0].double()
    want, scale = a64 @ x64, a64.abs() @ x64.abs()
    errors = []
    for launch in launches:
        y.fill_(float("nan"))
        launch(0)
        torch.cuda.synchronize()
        errors.append(_max_error(y.double(), want, scale))
    del a64, x64, want, scale
    times = [statistics.median(s) for s in bench.timer.measure_interleaved([*launches, cublas], reps=7)]
    return {
        "dtype": dtype,
        "m": m,
        "n": n,
        "config": choice.config,
        "cublas_us": times[-1],
        "plain_us": times[0],
        "variants": {v.label: t for v, t in zip(variants, times[1:-1], strict=True)},
        "max_errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--db")
    args = parser.parse_args()
    bench = Bench()
    gpu = bench.launcher.gpu.name
    variants = [Variant(level, depth) for level, depth in VARIANTS]
    print(f"{gpu}; GPU us per call back to back (medians of 7), speedup over cuBLAS in ()")
    print(f"{'dtype':9} {'M':>7} {'N':>7} {'cuBLAS':>8} {'plain':>14} " + " ".join(f"{v.label:>14}" for v in variants))
    rows = []
    for dtype, m, n in SHAPES:
        row = probe(bench, dtype, m, n, variants, args.db)
        times = [row["plain_us"], *row["variants"].values()]
        cells = " ".join(f"{t:7.2f} ({row['cublas_us'] / t:4.2f})" for t in times)
        error = max(row["max_errors"])
        print(f"{dtype:9} {m:7} {n:7} {row['cublas_us']:8.2f} {cells}   max error {error:.1e}", flush=True)
        rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"early_prefetch_{slugify(gpu)}.json"
    path.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
