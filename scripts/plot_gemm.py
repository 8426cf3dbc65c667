"""Plot results/gemm_<gpu>.json: TFLOP/s per shape, ours beside cuBLAS (label: cuBLAS time / ours).

python scripts/plot_gemm.py results/gemm_nvidia-h200.json   # writes results/gemm_nvidia-h200.png
"""

from __future__ import annotations

from pathlib import Path

from autotune.bench.harness import bars_beside, pyplot, read_json, report_script, save_beside


def main(path: Path) -> Path:
    report = read_json(path)  # a file that cannot be read is said before a missing matplotlib
    plt = pyplot()
    groups = {
        "square products": [r for r in report["rows"] if r["m"] > 16],
        "skinny products (M <= 16)": [r for r in report["rows"] if r["m"] <= 16],
    }
    groups = {name: rows for name, rows in groups.items() if rows}
    fig, axes = plt.subplots(len(groups), 1, figsize=(12, 4.5 * len(groups)), squeeze=False)
    for axis, (name, rows) in zip(axes[:, 0], groups.items(), strict=True):
        labels = [f"{r['dtype']}\n{r['m']}x{r['n']}x{r['k']}" for r in rows]
        positions = range(len(rows))
        ours, theirs = [r["ours_tflops"] for r in rows], [r["cublas_tflops"] for r in rows]
        bars_beside(axis, ours, theirs, "autotune (tuned)", "cuBLAS (torch.mm)")
        for p, r in zip(positions, rows, strict=True):
            axis.text(
                p, max(r["ours_tflops"], r["cublas_tflops"]) * 1.02, f"{r['ratio']:.2f}x", ha="center", fontsize=7
            )
        axis.set_xticks(list(positions), labels, fontsize=7, rotation=45, ha="right")
        axis.set_ylabel("TFLOP/s")
        axis.set_title(f"{report['gpu']} GEMM, {name} (label: cuBLAS time / ours)")
        axis.legend(loc="upper left", fontsize=8)
    return save_beside(fig, path)


if __name__ == "__main__":
    report_script("plot_gemm", __doc__, main, "results/gemm_nvidia-h200.json")
