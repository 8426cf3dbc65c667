"""Plot results/decode_<gpu>.json and print its table for docs/launch.md.

python scripts/plot_decode.py results/decode_nvidia-h200.json   # writes results/decode_nvidia-h200.png
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.bench.harness import bars_beside, pyplot, read_json, report_script, save_beside


def table(report: dict[str, Any]) -> str:
    """The step times and host costs as a Markdown table."""
    lines = [
        f"On one {report['gpu']}: µs per decode step (median), and host µs per call with the stream held.",
        "",
        "| model | GEMVs | read floor | ours eager | torch.mv eager | ours graph | torch.mv graph | graph speedup "
        "| host ours | host torch.mv | bare launch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['model']} | {r['calls']} | {r['floor_us']:.0f} | {r['ours_eager_us']:.0f} | "
            f"{r['torch_eager_us']:.0f} | {r['ours_graph_us']:.0f} | {r['torch_graph_us']:.0f} | "
            f"{r['torch_graph_us'] / r['ours_graph_us']:.2f}x | {r['ours_host_us_per_call']:.1f} | "
            f"{r['torch_host_us_per_call']:.1f} | {r['launch_floor_us']:.1f} |"
        )
    return "\n".join(lines)


def main(path: Path) -> Path:
    report = read_json(path)  # a file that cannot be read is said before a missing matplotlib
    plt = pyplot()
    rows = report["rows"]
    fig, axes = plt.subplots(1, len(rows), figsize=(6 * len(rows), 4.5), squeeze=False)
    for axis, row in zip(axes[0], rows, strict=True):
        labels = ["eager", "CUDA graph"]
        ours = [row["ours_eager_us"], row["ours_graph_us"]]
        theirs = [row["torch_eager_us"], row["torch_graph_us"]]
        if row.get("format") == "int4":  # int4 weights through autotune.linear, torch.mv on their float16 values
            bars_beside(axis, ours, theirs, f"autotune.linear (int4, g{row['group']})", "torch.mv (cuBLAS, float16)")
        else:
            bars_beside(axis, ours, theirs, "autotune.gemv", "torch.mv (cuBLAS)")
        axis.axhline(row["floor_us"], color="black", linestyle="--", linewidth=1, label="summed read floors")
        axis.set_xticks([0, 1], labels)
        axis.set_ylabel("µs per decode step")
        axis.set_title(f"{row['model']}: {row['calls']} GEMVs, {row['bytes'] / 1e9:.2f} GB of weights")
        axis.legend(loc="lower right")
    fig.suptitle(f"Decode steps on one {report['gpu']}")
    out = save_beside(fig, path)
    print(table(report))
    return out


if __name__ == "__main__":
    report_script("plot_decode", __doc__, main)
