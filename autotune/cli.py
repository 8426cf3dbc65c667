"""The `autotune` command: each command parses its options, then calls one library function."""

from __future__ import annotations

import logging
import sys
import time
import warnings
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

from autotune import api, ops
from autotune.core.errors import AutotuneError
from autotune.core.log import cli_level, show_on_stderr
from autotune.core.outcome import Outcome
from autotune.core.output import json_text, printable
from autotune.core.problem import Problem
from autotune.select.choose import Choice
from autotune.tune.search import StudyResult
from autotune.vendor.mapping import is_vendor, rank_of

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


out = _Console(highlight=False, soft_wrap=True)
err = _Console(stderr=True, highlight=False, soft_wrap=True)


def _print_json(value: Any) -> None:
    """`value` as indented JSON on stdout, coloured as rich colours it, with control and format
    characters (U+202E from a GPU name in the database) as \\u escapes: rich's print_json would
    parse the JSON and write them raw again."""
    text = JSONHighlighter()(json_text(value, indent=2))
    text.no_wrap = True
    out.print(text, soft_wrap=True)


Op = Annotated[
    str | None,
    typer.Option("--op", help="gemv or gemm (with --dtype), or sgemv, hgemv (default), bgemv, sgemm, hgemm, bgemm"),
]
K = Annotated[int | None, typer.Option("--k", help="GEMM only: columns of A, rows of B (the reduction length)")]
Trans = Annotated[
    bool,
    typer.Option("--trans", help="GEMV: y = Aᵀx (x has M entries, y has N); GEMM: B stored N x K (C = A·Bᵀ)"),
]
Dtype = Annotated[str | None, typer.Option("--dtype", help="float32, float16 or bfloat16")]
# The problem options of the commands that take one shape, a shapes file or the standard set.
OptionalM = Annotated[int | None, typer.Option("--m", help="rows of A (with --n); default: the standard shape set")]
OptionalN = Annotated[int | None, typer.Option("--n", help="GEMV: columns of A; GEMM: columns of B and C")]
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
    if not config:
        return "-"
    if is_vendor(config):
        return f"cuBLASLt algorithm {rank_of(config)} (the heuristic's answer of that rank)"
    return " ".join(f"{k}={v}" for k, v in ops.in_space_order(problem, config).items())


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
        self._task = self._bar.add_task(escape(f"[{index + 1}/{total}] {problem}"), total=trials, best="")

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
    trials: Annotated[int, typer.Option("--trials", help="trials per shape, counting stored ones")] = 64,
    timeout: Annotated[float | None, typer.Option("--timeout", help="seconds per shape")] = None,
    patience: Annotated[
        int, typer.Option("--patience", min=0, help="stop a shape after N trials without 1% gain (0: never)")
    ] = api.DEFAULT_PATIENCE,
    sampler: Annotated[str, typer.Option("--sampler", help="tpe, random or grid")] = "tpe",
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
) -> None:
    """Tune shapes on this machine's GPU; every measurement goes into the database. Sweeps on several
    machines sharing one database (--db) split the problems between them."""
    options: dict[str, Any] = dict(
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
        report = api.sweep(op, m, n, k, device=device, progress=progress, **options)
    finally:
        if progress.started:
            bar.stop()
    _print_sweep(report)


def _print_sweep(report: SweepReport, title: str = "") -> None:
    table = Table(title=escape(f"{title}{report.gpu.name}  ({report.db_url})"))
    headings = ["problem", "best us", "GB/s", "new", "stored", "failed", "confirmed", "stopped", "seconds", "config"]
    vendor = any(item.result.vendor_us is not None for item in report.problems)  # cuBLASLt timed beside
    if vendor:
        headings.insert(2, "cuBLAS us")
    for column in headings:
        table.add_column(column)
    for item in report.problems:
        r = item.result
        failed = sum(v for k, v in r.statuses.items() if k != "ok")
        best_gbs = "-"
        if r.best_us is not None:
            best_gbs = f"{ops.for_problem(item.problem).bytes_moved(item.problem) / r.best_us / 1e3:.0f}"
        table.add_row(
            str(item.problem),
            _us(r.best_us),
            *([_us(r.vendor_us)] if vendor else []),
            best_gbs,
            str(r.measured),
            str(r.reused),
            str(failed),
            str(r.confirmed),
            r.stopped,
            f"{item.seconds:.1f}",
            _config_text(r.best_config, item.problem),
        )
    out.print(table)


M = Annotated[int, typer.Option("--m", help="rows of A")]
N = Annotated[int, typer.Option("--n", help="GEMV: columns of A; GEMM: columns of B and C")]


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
) -> None:
    """Which config to run for this shape on this GPU (measured, estimated, or the safe default); on a
    machine without a GPU and without --gpu, the answer for every GPU the database holds."""
    every_gpu = gpu is None and api.local_gpu_name() is None
    if every_gpu:
        choices = api.best_on_every_gpu(op, m, n, k, trans=trans, dtype=dtype, db=db)
    else:
        choices = [api.best(op, m, n, k, trans=trans, dtype=dtype, gpu=gpu, db=db)]
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
    out.print(f"{choice.problem} on {choice.gpu} [{choice.source}]{timing}", markup=False)
    out.print(f"config: {_config_text(choice.config, choice.problem)}", markup=False)
    if choice.basis:
        out.print(f"predicted from: {choice.basis}", markup=False)
    for note in choice.notes:
        out.print(f"note: {note}", markup=False)


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
    out.print(f"{choice.problem} on {choice.gpu} [{choice.source}] config: {config}", markup=False)
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
    db: Db = None,
) -> None:
    """What the database holds: one line per tuned problem."""
    rows = api.list_problems(gpu=gpu, op=op, dtype=dtype, db=db)
    if as_json:
        _print_json([_summary_dict(r) for r in rows])
        return
    cells = [
        [
            api.short_gpu_name(r.gpu_name),
            r.problem.blas_name + ("ᵀ" if r.trans else ""),
            "x".join(map(str, r.problem.shape)),
            f"{r.ok}/{r.trials}",
            _us(r.best_us),
            _gbs(r.best_gbs),
            _short_config(r.best_config, r.problem),
        ]
        for r in rows
    ]
    table = Table(box=None, pad_edge=False)
    headers = ("gpu", "op", "shape", "ok/trials", "best us", "GB/s", "config")
    for index, column in enumerate(headers):
        # Every column but the config keeps its width; the config is cut short at the terminal's edge.
        width = max([len(column), *(len(row[index]) for row in cells)])
        last = index == len(headers) - 1
        table.add_column(column, no_wrap=True, overflow="ellipsis", min_width=None if last else width)
    for row in cells:
        table.add_row(*(escape(cell) for cell in row))
    if rows:
        out.print(table)
    elif gpu is not None:  # a GPU the database holds (api.stored_gpu refused any other), none of it asked for
        out.print(f"nothing tuned for {gpu!r}{' of that op' if op or dtype else ''}", markup=False)
    else:
        out.print("nothing tuned yet: run `autotune sweep`")


