"""Small inline SVG charts (lines, scatters, dots, bars) with plain axes, written as text: the report needs
no plotting library and no script to draw them. Every text that reaches a chart is escaped here.

Each chart is an `<svg class="plot">`; what it draws (lines, groups of dots, bars, or the text that
says there is nothing to draw) carries the class `mark`, which the page's check counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 46
# The values a chart draws: finite, at most LIMIT from zero and, on a log axis, at least 1 / LIMIT.
# Others (a time of 1e-300 us written straight into a database) are left out: padding an axis of
# them underflows to 0 or overflows, and 0 has no logarithm.
LIMIT = 1e100
LEGEND_WIDTH, LEGEND_ROW = 170, 16  # a legend's column right of the plot, and its rows' height
# The twelve op groups of one GPU (GEMV and GEMM, both layouts, three dtypes) each get a color of their own.
COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
)  # fmt: skip


@dataclass(frozen=True)
class Scale:
    """Data values [lo, hi] onto pixels [start, end], linear or logarithmic."""

    lo: float
    hi: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        at = math.log10 if self.log else float
        lo, hi, v = at(self.lo), at(self.hi), at(value)
        if hi == lo:  # one value, no range: the middle
            return (self.start + self.end) / 2
        return self.start + (v - lo) / (hi - lo) * (self.end - self.start)


def drawable(value: float, log: bool = False) -> bool:
    """Whether `value` can sit on an axis (LIMIT)."""
    if not math.isfinite(value) or abs(value) > LIMIT:
        return False
    return value >= 1 / LIMIT if log else True


def _drawn(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]], log_y: bool
) -> list[tuple[str, list[tuple[float, float]]]]:
    """The named series with their undrawable points left out; a series left with none is dropped."""
    kept = [(name, [(x, y) for x, y in points if drawable(x) and drawable(y, log_y)]) for name, points in series]
    return [(name, points) for name, points in kept if points]


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values in [lo, hi], about `count` of them, 1, 2 or 5 times a power of ten apart."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    index = first
    while index * step <= hi + step * 1e-9:
        ticks.append(round(index * step, 12))
        index += 1
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2 and 5 times powers of ten in [lo, hi]; powers of ten only where those are too many; round
    linear steps where the range is too narrow for either."""
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    within = [m * 10.0**d for d in decades for m in (1, 2, 5) if lo <= m * 10.0**d <= hi]
    if len(within) > 10:
        powers = [10.0**d for d in decades if lo <= 10.0**d <= hi]
        return powers if len(powers) >= 2 else within
    return within if len(within) >= 3 else nice_ticks(lo, hi, 4)


def number(value: float) -> str:
    """A tick label: short, no trailing zeros."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-3:
        return f"{value:.0e}"
    if value == round(value):
        return str(round(value))
    return f"{value:.4g}"


def _padded(lo: float, hi: float, log: bool) -> tuple[float, float]:
    """The range a little wider than the data, so no mark sits on the frame."""
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
        pad = max((hi - lo) * 0.06, 0.01)
        return 10 ** (lo - pad), 10 ** (hi + pad)
    pad = (hi - lo) * 0.06 or max(abs(hi) * 0.05, 0.5)
    return lo - pad, hi + pad


def _frame(
    title: str,
    subject: str,
    x: Scale,
    y: Scale,
    x_ticks: Sequence[tuple[float, str]],
    x_label: str,
    y_label: str,
    body: Sequence[str],
    legend: Sequence[tuple[str, str]] = (),
) -> str:
    """A chart: title, grid, both axes with their ticks and labels, then `body` (the marks), and where
    `legend` names (name, color) pairs, a legend right of the plot."""
    parts = [_start(title, subject, HEIGHT, WIDTH + LEGEND_WIDTH if legend else WIDTH)]
    top, bottom, left, right = TOP, HEIGHT - BOTTOM, LEFT, WIDTH - RIGHT
    for value in log_ticks(y.lo, y.hi) if y.log else nice_ticks(y.lo, y.hi):
        py = y(value)
        parts.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}"/>')
        parts.append(f'<text class="tick" x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{number(value)}</text>')
    for value, label in x_ticks:
        px = x(value)
        parts.append(f'<line class="axis" x1="{px:.1f}" x2="{px:.1f}" y1="{bottom}" y2="{bottom + 4}"/>')
        parts.append(f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>')
    parts.append(
        f'<text class="label" x="{(left + right) / 2:.0f}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f'<text class="label" transform="translate(14 {(top + bottom) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    parts.extend(body)
    parts.extend(_legend(legend))
    parts.append("</svg>")
    return "".join(parts)


def _legend(entries: Sequence[tuple[str, str]]) -> list[str]:
    """One row per (name, color): a dot of the color and the name, right of the plot's frame."""
    parts = []
    for index, (name, color) in enumerate(entries):
        y = TOP + 8 + index * LEGEND_ROW
        parts.append(
            f'<g class="legend"><circle cx="{WIDTH + 6}" cy="{y}" r="4" fill="{color}"/>'
            f'<text class="label" x="{WIDTH + 16}" y="{y + 4}">{escape(name)}</text></g>'
        )
    return parts


