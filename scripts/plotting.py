"""What the plot scripts (scripts/plot_*.py) share: matplotlib without a display, our bars beside
cuBLAS's, and the figure written beside the report it draws."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display); imported on first use, so that a
    script's tables need no matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars_beside(axis: Any, ours: Sequence[float], theirs: Sequence[float], our_label: str, their_label: str) -> None:
    """A pair of bars at each position 0, 1, ...: ours on the left, theirs (cuBLAS's) on the right."""
    positions = range(len(ours))
    axis.bar([p - 0.2 for p in positions], ours, 0.4, label=our_label)
    axis.bar([p + 0.2 for p in positions], theirs, 0.4, label=their_label)


def save_beside(fig: Any, report: Path) -> Path:
    """Lay the figure out and write it next to its report, as the report's name with .png."""
    fig.tight_layout()
    out = report.with_suffix(".png")
    fig.savefig(out, dpi=110)
    return out


def plot_or_say_why_not(
    draw: Callable[[Mapping[str, Any], Path], Path], report: Mapping[str, Any], path: Path, say: Callable[[str], None]
) -> None:
    """A benchmark's last step: draw its plot and say where it went, or say why there is none (no
    matplotlib on the GPU machine is no reason to lose the JSON written before)."""
    try:
        say(f"wrote {draw(report, path)}")
    except ImportError as exc:
        say(f"no plot: {exc}")
