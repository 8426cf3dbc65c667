"""Plot results/model_<gpu>.json (scripts/bench_model.py) and print its table (docs/results.md has it).

python scripts/plot_model.py results/model_nvidia-h200.json   # writes results/model_nvidia-h200.png
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docs_results import model_table

from autotune.bench.harness import bars_beside, pyplot, read_json, report_script, save_beside


def label(row: dict[str, Any]) -> str:
    return f"{row['layers']} layers, {row['weights']}, {'fused' if row['fused'] else 'unfused'}, {row['mode']}"


def main(path: Path) -> Path:
    report = read_json(path)  # a file that cannot be read is said before a missing matplotlib
    plt = pyplot()
    rows = report["rows"]
    fig, axis = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4.5))
    bars_beside(axis, [r["ours_gpu_us"] for r in rows], [r["torch_gpu_us"] for r in rows], "autotune.patch", "torch")
    axis.set_xticks(range(len(rows)), [label(r).replace(", ", "\n") for r in rows], fontsize=8)
    axis.set_ylabel("GPU µs per decode step (CUDA graph replay)")
    axis.set_title(f"Llama at Llama-3-8B widths, batch 1 ({report['gpu']})")
    for index, r in enumerate(rows):
        axis.annotate(f"{r['gpu_ratio']:.2f}x", (index, max(r["ours_gpu_us"], r["torch_gpu_us"])), ha="center",
                      va="bottom", fontsize=8)  # fmt: skip
    axis.legend(loc="lower right")
    return save_beside(fig, path)


def table_and_plot(path: Path) -> str:
    """The report's Markdown table, then the plot written beside it."""
    return f"{model_table(read_json(path))}\nwrote {main(path)}"


if __name__ == "__main__":
    report_script("plot_model", __doc__, table_and_plot)
