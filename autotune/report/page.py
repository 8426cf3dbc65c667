"""The report as one HTML page: styles, charts and its one script inline, nothing fetched when it is
viewed (its Content-Security-Policy forbids any request). Every string from the database is escaped
where it is written into the page, and its control characters are shown as escapes."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from html import escape

from autotune import __version__
from autotune.core.outcome import Status
from autotune.core.output import printable
from autotune.report import svg
from autotune.report.data import GpuReport, Holdings, OpGroup, ReportData, Shape
from autotune.select.choose import VENDOR_MARGIN

FAILURE_ROWS = 20  # message kinds listed per GPU; the chart counts them all

# Writes the page's height as it opens (groups collapsed) into <body data-height>, then counts the
# charts that drew something (a mark with a size) into <body data-plots>, which the browser test
# compares with data-plots-expected. A chart in a closed <details> has no size, so each closed one is
# opened for the count and closed again before the page is painted.
CHECK_SCRIPT = """
(function () {
  document.body.dataset.height = String(document.documentElement.scrollHeight);
  var closed = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) { return !d.open; });
  closed.forEach(function (d) { d.open = true; });
  var plots = document.querySelectorAll("svg.plot");
  var drawn = 0;
  for (var i = 0; i < plots.length; i++) {
    var box = plots[i].getBoundingClientRect();
    var marks = plots[i].querySelectorAll(".mark");
    var shown = false;
    for (var j = 0; j < marks.length && !shown; j++) {
      var mark = marks[j].getBBox();
      shown = mark.width > 0 || mark.height > 0;
    }
    if (box.width > 0 && box.height > 0 && shown) drawn++;
  }
  closed.forEach(function (d) { d.open = false; });
  document.body.dataset.plots = String(drawn);
})();
"""

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 24px auto; max-width: 1180px; padding: 0 16px; }
h1 { margin-bottom: 4px; } h2 { margin-top: 40px; border-bottom: 2px solid #ccc; } h3 { margin-top: 28px; }
.meta, .caption { color: #555; } .note { background: #fff7e0; border-left: 4px solid #e0a800; padding: 6px 10px; }
nav li { margin: 2px 0; } nav a { white-space: nowrap; }
details.group { margin-top: 10px; border: 1px solid #e4e4e4; border-radius: 4px; padding: 4px 10px; }
details.group[open] { padding-bottom: 10px; } summary { cursor: pointer; }
.anchor { display: block; scroll-margin-top: 48px; }
summary h3 { display: inline; margin: 0; font-size: 15px; } summary .meta { margin-left: 8px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figcaption { color: #555; max-width: 560px; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; } td.config { font: 11px monospace; text-align: left; }
td.message { font: 12px monospace; text-align: left; max-width: 640px; overflow-wrap: anywhere; }
svg .title { font: bold 13px system-ui, sans-serif; } svg .tick { font: 11px system-ui, sans-serif; fill: #444; }
svg .label { font: 12px system-ui, sans-serif; fill: #333; } svg .note { font: 13px system-ui, sans-serif; fill: #555; }
svg .grid { stroke: #e6e6e6; } svg .axis { stroke: #888; } svg .frame { fill: none; stroke: #888; }
svg polyline.mark { stroke-width: 1.4; stroke-opacity: 0.8; } svg polyline.mark:hover { stroke-width: 3; }
svg .dots circle { fill: #1f77b4; fill-opacity: 0.35; }
svg circle.best { fill: #ff7f0e; stroke: #222; stroke-width: 0.6; }
svg line.floor { stroke: #d62728; stroke-width: 2; } svg rect.bar { fill: #d62728; fill-opacity: 0.75; }
"""


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


# Nothing may be loaded: no network, no file beside the page; only this script runs, and it only reads the page.
POLICY = f"default-src 'none'; style-src 'unsafe-inline'; script-src '{_script_hash(CHECK_SCRIPT)}'"


