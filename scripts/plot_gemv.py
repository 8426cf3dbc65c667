"""Plot results/gemv_<gpu>.json: bandwidth per shape, ours beside cuBLAS, under the copy ceiling.

python scripts/plot_gemv.py results/gemv_nvidia-h200.json   # writes results/gemv_nvidia-h200.png
"""

from __future__ import annotations

from pathlib import Path

from autotune.bench.harness import bars_beside, pyplot, read_json, report_script, save_beside


def main(path: Path) -> Path:
    report = read_json(path)  # a file that cannot be read is said before a missing matplotlib
    plt = pyplot()
    dtypes = list(dict.fromkeys(row["dtype"] for row in report["rows"]))
    fig, axes = plt.subplots(len(dtypes), 1, figsize=(14, 4.2 * len(dtypes)), squeeze=False)
    for axis, dtype in zip(axes[:, 0], dtypes, strict=True):
        rows = [r for r in report["rows"] if r["dtype"] == dtype]
        labels = [f"{r['m']}x{r['n']}" for r in rows]
        positions = range(len(rows))
        ours, theirs = [r["ours_gbs"] for r in rows], [r["cublas_gbs"] for r in rows]
        bars_beside(axis, ours, theirs, "autotune (tuned)", "cuBLAS (torch)")
        # The read floor as bandwidth: the bytes that must move over the floor's time.
        floors = [(p, r["ours_gbs"] * r["ours_us"] / r["floor_us"]) for p, r in enumerate(rows) if r.get("floor_us")]
        if floors:
            axis.scatter(*zip(*floors, strict=True), marker="_", s=120, color="crimson", label="read floor", zorder=3)
        axis.axhline(report["copy_gbs"], color="black", linestyle="--", linewidth=1, label="device copy")
        axis.axhline(0.9 * report["copy_gbs"], color="grey", linestyle=":", linewidth=1, label="90% of copy")
        for p, r in zip(positions, rows, strict=True):
            axis.text(p, r["ours_gbs"] + 40, f"{r['speedup']:.2f}x", ha="center", fontsize=7)
        axis.set_xticks(list(positions), labels, rotation=45, ha="right", fontsize=8)
        axis.set_ylabel("GB/s (bytes that must move / time)")
        product = "y = Aᵀx, A is M x N" if "trans" in path.name else "y = A x"
        axis.set_title(f"{report['gpu']} {dtype} GEMV {product} (label: speedup over cuBLAS)")
        axis.legend(loc="lower right", fontsize=8)
    return save_beside(fig, path)


if __name__ == "__main__":
    report_script("plot_gemv", __doc__, main, "results/gemv_nvidia-h200.json")
