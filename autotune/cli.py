"""The `autotune` command: each command parses its options, then calls one library function."""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from autotune import api, display, ops
from autotune.core.errors import AutotuneError
from autotune.core.log import cli_level, show_on_stderr
from autotune.core.outcome import Outcome
from autotune.core.output import json_text, printable
from autotune.core.problem import Problem
from autotune.select.choose import Choice
from autotune.tune.search import StudyResult

if TYPE_CHECKING:
    from autotune.tune.tuner import SweepReport

_QUIET = False  # -q: no progress bars either

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Tune GPU GEMV and GEMM kernels for the exact shapes you run, and answer which config is best.",
)


def _version(value: bool) -> None:
    if value:
        from autotune import __version__

        out.print(f"autotune {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, show_default=False, help="log what happens: -v each problem, -vv each trial"
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="errors only: no log lines, no progress bars")] = False,
) -> None:
    """Tune GPU GEMV and GEMM kernels for the exact shapes you run, and answer which config is best."""
    global _QUIET
    _QUIET = quiet
    show_on_stderr(cli_level(verbose, quiet))  # AUTOTUNE_LOG sets the level when neither is given


class _Console(Console):
    """Every string printed, table cells and titles included, passes through printable(); the
    console's own styling is added after, so it still reaches the terminal."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text), **kwargs)


def _sizes_environ() -> dict[str, str]:
    """The environment the consoles read, COLUMNS and LINES left out unless they are a positive count:
    rich takes COLUMNS=0 for a width of nothing (every line, errors too, printed empty) and fails at
    import on a digit that int() refuses (COLUMNS=²)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in ("COLUMNS", "LINES") or (value.isascii() and value.isdigit() and int(value) > 0)
    }


def _console(**options: Any) -> _Console:
    try:
        return _Console(_environ=_sizes_environ(), **options)
    except TypeError:  # a rich without its _environ parameter: it reads os.environ itself
        return _Console(**options)


out = _console(highlight=False, soft_wrap=True)
err = _console(stderr=True, highlight=False, soft_wrap=True)


def _print_json(value: Any) -> None:
    """`value` as indented JSON on stdout, coloured as rich colours it, with control and format
    characters (U+202E from a GPU name in the database) as \\u escapes: rich's print_json would
    parse the JSON and write them raw again."""
    text = JSONHighlighter()(json_text(value, indent=2))
    text.no_wrap = True
    out.print(text, soft_wrap=True)


def _op_help() -> str:
    """--op's help, from the registry: each shipped op with --dtype, or by its BLAS-style names."""
    shipped = ops.shipped()
    blas = [Problem(name, dtype, 1, 1).blas_name for name in shipped for dtype in ops.get(name).dtypes]
    named = ", ".join(f"{name} (default)" if name == ops.DEFAULT_OP else name for name in blas)
    return f"{', '.join(shipped[:-1])} or {shipped[-1]} (with --dtype), or {named}"


def _variant_help() -> str:
    """--variant's help: the forms each shipped op defines, the one a problem naming none gets first."""
    forms = []
    for name in ops.shipped():
        op = ops.get(name)
        if op.variants:
            plain = op.complete(Problem(name, op.dtypes[0], 1, 1, 1)).variant or "none"
            forms.append(f"{name}: {', '.join(op.variants)} (default {plain})")
    return f"a form the op defines; {'; '.join(forms)}; other ops: none"


Op = Annotated[str | None, typer.Option("--op", help=_op_help())]
K = Annotated[int | None, typer.Option("--k", help="GEMM, QGEMM: the reduction length (columns of A, or of x)")]
Trans = Annotated[
    bool,
    typer.Option("--trans", help="GEMV: y = Aᵀx (x has M entries, y has N); GEMM: B stored N x K (C = A·Bᵀ)"),
]
Dtype = Annotated[str | None, typer.Option("--dtype", help="float32, float16 or bfloat16")]
# A problem of an op that defines them: each input array's dtype, and a form of the op (core/problem.py).
Inputs = Annotated[
    str, typer.Option("--inputs", help="each input array's dtype where they differ from --dtype: int4,float16")
]
Variant = Annotated[str, typer.Option("--variant", help=_variant_help())]
# The problem options of the commands that take one shape, a shapes file or the standard set.
OptionalM = Annotated[int | None, typer.Option("--m", help="rows of A (with --n); default: the standard shape set")]
OptionalN = Annotated[
    int | None, typer.Option("--n", help="GEMV: columns of A; GEMM: columns of B and C; QGEMM: rows of W")
]
ShapesFile = Annotated[Path | None, typer.Option("--shapes", help="file of 'M N' lines ('M N K' for GEMM)")]
Db = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL or SQLite file (default: AUTOTUNE_DB, then a per-user file)")
]
Gpu = Annotated[str | None, typer.Option("--gpu", help="GPU name, e.g. 'NVIDIA H200' (default: this machine's)")]
NoShipped = Annotated[
    bool,
    typer.Option(
        "--no-shipped", help="a new database starts empty: the shipped H100/H200 records are never imported into it"
    ),
]


