"""Plot results/model_<gpu>.json (scripts/bench_model.py) and print its table for docs/models.md.

python scripts/plot_model.py results/model_nvidia-h200.json   # writes results/model_nvidia-h200.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from plotting import bars_beside, pyplot, save_beside


def label(row: dict[str, Any]) -> str:
    return f"{row['layers']} layers, {row['weights']}, {'fused' if row['fused'] else 'unfused'}, {row['mode']}"


def table(report: dict[str, Any]) -> str:
    """GPU µs per decode step, the linears' kernels, wall µs per token and the logit checks, as Markdown."""
    lines = [
        f"transformers {report['transformers']}'s Llama at Llama-3-8B widths, float16, on one {report['gpu']}: "
        "µs per decode step.",
        "",
        "| layers | weights | fused | mode | torch GPU | ours GPU | speedup (95% interval) | torch linears "
        "| ours linears | torch wall | ours wall | max abs dlogit ours / torch | tokens agree |",
        "|---:|---|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in report["rows"]:
        low, high = r["gpu_ratio_ci95"]
        wall = (f"{r['torch_wall_us']:.0f} | {r['ours_wall_us']:.0f}") if r["torch_wall_us"] is not None else "- | -"
        cells = [
            r["layers"],
            r["weights"],
            "yes" if r["fused"] else "no",
            r["mode"],
            f"{r['torch_gpu_us']:.0f}",
            f"{r['ours_gpu_us']:.0f}",
            f"{r['gpu_ratio']:.3f}x ({low:.3f}-{high:.3f})",
            f"{r['torch_linear_us']:.0f}",
            f"{r['ours_linear_us']:.0f}",
            wall,
            f"{r['logit_dev']:.3f} / {r['torch_logit_dev']:.3f}",
            f"{r['tokens_agree']:.3f}",
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def main(path: Path) -> Path:
    plt = pyplot()
    report = json.loads(path.read_text())
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


if __name__ == "__main__":
    report_path = Path(sys.argv[1])
    print(table(json.loads(report_path.read_text())))
    print(f"wrote {main(report_path)}")