def _us(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _row(cells: Iterable[tuple[str, str]], tag: str = "td") -> str:
    """A table row of (class, text) cells; the text is escaped here."""
    return "<tr>" + "".join(f'<{tag} class="{css}">{escape(text)}</{tag}>' for css, text in cells) + "</tr>"


def _table(head: Sequence[tuple[str, str]], rows: Iterable[Iterable[tuple[str, str]]]) -> str:
    return "<table><thead>" + _row(head, "th") + "</thead><tbody>" + "".join(_row(r) for r in rows) + "</tbody></table>"


def _figure(chart: str, caption: str) -> str:
    return f"<figure>{chart}<figcaption>{escape(caption)}</figcaption></figure>"


def _convergence(shapes: Sequence[Shape], where: str) -> str:
    """The tuning runs this database's sweeps measured: best so far after each trial, per shape."""
    chart = svg.line_chart(
        [
            (f"{shape.label}: best {_us(shape.summary.best_us)} us", [(n, t / best) for n, t in points])
            for shape in shapes
            if (points := shape.best_so_far()) and (best := points[-1][1]) > 0
        ],
        title="Tuning convergence",
        subject=where,
        x_label="trial (in the order they ran)",
        y_label="best so far / final best",
        log_y=True,
        empty="no trial finished OK",
    )
    return _figure(
        chart,
        "The fastest time so far over the shape's final best, after each trial a sweep of this database "
        "measured, one line per shape (hover a line for its shape). A line that reaches 1 early found its "
        "best early.",
    )


def _kept_leaders(shapes: Sequence[Shape], where: str) -> str:
    """Imported problems hold only the fastest configs a records file kept: how close those are."""
    most = max((len(shape.ok_times()) for shape in shapes), default=0)
    chart = svg.line_chart(
        [(f"{shape.label}: best {_us(shape.summary.best_us)} us", shape.kept_ratios()) for shape in shapes],
        title=f"The {most} fastest configs kept per problem",
        subject=where,
        x_label="rank among the kept configs (1: the fastest)",
        y_label="time / the fastest",
        steps=False,
        empty="no kept trial is OK",
    )
    return _figure(
        chart,
        f"{len(shapes)} of these shapes hold only the leaders a records file kept, not the tuning run "
        "that found them: each line is one shape's kept configs, fastest first, over its fastest (hover "
        "a line for its shape). A flat line: the runners-up are as fast.",
    )


def _scatter(shapes: Sequence[Shape], where: str, floors: bool) -> str:
    chart = svg.scatter_chart(
        [(index, time) for index, shape in enumerate(shapes, start=1) for time in shape.ok_times()],
        best=[
            (index, shape.summary.best_us, f"#{index} {shape.label}: best {_us(shape.summary.best_us)} us")
            for index, shape in enumerate(shapes, start=1)
            if shape.summary.best_us is not None
        ],
        floors=[(index, shape.floor_us) for index, shape in enumerate(shapes, start=1) if shape.floor_us is not None],
        columns=len(shapes),
        title="Every stored config's time per shape",
        subject=where,
        x_label="shape (# in the table below)",
        y_label="time (us, log scale)",
        empty="no trial finished OK",
    )
    floor = ", a red dash the stored read floor of its matrix" if floors else ""
    return _figure(chart, f"Every stored OK trial's time, one column per shape; the orange dot is its best{floor}.")


def _shape_row(index: int, shape: Shape, compute_bound: bool, floors: bool) -> list[tuple[str, str]]:
    s = shape.summary
    row = [
        ("", str(index)),
        ("text", shape.label),
        ("", f"{s.ok}/{s.trials}"),
        ("", _us(s.best_us)),
        ("", f"{s.best_gbs:.0f}" if s.best_gbs else "-"),
    ]
    if compute_bound:
        tflops = shape.tflops
        row.append(("", f"{tflops:.1f}" if tflops is not None else "-"))
    if floors:
        ratio = shape.floor_ratio
        row += [("", _us(shape.floor_us)), ("", f"{ratio:.2f}" if ratio is not None else "-")]
    row.append(("config", shape.config_text))
    return row


def _shapes_table(group: OpGroup) -> str:
    """One row per shape; the read-floor columns only where a floor of the group's sizes is stored."""
    floors = any(shape.floor_us is not None for shape in group.shapes)
    head = [("", "#"), ("text", "shape"), ("", "ok/trials"), ("", "best µs"), ("", "GB/s")]
    if group.compute_bound:
        head.append(("", "TFLOP/s"))
    if floors:
        head += [("", "read floor µs"), ("", "best/floor")]
    head.append(("text", "best config"))
    rows = [_shape_row(i, shape, group.compute_bound, floors) for i, shape in enumerate(group.shapes, start=1)]
    stored = sum(shape.floor_us is not None for shape in group.shapes)
    note = (
        f"A read floor is stored for {stored} of {len(group.shapes)} sizes; best/floor is the best time over "
        "it (1: as fast as only reading the matrix). "
        if floors
        else ""
    )
    caption = note + "GB/s counts the bytes a kernel must move."
    return f'<p class="caption">{escape(caption)}</p>' + _table(head, rows)


def _group(gpu: GpuReport, group: OpGroup, anchor: str) -> str:
    """One op group, collapsed: its summary line names it, opening it shows its charts and table."""
    shapes = group.shapes
    where = f"{gpu.name}, {group.title}"
    tuned = [shape for shape in shapes if not shape.kept_only]
    kept = [shape for shape in shapes if shape.kept_only]
    charts = ([_convergence(tuned, where)] if tuned else []) + ([_kept_leaders(kept, where)] if kept else [])
    charts.append(_scatter(shapes, where, any(shape.floor_us is not None for shape in shapes)))
    vendor = sum(shape.best_is_vendor for shape in shapes)
    count = f"{len(shapes)} shape{'s' * (len(shapes) != 1)}" + (f", cuBLASLt best for {vendor}" if vendor else "")
    # The link target sits inside the group: following a link to it opens the group (one to the
    # <details> itself would only scroll to its summary, closed).
    return (
        f'<details class="group"><summary><h3>{escape(where)}</h3>'
        f'<span class="meta">{escape(count)}</span></summary><span class="anchor" id="{anchor}"></span>'
        f'<div class="charts">{"".join(charts)}</div>' + _shapes_table(group) + "</details>"
    )


def _failures(gpu: GpuReport) -> str:
    statuses = gpu.statuses()
    total = sum(statuses.values())
    failed = [(status, count) for status, count in statuses.items() if status != "ok"]
    chart = svg.bar_chart(
        failed, title="Failed trials by kind", subject=gpu.name, empty=f"no failed trial among {total} final trials"
    )
    kinds = gpu.failures()
    ok = statuses.get("ok", 0)
    caption = f"{ok} of {total} final trials ended OK" + ("; the bars count the others by status." if failed else ".")
    parts = [_figure(chart, caption)]
    if kinds:
        head = [("text", "status"), ("", "trials"), ("", "problems"), ("text", "message"), ("text", "e.g.")]
        rows = [
            [
                ("text", f.status),
                ("", str(f.trials)),
                ("", str(f.problems)),
                ("message", f.message),
                ("text", f.example),
            ]
            for f in kinds[:FAILURE_ROWS]
        ]
        more = len(kinds) - FAILURE_ROWS
        rest = f"{more} more kinds of failure; autotune show lists every trial." if more > 0 else ""
        rest = f'<p class="caption">{rest}</p>' if rest else ""
        listed = min(len(kinds), FAILURE_ROWS)
        parts.append(
            f"<details><summary>Failures by status and message ({listed} kind{'s' * (listed != 1)})</summary>"
            + _table(head, rows)
            + rest
            + "</details>"
        )
    return "".join(parts)


def _clocks(gpu: GpuReport) -> str:
    """Each OK trial's SM clock against the power it drew, where NVML recorded them."""
    series = [
        (
            group.title,
            [
                (t.power_w, t.sm_mhz)
                for shape in group.shapes
                for t in shape.trials
                if t.status is Status.OK and t.power_w is not None and t.sm_mhz is not None
            ],
        )
        for group in gpu.groups
    ]
    chart = svg.dots_chart(
        series,
        title="Clocks and power",
        subject=gpu.name,
        x_label="board power (W)",
        y_label="SM clock (MHz)",
        empty="no clocks recorded: install nvidia-ml-py where the sweeps run",
    )
    caption = (
        "Every OK trial's SM clock and power draw as it was timed (NVML), one color per op (the legend). Trials at the "
        "card's power limit that run below its top clock are power-bound."
    )
    return _figure(chart, caption)


def _gpu(gpu: GpuReport, number: int) -> str:
    shapes = gpu.shapes
    trials = sum(len(shape.trials) for shape in shapes)
    ok = sum(shape.summary.ok for shape in shapes)
    parts = [
        f'<section id="gpu-{number}"><h2>{escape(gpu.name)}</h2>',
        f'<p class="meta">{len(shapes)} problem{"s" * (len(shapes) != 1)}, {trials} final trials, {ok} OK.</p>',
        f'<h3 id="gpu-{number}-failures">Failures by kind</h3>',
        _failures(gpu),
        f'<h3 id="gpu-{number}-clocks">Clocks and power</h3>',
        _clocks(gpu),
    ]
    parts.append(f'<h3 id="gpu-{number}-shapes">Shapes per op</h3>')
    parts.append('<p class="caption">Each op group opens on a click.</p>')
    parts.extend(_group(gpu, group, f"gpu-{number}-{index}") for index, group in enumerate(gpu.groups, start=1))
    parts.append("</section>")
    return "".join(parts)


def _contents(data: ReportData) -> str:
    """Links to each GPU's failures, clocks and op groups (a closed group opens when its link is followed:
    the link's target is inside it)."""
    items = []
    for number, gpu in enumerate(data.gpus, start=1):
        groups = ", ".join(
            f'<a href="#gpu-{number}-{index}">{escape(group.title)}</a> ({len(group.shapes)})'
            for index, group in enumerate(gpu.groups, start=1)
        )
        items.append(
            f'<li><a href="#gpu-{number}"><b>{escape(gpu.name)}</b></a>: '
            f'<a href="#gpu-{number}-failures">failures</a>, <a href="#gpu-{number}-clocks">clocks</a>; '
            f"shapes per op: {groups}</li>"
        )
    return "<nav><ul>" + "".join(items) + "</ul></nav>"


def banner(held: Holdings) -> list[str]:
    """What the page compares, in sentences counted from the database rather than assumed."""
    problems = f"{held.problems} problem{'s' * (held.problems != 1)}"
    if held.vendor_timed:
        vendor = (
            f"cuBLASLt's algorithms are stored for {held.vendor_timed} of {problems} and take part in 'best' "
            f"(config cublas_algo=rank): cuBLASLt is the fastest for {held.vendor_best}."
        )
        if held.vendor_ties:
            vendor += (
                f" For {held.vendor_ties} of them our fastest kernel is within {VENDOR_MARGIN:.0%}: a tie, which "
                "`autotune best` and the launch path give to ours."
            )
    else:
        vendor = (
            f"No cuBLASLt time is stored for these {problems}: 'best' is among autotune's own kernels "
            "only (a sweep times cuBLASLt where it finds the library)."
        )
    if held.floors:
        floors = f"Read floors (the time to only read the matrix) are stored for {held.floors} of {problems}."
    else:
        floors = "No read floor is stored (autotune bench measures one), so the tables have no floor columns."
    sentences = [vendor, floors]
    if held.kept_only:
        sentences.append(
            f"{held.kept_only} of {problems} hold only the fastest configs a records file kept, not "
            "the tuning run that found them; their charts show those kept leaders."
        )
    return sentences


def plot_count(html: str) -> int:
    return html.count('<svg class="plot"')


def render(data: ReportData) -> str:
    """The whole page."""
    scope = f"GPU {data.gpu_filter!r}" if data.gpu_filter else "every GPU"
    when = data.generated_at.strftime("%Y-%m-%d %H:%M UTC")
    body = [
        "<header><h1>autotune report</h1>",
        f'<p class="meta">{escape(data.db_url)}, {escape(scope)}; written {when} by autotune {__version__}.</p>',
        f'<p class="note">{escape(" ".join(banner(data.holdings())))}</p>',
    ]
    if data.gpus:
        body.append(_contents(data))
    else:
        body.append("<p>The database holds no tuned problem yet: run <code>autotune sweep</code>.</p>")
    body.append("</header>")
    body.extend(_gpu(gpu, number) for number, gpu in enumerate(data.gpus, start=1))
    # A control character of the database's strings (ESC in a GPU name) is shown as an escape:
    # html.escape leaves it as it is, and `cat` of the file would replay it.
    main = printable("".join(body))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>autotune report</title><style>{STYLE}</style></head>"
        f'<body data-plots-expected="{plot_count(main)}">{main}<script>{CHECK_SCRIPT}</script></body></html>\n'
    )
