"""Benchmark: our best GEMV per shape beside cuBLAS (torch) on this GPU, written as JSON.

Run on the GPU machine after tuning, e.g.
    python scripts/bench_gemv.py --db results/h200.db --out results
It reads the best config of every shape from the database (an estimate or the default where a
shape was not tuned, and says which), times it and cuBLAS the same way in the same run, and writes
results/gemv_<gpu>.json (--trans: gemv_trans_<gpu>.json; --set llm, the LLM shape set of
autotune/ops/gemv/llm_shapes.txt: gemv_llm_<gpu>.json, gemv_llm_trans_<gpu>.json). scripts/plot_gemv.py
draws the plot from that file.

Beside each shape it also times the read floor of the matrix's size (autotune/measure/floor.py: the fastest
kernel that only reads that many bytes, launched like our GEMVs) and reports the bound: the speedup
over cuBLAS a GEMV at the floor would show, and the geometric mean of those bounds (--no-floor skips it); each
floor is stored in the database beside the trials, as `autotune bench` stores it. A size whose floor the
database already holds for this GPU model takes that (the least stored) instead of timing all read
kernels again: the two layouts of a shape read the same bytes (--fresh-floor times every size anew).

While it runs, the rows so far are written after every shape to a .partial.json beside the report, which
only a whole run replaces: a run cut short keeps what it measured there and leaves an earlier report as it
was. --resume keeps the rows of that partial report (else of the report at the output path; same GPU)
and times only the shapes it lacks.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from autotune import api, ops
from autotune.bench.compare import Bench, BenchRow, ReadFloor, as_json, rows_of_report
from autotune.bench.harness import partial_path, read_json, report_path, run_script, write_progress, write_report
from autotune.core.errors import AutotuneError
from autotune.core.problem import DTYPES, read_shapes_file
from autotune.ops import standard_shapes
from autotune.ops.gemv import LLM_SHAPES_FILE

SETS = ("standard", "llm")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="database with the tuning results (default: AUTOTUNE_DB or the per-user one)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for gemv_<gpu>.json")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--shapes", type=Path, help="'M N' lines (default: the shape set --set names)")
    parser.add_argument(
        "--set",
        choices=SETS,
        default="standard",
        help="standard (gemv_<gpu>.json) or llm: open models' projections, autotune/ops/gemv/llm_shapes.txt "
        "(gemv_llm_<gpu>.json)",
    )
    parser.add_argument("--trans", action="store_true", help="y = Aᵀx (writes gemv_trans_<gpu>.json)")
    parser.add_argument("--no-floor", action="store_true", help="skip the read floor and the bound per shape")
    parser.add_argument(
        "--fresh-floor", action="store_true", help="time every read floor, also where the database holds one"
    )
    parser.add_argument(
        "--resume", action="store_true", help="keep the rows of a run cut short (else of the report) at the output path"
    )
    args = parser.parse_args()

    if args.shapes:
        shapes = read_shapes_file(args.shapes)
    else:
        shapes = read_shapes_file(LLM_SHAPES_FILE) if args.set == "llm" else standard_shapes()
    bench = Bench()
    gpu = bench.launcher.gpu.name
    copy_gbs = bench.copy_gbs()
    launch_us = bench.launch_floor_us()
    print(f"{gpu}: device-to-device copy {copy_gbs:.0f} GB/s, empty kernel {launch_us:.2f} us per call", flush=True)
    stem = "gemv" + ("_llm" if args.set == "llm" else "") + ("_trans" if args.trans else "")
    path = report_path(args.out, stem, gpu)
    try:
        rows = resumed_rows(path, gpu) if args.resume else []
    except AutotuneError as error:
        print(f"error: {path}: {error}", file=sys.stderr)
        return 2
    done = {(row.dtype, row.m, row.n) for row in rows}
    if done:
        print(f"resuming {path}: {len(done)} shapes already measured", flush=True)
    store = api.store(args.db)
    header = (
        f"{'dtype':9} {'M':>7} {'N':>7} {'ours us':>9} {'cuBLAS us':>9} {'speedup':>7} {'GB/s':>6} {'%copy':>6} "
        f"{'floor us':>8} {'bound':>6} {'pick us':>8} source"
    )
    print(header, flush=True)
    for dtype in args.dtypes:
        for m, n in shapes:
            if (dtype, m, n) in done:
                continue
            started = time.monotonic()
            # `ours_us` times our kernels; the selector's own answer (cuBLASLt where it was measured
            # faster) is timed beside them as `pick_us`.
            choice = api.best("gemv", m, n, trans=args.trans, dtype=dtype, gpu=gpu, db=args.db, vendor=False)
            pick = api.best("gemv", m, n, trans=args.trans, dtype=dtype, gpu=gpu, db=args.db)
            row = bench.compare(choice, pick=pick)
            if not args.no_floor:
                nbytes = choice.problem.matrix_bytes
                stored = None if args.fresh_floor else store.read_floor(gpu, nbytes)
                if stored is not None:
                    row.set_floor(ReadFloor(stored, "stored"))
                else:
                    floor = bench.read_floor(nbytes)
                    # Kept beside the trials, as `autotune bench` keeps it (listings and reports use it).
                    store.record_read_floor(bench.launcher.gpu, nbytes, floor.us, floor.kernel)
                    row.set_floor(floor)
            rows.append(row)
            read_floor = f"{row.floor_us:8.2f} {row.bound:6.2f}" if row.bound is not None else f"{'-':>8} {'-':>6}"
            print(
                f"{dtype:9} {m:7} {n:7} {row.ours_us:9.2f} {row.cublas_us:9.2f} {row.speedup:7.2f} "
                f"{row.ours_gbs:6.0f} {100 * row.ours_gbs / copy_gbs:6.1f} {read_floor} {row.pick_us or 0:8.2f} "
                f"{row.source} (pick: {'cublas' if ops.library_for(row.pick_config or {}) else 'ours'}), "
                f"{time.monotonic() - started:.1f} s",
                flush=True,
            )
            write_progress(path, as_json(gpu, copy_gbs, launch_us, rows))  # a run cut short keeps its rows
    if not rows:
        print("no shapes to measure", file=sys.stderr)
        return 2
    report = as_json(gpu, copy_gbs, launch_us, rows)
    write_report(path, report)
    bound = f"; at the read floor it would be {report['geomean_bound']:.3f}" if "geomean_bound" in report else ""
    worst = min(r.speedup for r in rows)
    print(f"wrote {path}: geometric-mean speedup {report['geomean_speedup']:.3f}, worst {worst:.3f}{bound}")
    return 0


def resumed_rows(path: Path, gpu: str) -> list[BenchRow]:
    """The rows measured on `gpu` of the run cut short at `path` (its partial report), else of the report
    at `path` (none where there is neither)."""
    for report in (partial_path(path), path):
        if report.exists():
            return rows_of_report(read_json(report), gpu)
    return []


if __name__ == "__main__":
    try:
        run_script(main, "bench_gemv")
    except KeyboardInterrupt:  # the partial report holds every shape measured before it (--resume carries on)
        print("cut short: the shapes measured so far are in the .partial.json beside the report", file=sys.stderr)
        sys.exit(130)
