"""Benchmark: our best GEMM per shape beside cuBLAS (torch.mm, TF32 off) on this GPU, written as JSON.

Run on the GPU machine after tuning, e.g.
    python scripts/bench_gemm.py --db results/h200.db --out results
It reads the best config of every shape from the database (an estimate or the default where a
shape was not tuned, and says which), times it and cuBLAS the same way in the same run on the same
buffers, and writes results/gemm_<gpu>.json; scripts/plot_gemm.py draws the plot from that file.
With --trans, B is stored N x K (an nn.Linear weight: ours on W.t() beside torch.mm(A, W.t())), and
the file is results/gemm_nt_<gpu>.json.
Default shapes: the standard GEMM set (square products in float32 and float16, the skinny
batched-decode products in float16).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict
from pathlib import Path

from autotune import api, ops
from autotune.bench.compare import Bench, GemmRow
from autotune.bench.harness import report_path, run_script, write_json
from autotune.core.problem import DTYPES, read_shapes_file
from autotune.ops import standard_shapes
from autotune.ops.gemm import SKINNY_MAX_M


def plan(
    dtypes: list[str], shapes: list[tuple[int, ...]], skinny_dtypes: list[str]
) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, shape) pairs: square shapes in every dtype asked, skinny ones in `skinny_dtypes`."""
    pairs = []
    for dtype in dtypes:
        for shape in shapes:
            if shape[0] > SKINNY_MAX_M or dtype in skinny_dtypes:
                pairs.append((dtype, shape))
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database with the tuning results (default: AUTOTUNE_DB or the per-user one)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for gemm_<gpu>.json")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"], choices=DTYPES)
    parser.add_argument("--skinny-dtypes", nargs="+", default=["float16"], choices=DTYPES)
    parser.add_argument("--shapes", type=Path, help="'M N K' lines (default: the standard GEMM set)")
    parser.add_argument("--trans", action="store_true", help="B stored N x K (C = A Wᵀ, nn.Linear's layout)")
    args = parser.parse_args()

    shapes = read_shapes_file(args.shapes, ("M", "N", "K")) if args.shapes else standard_shapes("gemm")
    bench = Bench()
    gpu = bench.launcher.gpu.name
    print(f"{gpu}", flush=True)
    print(
        f"{'dtype':9} {'M':>6} {'N':>6} {'K':>6} {'ours us':>9} {'cuBLAS us':>9} {'ratio':>6} {'TFLOP/s':>8} "
        f"{'pick us':>8} source"
    )
    rows: list[GemmRow] = []
    for dtype, (m, n, k) in plan(args.dtypes, shapes, args.skinny_dtypes):
        # `ours_us` times our kernels; the selector's own answer (cuBLASLt where it was measured
        # faster) is timed beside them as `pick_us`.
        choice = api.best("gemm", m, n, k, trans=args.trans, dtype=dtype, gpu=gpu, db=args.db, vendor=False)
        pick = api.best("gemm", m, n, k, trans=args.trans, dtype=dtype, gpu=gpu, db=args.db)
        row = bench.compare_gemm(choice, pick=pick)
        rows.append(row)
        which = "cublas" if ops.library_for(row.pick_config or {}) else "ours"
        print(
            f"{dtype:9} {m:6} {n:6} {k:6} {row.ours_us:9.2f} {row.cublas_us:9.2f} {row.ratio:6.2f} "
            f"{row.ours_tflops:8.1f} {row.pick_us or 0:8.2f} {row.source} (pick: {which})",
            flush=True,
        )
    report = {"gpu": gpu, "rows": [asdict(r) for r in rows]}
    path = write_json(report_path(args.out, "gemm_nt" if args.trans else "gemm", gpu), report)
    geomean = math.exp(sum(math.log(r.ratio) for r in rows) / len(rows))
    print(f"wrote {path}: geometric-mean ratio {geomean:.3f}, worst {min(r.ratio for r in rows):.3f}")
    return 0


if __name__ == "__main__":
    run_script(main, "bench_gemm")