def _config_text(config: dict[str, int] | None, problem: Problem) -> str:
    """Parameters in the order of the problem's space (records store them sorted)."""
    return " ".join(display.config_items(config, problem))


Wide = Annotated[
    bool, typer.Option("--wide", help="one line per row, nothing wrapped or cut (for a wide terminal, grep)")
]


def _width(wide: bool = False) -> int | None:
    """The width output wraps at: the terminal's (COLUMNS where set), or none with --wide."""
    return None if wide else _columns(out)


def _columns(console: Console) -> int:
    """COLUMNS as it is now, else the console's width: rich reads COLUMNS once, when a console is
    made (at import), and a program that sets it later (a test, an embedding shell) means it."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isascii() and columns.isdigit() and int(columns) > 0 else console.width


def _print_lines(lines: list[str]) -> None:
    out.print("\n".join(lines), markup=False)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """'1 trial', '2 trials': a count with its noun in the right number, in every message."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _us(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _whole(value: float | None) -> str:
    """A clock or a power, where it was recorded (NVML)."""
    return "-" if value is None else f"{value:.0f}"


def _gbs(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"


class _BarProgress:
    """A progress bar per problem, with the best time so far; shown from the first problem on, so
    input errors found before any tuning stay a single line."""

    def __init__(self, bar: Progress) -> None:
        self._bar = bar
        self._task: Any = None
        self.started = False

    def problem_started(self, problem: Problem, index: int, total: int, trials: int) -> None:
        if not self.started:
            self._bar.start()
            self.started = True
        self._task = self._bar.add_task(
            escape(f"[{index + 1}/{total}] {display.problem_text(problem)}"), total=trials, best=""
        )

    def trial_done(self, problem: Problem, outcome: Outcome, result: StudyResult) -> None:
        best = f"best {result.best_us:.2f} us" if result.best_us is not None else ""
        self._bar.update(self._task, completed=result.measured + result.reused, best=best)

    def problem_done(self, problem: Problem, result: StudyResult, seconds: float) -> None:
        self._bar.update(self._task, completed=self._bar.tasks[-1].total)


@app.command()
def sweep(
    op: Op = None,
    m: OptionalM = None,
    n: OptionalN = None,
    k: K = None,
    trans: Trans = False,
    shapes: ShapesFile = None,
    dtype: Dtype = None,
    trials: Annotated[
        int,
        typer.Option(
            "--trials",
            help="trials per shape, counting stored ones (with the default trials and patience, a shape that "
            "no stored sweep or tuned neighbour seeds gets 128 trials and a patience of 64)",
        ),
    ] = api.DEFAULT_TRIALS,
    timeout: Annotated[float | None, typer.Option("--timeout", help="seconds per shape")] = None,
    patience: Annotated[
        int, typer.Option("--patience", min=0, help="stop a shape after N trials without 1% gain (0: never)")
    ] = api.DEFAULT_PATIENCE,
    sampler: Annotated[
        str, typer.Option("--sampler", help="tpe, tpe-valid, tpe-local, tpe-ranked, tpe-fresh, random or grid")
    ] = api.DEFAULT_SAMPLER,
    seed: Annotated[int | None, typer.Option("--seed", help="sampler seed")] = None,
    device: Annotated[int, typer.Option("--device", help="GPU index")] = 0,
    stale: Annotated[
        bool,
        typer.Option("--stale", help="re-tune stored problems measured with another kernel source, driver or CUDA"),
    ] = False,
    pending: Annotated[
        bool, typer.Option("--pending", help="tune the problems queued for this GPU model, most asked first")
    ] = False,
    retime: Annotated[
        bool,
        typer.Option(
            "--retime", help="after a kernel edit: re-time the stale problems' best, re-sweep only where 2% slower"
        ),
    ] = False,
    lease: Annotated[
        float | None,
        typer.Option("--lease", help="seconds a claim on a problem lasts unless renewed (default 120; 1 to a week)"),
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option("--devices", help="several GPUs at once: 'all' or indices such as 0,1 (one process each)"),
    ] = None,
    db: Db = None,
    no_shipped: NoShipped = False,
    inputs: Inputs = "",
    variant: Variant = "",
) -> None:
    """Tune shapes on this machine's GPU; every measurement goes into the database. Sweeps on several
    machines sharing one database (--db) split the problems between them."""
    options: dict[str, Any] = dict(
        inputs=inputs,
        variant=variant,
        shipped=not no_shipped,
        trans=trans,
        dtype=dtype,
        shapes_file=shapes,
        trials=trials,
        timeout=timeout,
        patience=patience or None,
        sampler=sampler,
        seed=seed,
        db=db,
        stale=stale,
        pending=pending,
        retime=retime,
        lease=lease,
    )
    if devices is not None:
        if device != 0:
            raise AutotuneError("give --device or --devices, not both")
        from autotune.tune.fleet import lease as claim_lease

        claim_lease(lease)  # a bad lease refused once, not by every GPU's process
        began = time.perf_counter()
        level = logging.getLogger("autotune").getEffectiveLevel()
        results = api.sweep_devices(devices, log_level=min(level, logging.INFO), op=op, m=m, n=n, k=k, **options)
        for result in results:
            if result.report is not None:
                _print_sweep(result.report, f"GPU {result.device}: ")
        err.print(f"{counted(len(results), 'GPU')}, {time.perf_counter() - began:.1f} s", markup=False)
        failed = [f"GPU {r.device}: {r.error}" for r in results if r.error is not None]
        if failed:
            raise AutotuneError("; ".join(failed))
        return
    sweep_with_bar(lambda progress: api.sweep(op, m, n, k, device=device, progress=progress, **options))


def sweep_with_bar(run: Callable[[_BarProgress], SweepReport]) -> SweepReport:
    """`run(progress)` under the sweep's progress bars on stderr, then its closing table on stdout
    (what `autotune sweep` shows, and autotune.tune_model too)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
    )
    bar = Progress(*columns, console=err, transient=False, auto_refresh=True, disable=_QUIET)
    progress = _BarProgress(bar)
    try:
        report = run(progress)
    finally:
        if progress.started:
            bar.stop()
    _print_sweep(report)
    return report


# How a study usually ends: the sweep's table says nothing more. Any other end (a timeout, a space
# exhausted, a setup that failed) is printed under its row.
_USUAL_STOPS = ("budget reached", "already tuned", "target reached", "no 1% improvement in ")


def _print_sweep(report: SweepReport, title: str = "") -> None:
    """The sweep's table, one problem a row and its best config wrapped by key, as `list` prints
    (an 80-column terminal reads it): trials measured now + found stored, and how many failed."""
    out.print(f"{title}{report.gpu.name}  ({report.db_url})", markup=False)
    vendor = any(item.result.vendor_us is not None for item in report.problems)  # cuBLASLt timed beside
    headers = ["op", "shape", "best us", *(["cuBLAS us"] if vendor else []), "GB/s", "new+stored", "s", "best config"]
    rows = []
    for item in report.problems:
        r = item.result
        failed = sum(v for k, v in r.statuses.items() if k != "ok")
        best_gbs = None
        if r.best_us is not None:
            best_gbs = ops.for_problem(item.problem).bytes_moved(item.problem) / r.best_us / 1e3
        trials = f"{r.measured}+{r.reused}" + (f", {failed} failed" if failed else "")
        cells = [
            *_op_and_shape(item.problem),
            _us(r.best_us),
            *([_us(r.vendor_us)] if vendor else []),
            _gbs(best_gbs),
            trials,
            f"{item.seconds:.0f}",
            _config_text(r.best_config, item.problem) if r.best_config else "-",
        ]
        usual = r.stopped.startswith(_USUAL_STOPS)
        notes = [] if usual else [f"stopped: {r.stopped}"]
        if r.unmeasured_first:  # a patience stop before the warm start's end: say what a longer one adds
            notes.append(
                f"stopped before {r.unmeasured_first} of the configs queued first (stored and neighbouring "
                "leaders, seed tilings) were measured: a larger --patience measures them"
            )
        rows.append(display.Row(cells, notes))
    numbers = range(2, len(headers) - 1)
    _print_lines(display.table_lines(headers, rows, _width(), right=[i for i in numbers if headers[i] != "new+stored"]))


M = Annotated[int, typer.Option("--m", help="rows of A")]
N = Annotated[int, typer.Option("--n", help="GEMV: columns of A; GEMM: columns of B and C; QGEMM: rows of W")]


@app.command()
def best(
    m: M,
    n: N,
    k: K = None,
    op: Op = None,
    trans: Trans = False,
    dtype: Dtype = None,
    gpu: Gpu = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    db: Db = None,
    inputs: Inputs = "",
    variant: Variant = "",
) -> None:
    """Which config to run for this shape on this GPU (measured, estimated, or the safe default); on a
    machine without a GPU and without --gpu, the answer for every GPU the database holds."""
    every_gpu = gpu is None and api.local_gpu_name() is None
    if every_gpu:
        choices = api.best_on_every_gpu(op, m, n, k, trans=trans, dtype=dtype, db=db, inputs=inputs, variant=variant)
    else:
        choices = [api.best(op, m, n, k, trans=trans, dtype=dtype, gpu=gpu, db=db, inputs=inputs, variant=variant)]
    if as_json:
        # One answer is an object; the answers for every stored GPU are a list, however many there are.
        dicts = [choice.to_dict() for choice in choices]
        _print_json(dicts if every_gpu else dicts[0])
        return
    for choice in choices:
        _print_choice(choice)


def _print_choice(choice: Choice) -> None:
    timing = ""
    op = ops.for_problem(choice.problem)
    if choice.predicted_us is not None:
        # This shape was not timed: the cost model's time for it, never another shape's measurement.
        timing = f": predicted {choice.predicted_us:.2f} us, {op.rate(choice.problem, choice.predicted_us)}"
    elif choice.time_us is not None:
        what = (
            "measured"
            if choice.source == "measured"
            else f"measured on {'x'.join(map(str, choice.from_shape))}"
            if choice.from_shape
            else ""
        )
        timing = f": {what} {choice.time_us:.2f} us"
        if choice.gbs and not op.compute_bound:
            timing += f", {choice.gbs:.0f} GB/s"  # as measured
        else:
            # The rate of the shape that was timed: this one, or the tuned neighbour it is estimated from.
            timed = choice.problem
            if choice.from_shape:
                m, n, *k = choice.from_shape
                timed = replace(timed, m=m, n=n, k=k[0] if k else 0)
            timing += f", {op.rate(timed, choice.time_us)}"
    # Each line wraps at spaces to the terminal's width, its continuation lines indented under it.
    width = _width()
    lines = display.wrap(
        f"{display.problem_text(choice.problem)} on {choice.gpu} [{choice.source}]{timing}", width, "  "
    )
    lines += display.hanging("config: ", _config_text(choice.config, choice.problem), width)
    if choice.basis:
        lines += display.hanging("predicted from: ", choice.basis, width)
    for note in choice.notes:
        lines += display.hanging("note: ", note, width)
    _print_lines(lines)


@app.command()
def bench(
    m: M,
    n: N,
    k: K = None,
    op: Op = None,
    trans: Trans = False,
    dtype: Dtype = None,
    db: Db = None,
) -> None:
    """Time this shape's chosen config beside cuBLAS (torch) on this GPU, same method, same run."""
    row, copy_gbs, choice = api.bench(op, m, n, k, trans=trans, dtype=dtype, db=db)
    config = _config_text(choice.config, choice.problem)
    out.print(
        f"{display.problem_text(choice.problem)} on {choice.gpu} [{choice.source}] config: {config}", markup=False
    )
    if ops.for_problem(choice.problem).compute_bound:
        out.print(
            f"autotune {row.ours_us:.2f} us ({row.ours_tflops:.1f} TFLOP/s)   "
            f"cuBLAS {row.cublas_us:.2f} us ({row.cublas_tflops:.1f} TFLOP/s)   ratio {row.ratio:.2f}x",
            markup=False,
        )
        return
    out.print(
        f"autotune {row.ours_us:.2f} us ({row.ours_gbs:.0f} GB/s, {row.pct_copy:.0f}% of copy {copy_gbs:.0f} GB/s)"
        f"   cuBLAS {row.cublas_us:.2f} us ({row.cublas_gbs:.0f} GB/s)   speedup {row.speedup:.2f}x",
        markup=False,
    )
    if row.floor_us is not None:
        out.print(
            f"read floor {row.floor_us:.2f} us ({row.floor_kernel}): no kernel that reads the matrix can beat it;"
            f" at it the speedup would be {row.bound:.2f}x",
            markup=False,
        )


@app.command("list")
def list_(
    gpu: Annotated[str | None, typer.Option("--gpu", help="only this GPU")] = None,
    op: Annotated[str | None, typer.Option("--op", help="only this op")] = None,
    dtype: Dtype = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON, configs in full")] = False,
    wide: Wide = False,
    db: Db = None,
    variant: Variant = "",
) -> None:
    """What the database holds: each tuned problem with its trial counts and the config `autotune
    best` answers for it (a table per GPU, the config wrapped by key; --wide: one line a problem)."""
    rows = api.list_problems(gpu=gpu, op=op, dtype=dtype, db=db, variant=variant.strip())
    listed = list(zip(rows, api.listed_choices(rows, db), strict=True))
    if as_json:
        _print_json([_summary_dict(r, choice) for r, choice in listed])
        return
    if rows:
        _print_lines(_listing_lines(listed, wide))
    elif gpu is not None:  # a GPU the database holds (api.stored_gpu refused any other), none of it asked for
        out.print(f"nothing tuned for {gpu!r}{' of that op' if op or dtype or variant else ''}", markup=False)
    elif op or dtype or variant:
        out.print("nothing tuned of that op (`autotune list` shows every op)", markup=False)
    else:
        out.print("nothing tuned yet: run `autotune sweep`")


def _listing_lines(listed: list[tuple[Any, Choice]], wide: bool) -> list[str]:
    """`list`'s tables: one per GPU under its name, or with --wide one table, a line a problem."""
    headers = ["op", "shape", "ok/trials", "best us", "GB/s", "best config"]
    if wide:
        rows = [display.Row([api.short_gpu_name(r.gpu_name), *_listing_cells(r, c)]) for r, c in listed]
        return display.table_lines(["gpu", *headers], rows, None, right=(4, 5))
    lines: list[str] = []
    for gpu_name in dict.fromkeys(r.gpu_name for r, _ in listed):
        rows = [display.Row(_listing_cells(r, c)) for r, c in listed if r.gpu_name == gpu_name]
        lines += ([""] if lines else []) + [gpu_name]
        lines += display.table_lines(headers, rows, _width(), right=(3, 4))
    return lines


def _listing_cells(r: Any, choice: Choice) -> list[str]:
    """A listed problem's cells: its counts, and what `best` answers (a cuBLASLt time that ties
    ours answers ours, so its time and config are ours)."""
    config = " ".join(display.config_items(choice.config, r.problem, brief=True))
    if choice.source != "measured":  # no trial of the current kernels: what best estimates
        config = f"[{choice.source}] {config}"
    return [
        *_op_and_shape(r.problem),
        f"{r.ok}/{r.trials}",
        _us(choice.time_us),
        _gbs(choice.gbs),
        config,
    ]


def _op_and_shape(problem: Problem) -> list[str]:
    """A problem in two short cells, 'hgemmᵀ' marking the transposed layout (B stored N x K for a GEMM,
    y = Aᵀx for a GEMV) and a variant following the op ('rowsum/g128'), for tables that must fit a
    terminal. Input dtypes (rare) are left to `best` and `show`, which name the whole problem."""
    op = problem.blas_name + ("ᵀ" if problem.trans else "") + (f"/{problem.variant}" if problem.variant else "")
    return [op, "x".join(map(str, problem.shape))]


def _summary_dict(r: Any, choice: Choice) -> dict[str, Any]:
    return {
        "gpu": r.gpu_name,
        "op": r.problem.blas_name,
        "trans": bool(r.trans),
        "m": r.m,
        "n": r.n,
        **({"k": r.k} if r.k else {}),
        **({"inputs": list(r.problem.inputs)} if r.problem.inputs else {}),
        **({"variant": r.variant} if r.variant else {}),
        "trials": r.trials,
        "ok": r.ok,
        # What `best` answers, as the table shows it.
        "best_us": choice.time_us,
        "best_gbs": choice.gbs,
        "config": choice.config,
        "source": choice.source,
    }


@app.command()
def show(
    m: M,
    n: N,
    k: K = None,
    op: Op = None,
    trans: Trans = False,
    dtype: Dtype = None,
    gpu: Gpu = None,
    limit: Annotated[int, typer.Option("--limit", min=0, help="rows to show (0: all)")] = 20,
    wide: Wide = False,
    db: Db = None,
    inputs: Inputs = "",
    variant: Variant = "",
) -> None:
    """Every trial stored for one problem, fastest first, failures with their reason; on a machine
    without a GPU and without --gpu, for every GPU the database holds."""
    problem, found = api.problem_trials(
        op, m, n, k, trans=trans, dtype=dtype, gpu=gpu, db=db, inputs=inputs, variant=variant
    )
    for gpu_name, trials in found:
        _print_trials(problem, gpu_name, trials, limit, wide)


def _print_trials(problem: Problem, gpu_name: str, trials: list[Any], limit: int, wide: bool) -> None:
    """A table of the trials: each config in full, key by key, wrapped in its column or on lines
    under its row where the terminal leaves too little room; a failure's message on a line under
    it. With --wide a line a trial, the message as a last column (where any trial has one)."""
    shown = trials if limit == 0 else trials[:limit]
    if not trials:
        out.print(f"no trials stored for {display.problem_text(problem)} on {gpu_name}", markup=False)
    headers = ["status", "us", "GB/s", "rounds", "SM MHz", "mem MHz", "W", "config"]
    rows = []
    for t in shown:
        message = (t.message.splitlines() or [""])[-1]
        cells = [
            t.status.value,
            _us(t.time_us),
            _gbs(t.gbs),
            str(t.rounds),
            *(_whole(value) for value in (t.sm_mhz, t.mem_mhz, t.power_w)),
            _config_text(t.config, problem),
        ]
        rows.append(display.Row(cells, [f"message: {message}"] if message and not wide else []))
    if wide and any(t.message.strip() for t in shown):
        headers.append("message")
        for row, t in zip(rows, shown, strict=True):
            row.cells = [*row.cells, (t.message.splitlines() or [""])[-1]]
    if shown:
        right = range(1, 7)  # the numbers
        _print_lines(
            [f"{display.problem_text(problem)} on {gpu_name}", *display.table_lines(headers, rows, _width(wide), right)]
        )
    if len(shown) < len(trials):
        out.print(f"({len(trials) - len(shown)} more; --limit 0 shows all)")


@app.command()
def queue(
    add: Annotated[bool, typer.Option("--add", help="queue the problems given (the standard set by default)")] = False,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU model: whose queue to show, or to add to")] = None,
    op: Op = None,
    m: Annotated[int | None, typer.Option("--m", help="with --add: rows of A")] = None,
    n: Annotated[int | None, typer.Option("--n", help="with --add: GEMV columns of A; GEMM columns of B")] = None,
    k: K = None,
    trans: Trans = False,
    shapes: Annotated[Path | None, typer.Option("--shapes", help="with --add: file of 'M N' ('M N K') lines")] = None,
    dtype: Dtype = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    db: Db = None,
    no_shipped: NoShipped = False,
    inputs: Inputs = "",
    variant: Variant = "",
) -> None:
    """The problems queued for tuning, which `sweep --pending` claims: asked for by the launch path,
    or added with --add for the machines of a GPU model to share."""
    if no_shipped:
        api.without_shipped(db)
    if add:
        if gpu is None:
            raise AutotuneError("queue --add needs --gpu: the GPU model whose machines will tune the problems")
        count = api.enqueue(
            gpu, op, m, n, k, trans=trans, dtype=dtype, shapes_file=shapes, db=db, inputs=inputs, variant=variant
        )
        err.print(f"queued {counted(count, 'problem')} for {gpu}", markup=False)
        return
    options = {"--op": op, "--m": m, "--n": n, "--k": k, "--trans": trans, "--shapes": shapes, "--dtype": dtype}
    given = [flag for flag, value in {**options, "--inputs": inputs, "--variant": variant}.items() if value]
    if given:  # a listing shows every queued problem: a filter that is silently not applied misleads
        raise AutotuneError(f"{given[0]} describes problems to add: give it with --add (the listing shows them all)")
    rows = api.queued(gpu=gpu, db=db)
    if as_json:
        _print_json([_queue_dict(row) for row in rows])
        return
    table = Table(box=None, pad_edge=False)
    for column in ("gpu", "op", "shape", "state", "asked", "claims", "by", "lease left"):
        table.add_column(column, no_wrap=True)
    now = datetime.now(timezone.utc)
    for row in rows:
        left = "-"
        if row.state == "claimed" and row.lease_until is not None:
            left = f"{(row.lease_until - now).total_seconds():.0f} s"
        table.add_row(
            escape(api.short_gpu_name(row.gpu_name)),
            *_op_and_shape(row.problem),
            row.state,
            str(row.asked),
            str(row.claims),
            escape(row.owner or "-"),
            left,
        )
    if rows:
        out.print(table)
    else:
        out.print("nothing queued", markup=False)


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _queue_dict(row: Any) -> dict[str, Any]:
    return {
        "gpu": row.gpu_name,
        "op": row.problem.blas_name,
        **{name: getattr(row.problem, name) for name in ("dtype", "m", "n", "k", "trans")},
        **({"inputs": list(row.problem.inputs)} if row.problem.inputs else {}),
        **({"variant": row.problem.variant} if row.problem.variant else {}),
        "state": row.state,
        "asked": row.asked,
        "claims": row.claims,
        "owner": row.owner,
        "lease_until": _stamp(row.lease_until),
        "queued_at": _stamp(row.queued_at),
        "done_at": _stamp(row.done_at),
    }


@app.command()
def export(
    output: Annotated[Path, typer.Option("--output", "-o", help="the file to write (a folder for bundle)")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl (a records file), csv or bundle")] = "jsonl",
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="only this GPU (jsonl: needed where several; bundle: needed)")
    ] = None,
    top: Annotated[
        int,
        typer.Option(
            "--top", min=1, help="fastest configs of our kernels per problem (its best cuBLASLt algorithm comes too)"
        ),
    ] = 1,
    op: Annotated[
        list[str] | None, typer.Option("--op", help="bundle: only this op (gemv, gemm or hgemv, sgemm...), repeatable")
    ] = None,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial", help="bundle: write it also where problems must be left out (the manifest lists them)"
        ),
    ] = False,
    db: Db = None,
) -> None:
    """The best configs per problem, measured with the current kernels: a records file that `import`
    reads back, CSV for spreadsheets, or a bundle (kernels, manifest.json and a C header) that a C or
    C++ program loads with the CUDA driver API (docs/deploy.md)."""
    from autotune import exports

    count = exports.export(output, fmt=fmt, gpu=gpu, top=top, db=db, op=op or (), allow_partial=allow_partial)
    what = counted(count, "entry", "entries") if fmt == "bundle" else counted(count, "row")
    err.print(f"wrote {what} to {printable(str(output))}", markup=False)


