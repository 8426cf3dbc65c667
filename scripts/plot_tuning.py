"""Convergence plot of results/tuning_<gpu>.json: best time found / optimum against seconds.

python scripts/plot_tuning.py results/tuning_nvidia-h200.json   # writes results/tuning_nvidia-h200.png
"""

from __future__ import annotations

from pathlib import Path

from autotune.bench.harness import pyplot, read_json, report_script, save_beside


def main(path: Path) -> Path:
    report = read_json(path)  # a file that cannot be read is said before a missing matplotlib
    plt = pyplot()
    # Largest matrix first, samplers in a fixed order and colour, however the report's rows are ordered
    # (a merged report lists re-run rows last).
    shapes = sorted({(r["m"], r["n"]) for r in report["rows"]}, key=lambda s: (-s[0] * s[1], s))
    colours = {"tpe": "C0", "random": "C1", "grid": "C2"}
    fig, axes = plt.subplots(1, len(shapes), figsize=(6.5 * len(shapes), 4.2), squeeze=False)
    for axis, (m, n) in zip(axes[0], shapes, strict=True):
        rows = [r for r in report["rows"] if (r["m"], r["n"]) == (m, n)]
        for row in sorted(rows, key=lambda r: list(colours).index(r["sampler"])):
            trace = row["trace"]
            axis.step(
                [t for t, _, _ in trace],
                [best / row["optimum_us"] for _, _, best in trace],
                where="post",
                label=f"{row['sampler']} (pool)",
                color=colours[row["sampler"]],
            )
        axis.axhline(1.02, color="grey", linestyle=":", label="within 2% of the optimum")
        axis.set_ylim(0.98, 1.6)
        axis.set_xscale("log")
        axis.set_xlabel("seconds since the search started (compiling included)")
        axis.set_ylabel("best time found / brute-force optimum")
        axis.set_title(f"{report['gpu']} hgemv {m}x{n}")
        axis.legend(fontsize=8)
    return save_beside(fig, path)


if __name__ == "__main__":
    report_script("plot_tuning", __doc__, main, "results/tuning_nvidia-h200.json")