def _x_ticks(lo: int, hi: int, most: int = 12) -> list[tuple[float, str]]:
    """Integer ticks from lo to hi, at most about `most` of them."""
    step = max(1, math.ceil((hi - lo + 1) / most))
    return [(float(v), str(v)) for v in range(lo, hi + 1, step)]


def _start(title: str, subject: str, height: int, width: int = WIDTH) -> str:
    """A chart's opening: the visible `title`, and for hovering and screen readers, what it is about."""
    about = escape(f"{title}: {subject}" if subject else title)
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{about}"><title>{about}</title>'
        f'<text class="title" x="{LEFT}" y="18">{escape(title)}</text>'
    )


def _empty(title: str, subject: str, text: str) -> str:
    """A chart with nothing to plot: its title and a sentence saying why."""
    return (
        _start(title, subject, HEIGHT // 3)
        + f'<text class="mark note" x="{WIDTH / 2:.0f}" y="{HEIGHT // 6 + 10}" text-anchor="middle">'
        + f"{escape(text)}</text></svg>"
    )


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    subject: str = "",
    x_label: str,
    y_label: str,
    log_y: bool = False,
    steps: bool = True,
    empty: str = "nothing to plot",
) -> str:
    """One line per named series of (x, y) points, a step line with `steps` (each value holds until
    the next); hovering a line shows its name."""
    drawn = _drawn(series, log_y)
    if not drawn:
        return _empty(title, subject, empty)
    xs = [px for _, points in drawn for px, _ in points]
    ys = [py for _, points in drawn for _, py in points]
    x_hi = max(max(xs), min(xs) + 1)
    x = Scale(min(xs) - 0.5, x_hi + 0.5, LEFT, WIDTH - RIGHT)
    y = Scale(*_padded(min(ys), max(ys), log_y), HEIGHT - BOTTOM, TOP, log_y)
    body = []
    for index, (name, points) in enumerate(drawn):
        color = COLORS[index % len(COLORS)]
        coords: list[str] = []
        for number_, (px, py) in enumerate(points):
            if number_ and steps:
                coords.append(f"{x(px):.1f},{y(points[number_ - 1][1]):.1f}")
            coords.append(f"{x(px):.1f},{y(py):.1f}")
        if len(points) == 1:
            body.append(
                f'<circle class="mark" cx="{x(points[0][0]):.1f}" cy="{y(points[0][1]):.1f}" r="2.5" '
                f'fill="{color}"><title>{escape(name)}</title></circle>'
            )
            continue
        body.append(
            f'<polyline class="mark" points="{" ".join(coords)}" fill="none" stroke="{color}">'
            f"<title>{escape(name)}</title></polyline>"
        )
    return _frame(title, subject, x, y, _x_ticks(int(min(xs)), int(max(xs))), x_label, y_label, body)