@app.command("import")
def import_(
    path: Annotated[Path, typer.Argument(help="a records file (autotune export --format jsonl)")],
    db: Db = None,
    no_shipped: NoShipped = False,
) -> None:
    """Add a records file's trials to the database, checked line by line first; all or nothing."""
    from autotune import exports

    count = exports.import_file(path, db=db, shipped=not no_shipped)
    err.print(_import_summary(count, path), markup=False)


def _import_summary(count: Any, path: Path) -> str:
    """What an import did, out of what it compared: 'imported 0 trials from x.jsonl (N in the
    file, all stored already)' for a re-import, or an export of the shipped records."""
    replacing = f" ({count.replaced} replacing a shipped row's time)" if count.replaced else ""
    done = f"imported {counted(int(count), 'trial')}{replacing} from {printable(str(path))}"
    if not count.already:
        return done
    if not count:
        return f"{done} ({count.compared} in the file, {'it' if count.compared == 1 else 'all'} stored already)"
    return f"{done} ({count.compared} in the file; {count.already} stored already)"


@app.command()
def gpus(db: Db = None) -> None:
    """GPUs of this machine and GPUs the database holds measurements for."""
    from autotune.core.fingerprint import local_gpus

    local = local_gpus()
    out.print(
        "this machine: " + (", ".join(f"{g.name} (driver {g.driver})" for g in local) or "no NVIDIA GPU"), markup=False
    )
    table = Table(title="in the database")
    for column in ("name", "cc", "SMs", "L2 MiB", "memory GiB", "driver", "CUDA", "uuid"):
        table.add_column(column)
    for g in api.store(db).gpus():
        table.add_row(
            escape(g.name),
            g.compute_capability,
            str(g.sm_count),
            f"{g.l2_bytes / 2**20:.0f}",
            f"{g.memory_bytes / 2**30:.0f}",
            g.driver,
            g.cuda,
            g.uuid,
        )
    out.print(table)


