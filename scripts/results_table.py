"""Print results/gemv_<gpu>.json or results/gemm_<gpu>.json as a Markdown table (docs_results.py uses these).

python scripts/results_table.py results/gemv_nvidia-h200.json
"""

from __future__ import annotations

import math
from pathlib import Path

from autotune.bench.harness import read_json, report_script

# The GEMM family a config belongs to, told by a parameter only that family has (checked in this
# order: mma's parameters are all shared with another family).
FAMILY_BY_PARAM = {"occ": "simt", "layout": "wgmma", "nt": "skinny", "prefetch": "skinny_tc", "bm": "mma"}


def gemm_table(report: dict[str, object]) -> str:
    rows = report["rows"]
    assert isinstance(rows, list)
    lines = [
        "| dtype | M | N | K | family | ours µs | cuBLAS µs | cuBLAS/ours | ours TFLOP/s | cuBLAS TFLOP/s | config |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        family = next((f for key, f in FAMILY_BY_PARAM.items() if key in r["config"]), "?")
        config = " ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(
            f"| {r['dtype']} | {r['m']} | {r['n']} | {r['k']} | {family} | {r['ours_us']:.2f} | "
            f"{r['cublas_us']:.2f} | {r['ratio']:.2f} | {r['ours_tflops']:.1f} | {r['cublas_tflops']:.1f} | "
            f"`{config}` |"
        )
    return "\n".join(lines)


def table(report: dict[str, object]) -> str:
    rows = report["rows"]
    assert isinstance(rows, list)
    floors = all(r.get("floor_us") is not None for r in rows)
    head = "| dtype | M | N | ours µs | cuBLAS µs | speedup | ours GB/s | % of copy |"
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if floors:
        head, rule = head + " read floor µs | bound |", rule + "---:|---:|"
    lines = [head + " config |", rule + "---|"]
    for r in rows:
        config = " ".join(f"{k}={v}" for k, v in r["config"].items())
        read_floor = f" {r['floor_us']:.2f} | {r['bound']:.2f} |" if floors else ""
        lines.append(
            f"| {r['dtype']} | {r['m']} | {r['n']} | {r['ours_us']:.2f} | {r['cublas_us']:.2f} | "
            f"{r['speedup']:.2f} | {r['ours_gbs']:.0f} | {r['pct_copy']:.1f} |{read_floor} `{config}` |"
        )
    speedups = [r["speedup"] for r in rows]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
    lines.append("")
    launch_floor = report.get("launch_floor_us", float("nan"))
    bound = (
        f" At the read floor (bound: cuBLAS over the lesser of the floor and ours) it would be "
        f"{report['geomean_bound']:.3f}."
        if "geomean_bound" in report
        else ""
    )
    lines.append(
        f"Geometric-mean speedup {geomean:.3f}, worst {min(speedups):.3f}; copy bandwidth "
        f"{report['copy_gbs']:.0f} GB/s; empty-kernel launch floor {launch_floor:.2f} µs.{bound}"
    )
    return "\n".join(lines)


def report_table(path: Path) -> str:
    """The report's table: the GEMM one where its rows have a K."""
    data = read_json(path)
    return gemm_table(data) if data["rows"] and "k" in data["rows"][0] else table(data)


if __name__ == "__main__":
    report_script("results_table", __doc__, report_table)