def scatter_chart(
    points: Sequence[tuple[int, float]],
    *,
    best: Sequence[tuple[int, float, str]],
    floors: Sequence[tuple[int, float]],
    columns: int,
    title: str,
    subject: str = "",
    x_label: str,
    y_label: str,
    empty: str = "nothing to plot",
) -> str:
    """Dots of (column, value) on a log axis, columns 1..`columns`; `best` marks one dot per column
    (with a hover text), `floors` a dash per column."""
    points = [(c, v) for c, v in points if drawable(v, log=True)]
    best = [(c, v, text) for c, v, text in best if drawable(v, log=True)]
    floors = [(c, v) for c, v in floors if drawable(v, log=True)]
    if not points:
        return _empty(title, subject, empty)
    ys = [v for _, v in points] + [v for _, v in floors]
    x = Scale(0.5, columns + 0.5, LEFT, WIDTH - RIGHT)
    y = Scale(*_padded(min(ys), max(ys), True), HEIGHT - BOTTOM, TOP, True)
    # Thousands of dots: the group is the mark (its box is theirs), not each dot, to keep the page small.
    body = ['<g class="mark dots">']
    body.extend(f'<circle cx="{x(c):.1f}" cy="{y(v):.1f}" r="2.2"/>' for c, v in points)
    body.append("</g>")
    half = max(2.0, min(8.0, (WIDTH - LEFT - RIGHT) / columns / 3))
    for column, value in floors:
        px, py = x(column), y(value)
        body.append(f'<line class="mark floor" x1="{px - half:.1f}" x2="{px + half:.1f}" y1="{py:.1f}" y2="{py:.1f}"/>')
    for column, value, text in best:
        body.append(
            f'<circle class="mark best" cx="{x(column):.1f}" cy="{y(value):.1f}" r="3.2">'
            f"<title>{escape(text)}</title></circle>"
        )
    return _frame(title, subject, x, y, _x_ticks(1, columns), x_label, y_label, body)


def dots_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    subject: str = "",
    x_label: str,
    y_label: str,
    empty: str = "nothing to plot",
) -> str:
    """Dots of (x, y) on linear axes, one color per named series, named in a legend (and on hovering
    a dot)."""
    drawn = _drawn(series, log_y=False)
    if not drawn:
        return _empty(title, subject, empty)
    xs = [px for _, points in drawn for px, _ in points]
    ys = [py for _, points in drawn for _, py in points]
    x = Scale(*_padded(min(xs), max(xs), False), LEFT, WIDTH - RIGHT)
    y = Scale(*_padded(min(ys), max(ys), False), HEIGHT - BOTTOM, TOP)
    body = []
    legend = []
    for index, (name, points) in enumerate(drawn):
        color = COLORS[index % len(COLORS)]
        legend.append((name, color))
        body.append(f'<g class="mark" fill="{color}"><title>{escape(name)}</title>')
        body.extend(f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="2.4"/>' for px, py in points)
        body.append("</g>")
    ticks = [(value, number(value)) for value in nice_ticks(x.lo, x.hi)]
    return _frame(title, subject, x, y, ticks, x_label, y_label, body, legend)


def bar_chart(bars: Sequence[tuple[str, int]], *, title: str, subject: str = "", empty: str = "nothing to plot") -> str:
    """Horizontal bars, one per (label, count), each with its count written beside it."""
    if not bars:
        return _empty(title, subject, empty)
    row, label_width = 24, 130
    height = TOP + row * len(bars) + 12
    most = max(count for _, count in bars) or 1
    span = WIDTH - label_width - RIGHT - 48
    parts = [_start(title, subject, height)]
    for index, (label, count) in enumerate(bars):
        top = TOP + index * row
        length = max(1.0, span * count / most)
        parts.append(
            f'<text class="tick" x="{label_width - 8}" y="{top + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect class="mark bar" x="{label_width}" y="{top + 3}" width="{length:.1f}" height="{row - 8}">'
            f"<title>{escape(label)}: {count}</title></rect>"
            f'<text class="tick" x="{label_width + length + 6:.1f}" y="{top + 15}">{count}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