@app.command()
def report(
    output: Annotated[Path, typer.Option("--output", "-o", help="the HTML file to write")] = Path("report.html"),
    gpu: Annotated[str | None, typer.Option("--gpu", help="only this GPU (default: every GPU stored)")] = None,
    db: Db = None,
) -> None:
    """One self-contained HTML page of the database: per GPU and op, the best time per shape beside the
    read floor, tuning convergence, every config's time per shape, and failures by kind."""
    from autotune.report import write_report

    data = write_report(output, gpu=gpu, db=db)
    problems = counted(sum(len(g.shapes) for g in data.gpus), "problem")
    out.print(f"report written to {output.resolve()} ({problems} on {counted(len(data.gpus), 'GPU')})", markup=False)


@app.command()
def warmup(
    op: Op = None,
    m: OptionalM = None,
    n: OptionalN = None,
    k: K = None,
    trans: Trans = False,
    shapes: ShapesFile = None,
    dtype: Dtype = None,
    stored: Annotated[
        bool, typer.Option("--stored", help="every problem the database holds for the GPU (of --op/--dtype if given)")
    ] = False,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="for this GPU of the database (default: this machine's, else all)")
    ] = None,
    device: Annotated[int, typer.Option("--device", help="GPU index")] = 0,
    wide: Wide = False,
    db: Db = None,
    inputs: Inputs = "",
    variant: Variant = "",
) -> None:
    """Ready every kernel these problems run (shipped ones unpacked, others compiled into the cache),
    and load them on this machine's GPU: a deployment pays it when its image is built."""
    if stored:
        if m is not None or n is not None or k is not None or shapes is not None or inputs or variant:
            raise AutotuneError(
                "--stored takes the database's problems: give no --m, --n, --k, --shapes, --inputs or --variant with it"
            )
        wanted = api.stored_problems(op, dtype, gpu=gpu, db=db)
    else:
        wanted = api.problems(op, m, n, k, trans=trans, dtype=dtype, shapes_file=shapes, inputs=inputs, variant=variant)
    prepared = api.prepare(wanted, gpu=gpu, device=device, db=db)
    rows = [
        display.Row(
            [
                api.short_gpu_name(item.gpu),
                *_op_and_shape(item.problem),
                f"{item.source}{', unaligned' if item.unaligned else ''}",
                item.arch,
                item.origin,
                item.kernel,  # the longest cell, last: on a line of its own where the terminal is narrow
            ]
        )
        for item in prepared
    ]
    if not _QUIET and rows:
        _print_lines(
            display.table_lines(["gpu", "op", "shape", "config", "arch", "found", "kernel"], rows, _width(wide))
        )
    counts = {origin: sum(p.origin == origin for p in prepared) for origin in ("shipped", "cached", "compiled")}
    found = ", ".join(f"{count} {origin}" for origin, count in counts.items())
    summary = f"{counted(len(prepared), 'kernel')}: {found}"
    if gpu is None and api.local_gpu_name() is not None:
        api.warmup(problems=wanted, device=device, db=db)
        summary += f"; loaded on GPU {device}"
    else:
        summary += "; none loaded (no GPU here, or --gpu names another)"
    _print_lines(display.wrap(summary, _width(wide), "  "))