def _short_config(config: dict[str, int] | None, problem: Problem) -> str:
    """A config in one short cell: its values in the space's order (`autotune show` names them)."""
    if not config:
        return "-"
    if is_vendor(config):
        return f"cuBLASLt algorithm {rank_of(config)} (the heuristic's answer of that rank)"
    return " ".join(str(v) for v in ops.in_space_order(problem, config).values())


def _summary_dict(r: Any) -> dict[str, Any]:
    return {
        "gpu": r.gpu_name,
        "op": r.problem.blas_name,
        "trans": bool(r.trans),
        "m": r.m,
        "n": r.n,
        **({"k": r.k} if r.k else {}),
        "trials": r.trials,
        "ok": r.ok,
        "best_us": r.best_us,
        "best_gbs": r.best_gbs,
        "config": r.best_config,
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
    db: Db = None,
) -> None:
    """Every trial stored for one problem, fastest first, failures with their reason; on a machine
    without a GPU and without --gpu, for every GPU the database holds."""
    problem, found = api.problem_trials(op, m, n, k, trans=trans, dtype=dtype, gpu=gpu, db=db)
    for gpu_name, trials in found:
        _print_trials(problem, gpu_name, trials, limit)


def _print_trials(problem: Problem, gpu_name: str, trials: list[Any], limit: int) -> None:
    table = Table(title=escape(f"{problem} on {gpu_name}"))
    for column in ("status", "us", "GB/s", "rounds", "SM MHz", "mem MHz", "W", "config", "message"):
        table.add_column(column)
    shown = trials if limit == 0 else trials[:limit]
    for t in shown:
        table.add_row(
            t.status.value,
            _us(t.time_us),
            _gbs(t.gbs),
            str(t.rounds),
            *(_whole(value) for value in (t.sm_mhz, t.mem_mhz, t.power_w)),
            _config_text(t.config, problem),
            escape((t.message.splitlines() or [""])[-1][:80]),
        )
    if trials:
        out.print(table)
    else:
        out.print(f"no trials stored for {problem} on {gpu_name}", markup=False)
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
) -> None:
    """The problems queued for tuning, which `sweep --pending` claims: asked for by the launch path,
    or added with --add for the machines of a GPU model to share."""
    if no_shipped:
        api.without_shipped(db)
    if add:
        if gpu is None:
            raise AutotuneError("queue --add needs --gpu: the GPU model whose machines will tune the problems")
        count = api.enqueue(gpu, op, m, n, k, trans=trans, dtype=dtype, shapes_file=shapes, db=db)
        err.print(f"queued {counted(count, 'problem')} for {gpu}", markup=False)
        return
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
            row.problem.blas_name + ("ᵀ" if row.problem.trans else ""),
            "x".join(map(str, row.problem.shape)),
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
    top: Annotated[int, typer.Option("--top", min=1, help="fastest configs per problem")] = 1,
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
    problems = sum(len(g.shapes) for g in data.gpus)
    cards = f"{len(data.gpus)} GPU" + ("" if len(data.gpus) == 1 else "s")
    out.print(f"report written to {output.resolve()} ({problems} problems on {cards})", markup=False)


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
    db: Db = None,
) -> None:
    """Ready every kernel these problems run (shipped ones unpacked, others compiled into the cache),
    and load them on this machine's GPU: a deployment pays it when its image is built."""
    if stored:
        if m is not None or n is not None or k is not None or shapes is not None:
            raise AutotuneError("--stored takes the database's problems: give no --m, --n, --k or --shapes with it")
        wanted = api.stored_problems(op, dtype, gpu=gpu, db=db)
    else:
        wanted = api.problems(op, m, n, k, trans=trans, dtype=dtype, shapes_file=shapes)
    prepared = api.prepare(wanted, gpu=gpu, device=device, db=db)
    table = Table(box=None, pad_edge=False)
    for column in ("gpu", "problem", "config", "kernel", "arch", "found"):
        table.add_column(column)
    for item in prepared:
        what = f"{item.source}{', unaligned' if item.unaligned else ''}"
        table.add_row(
            escape(api.short_gpu_name(item.gpu)), escape(str(item.problem)), what, item.kernel, item.arch, item.origin
        )
    if not _QUIET:
        out.print(table)
    counts = {origin: sum(p.origin == origin for p in prepared) for origin in ("shipped", "cached", "compiled")}
    summary = f"{len(prepared)} kernels: " + ", ".join(f"{count} {origin}" for origin, count in counts.items())
    if gpu is None and api.local_gpu_name() is not None:
        api.warmup(problems=wanted, device=device, db=db)
        summary += f"; loaded on GPU {device}"
    else:
        summary += "; none loaded (no GPU here, or --gpu names another)"
    out.print(summary, markup=False)


@app.command()
def doctor(db: Db = None) -> None:
    """What this machine has for each thing autotune does (driver, nvcc, PyCUDA, database), and
    what to do where something is missing."""
    from autotune import doctor as checkup

    found = checkup.checks(db)
    table = Table(box=None, pad_edge=False)
    for column in ("", "check", "found", "to do"):
        table.add_column(column, overflow="fold")
    for check in found:
        table.add_row("ok" if check.ok else "--", check.name, escape(printable(check.found)), escape(check.fix))
    out.print(table)
    for what, can in checkup.abilities(found):
        out.print(f"{'yes' if can else 'no ':3}  {what}", markup=False)


def _warn(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    # Warnings as one line, without Python's file and source line.
    err.print(f"warning: {message}", markup=False)


def main() -> None:
    """Entry point: every user error is one line on stderr and exit code 2, never a traceback."""
    warnings.showwarning = _warn
    try:
        app(standalone_mode=False)
    except AutotuneError as exc:
        err.print(f"error: {exc}", markup=False)
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
        err.print(f"error: {exc.format_message()}", markup=False)
        sys.exit(2)


def _interrupted() -> None:
    err.print("interrupted: every finished trial is stored; run the same command again to resume")
    sys.exit(130)