@app.command()
def doctor(db: Db = None) -> None:
    """What this machine has for each thing autotune does (driver, nvcc, PyCUDA, database), and
    what to do where something is missing."""
    from autotune import doctor as checkup

    found = checkup.checks(db)
    # What is found wraps at spaces (a path after a '/'), what to do goes on a line of its own.
    rows = [display.Row(["ok" if c.ok else "--", c.name, c.found], [f"to do: {c.fix}"] if c.fix else []) for c in found]
    lines = display.table_lines(["", "check", "found"], rows, _width())
    for what, can in checkup.abilities(found):
        lines += display.wrap(f"{'yes' if can else 'no ':3}  {what}", _width(), " " * 5)
    _print_lines(lines)


def _warn(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    # Warnings without Python's file and source line.
    _say_on_stderr(f"warning: {message}")


def _say_on_stderr(line: str) -> None:
    """An error or a warning: one line, as a log or a program reading stderr wants it; on a terminal
    wrapped at spaces to its width, continuation lines indented, so that no word is cut in two."""
    width = _columns(err) if err.is_terminal else None
    err.print("\n".join(display.wrap(line, width, "  ")), markup=False)


def main() -> None:
    """Entry point: every user error is one line on stderr and exit code 2, never a traceback."""
    warnings.showwarning = _warn
    try:
        app(standalone_mode=False)
    except AutotuneError as exc:
        _say_on_stderr(f"error: {exc}")
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as exc:
        # Typer's parse errors: click's exception classes, or typer's own copies of them in newer
        # typer releases; both carry format_message() and exit_code.
        name = type(exc).__name__
        if name == "Abort":
            _interrupted()
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if name == "NoArgsIsHelpError":
            out.print(exc.format_message(), markup=False)
            sys.exit(0)
        _say_on_stderr(f"error: {exc.format_message()}")
        sys.exit(2)


def _interrupted() -> None:
    err.print("interrupted: every finished trial is stored; run the same command again to resume")
    sys.exit(130)
