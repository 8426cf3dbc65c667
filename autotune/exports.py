"""`autotune export` and `autotune import`: the best configs per problem out of the database, as a
records file (JSON lines, which `import` and other databases read back with the store's validation),
as CSV for spreadsheets and for TunableOp-style tools that read one row per problem, or as a bundle
of kernels and a C header that a program deploys without Python (autotune/bundle/)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autotune import api, ops
from autotune.core.errors import AutotuneError
from autotune.core.output import printable, refuse_unless_file, write_atomically
from autotune.core.problem import Problem
from autotune.store.database import refuse_writing_over
from autotune.store.record_lines import BadLine, parse_gpu
from autotune.store.records import Imported, read_records, record_lines, write_lines

FORMATS = ("jsonl", "csv", "bundle")
CSV_COLUMNS = (
    "gpu", "op", "dtype", "m", "n", "k", "trans", "rank", "time_us", "gbs", "tflops", "config", "source_hash", "driver",
    "cuda",
)  # fmt: skip
# Columns a file has where a row's problem names them (an int4 weight's group size and input dtypes):
# a CSV of problems that name neither reads as it always did.
CSV_KEY_COLUMNS = ("inputs", "variant")


def _gpu_names(gpu: str | None, db: str | None) -> list[str]:
    """The stored GPU `gpu` names, or every stored GPU."""
    store = api.store(db)
    known = store.gpu_names()
    if gpu is not None:
        return [api.stored_gpu(gpu, known)]
    if not known:
        raise AutotuneError(f"nothing to export: {store.url} holds no GPU yet")
    return list(known)


def _one_gpu(gpu: str | None, db: str | None, what: str) -> str:
    """The GPU of a records file or a bundle (`what`), which hold one: the one named, else the only
    one stored, else this machine's GPU where the database holds it; else `--gpu` is needed."""
    names = _gpu_names(gpu, db)
    if len(names) == 1:
        return names[0]
    local = api.local_gpu_name()
    if local in names:
        return local
    raise AutotuneError(f"{what} holds one GPU: give --gpu, one of {', '.join(names)}")


def export(
    output: Path,
    *,
    fmt: str = "jsonl",
    gpu: str | None = None,
    top: int = 1,
    db: str | None = None,
    op: Sequence[str] = (),
    allow_partial: bool = False,
) -> int:
    """Write the `top` fastest configs of every problem (measured with the current kernels) of one GPU,
    or of every GPU for CSV; returns how many rows. A records file holds one GPU: `gpu`, else the
    only GPU stored or this machine's; where the database holds several and none is this machine's,
    `gpu` is needed. A bundle (a folder) holds the best config of each problem of one GPU (chosen
    the same way), of the ops `op` names (every op without), and returns how many entries; one that
    would leave a problem out is refused unless `allow_partial`."""
    if fmt not in FORMATS:
        raise AutotuneError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "bundle":
        from autotune import bundle

        if top != 1:
            raise AutotuneError("--top applies to jsonl and csv: a bundle holds each problem's best config")
        name = _one_gpu(gpu, db, "a bundle")
        return len(bundle.export_bundle(output, name, op, db, allow_partial=allow_partial).entries)
    if op:
        raise AutotuneError("--op applies to --format bundle: jsonl and csv hold every op")
    if allow_partial:
        raise AutotuneError("--allow-partial applies to --format bundle: jsonl and csv leave no problem out")
    what = "CSV file" if fmt == "csv" else "records file"
    refuse_unless_file(output, what)  # before reading the database
    refuse_writing_over(output, db, what)
    database = api.store(db).db
    if fmt == "jsonl":
        lines = record_lines(database, _one_gpu(gpu, db, "a records file"), top=top, current_only=True)
        _check_gpu_line(lines[0])
        write_lines(output, lines)
        return len(lines) - 1
    rows: list[dict[str, Any]] = []
    for name in _gpu_names(gpu, db):
        ranks: dict[Problem, int] = {}
        rows += [_csv_row(name, line, ranks) for line in record_lines(database, name, top=top, current_only=True)[1:]]
    write_atomically(output, _csv_text(rows), what="CSV file")
    return len(rows)


def _check_gpu_line(line: dict[str, Any]) -> None:
    """Refuse a records file whose GPU line `import` would refuse (a name with control characters,
    written straight into the database): a file that cannot be read back is no export."""
    try:
        parse_gpu(line)
    except BadLine as exc:
        raise AutotuneError(
            f"cannot export GPU {line.get('name')!r}: import would refuse its records file: {exc}"
        ) from None


def _csv_row(gpu: str, line: dict[str, Any], ranks: dict[Problem, int]) -> dict[str, Any]:
    problem = Problem(
        line["op"],
        line["dtype"],
        line["m"],
        line["n"],
        line["k"],
        line["trans"],
        tuple(line.get("inputs", ())),
        line.get("variant", ""),
    )
    ranks[problem] = rank = ranks.get(problem, 0) + 1
    op = ops.for_problem(problem)
    return {
        "gpu": gpu,
        "op": problem.blas_name,
        "dtype": problem.dtype,
        "m": problem.m,
        "n": problem.n,
        "k": problem.k,
        "trans": int(problem.trans),
        "rank": rank,
        "time_us": line["time_us"],
        "gbs": line["gbs"],
        "tflops": round(op.flops(problem) / line["time_us"] / 1e6, 3) if op.compute_bound else "",
        "config": json.dumps(line["config"], separators=(",", ":"), sort_keys=True),
        "source_hash": line["source_hash"],
        "driver": line["driver"],
        "cuda": line["cuda"],
        "inputs": ",".join(problem.inputs),
        "variant": problem.variant,
    }


def _csv_text(rows: list[dict[str, Any]]) -> str:
    text = io.StringIO()
    named = [column for column in CSV_KEY_COLUMNS if any(row[column] for row in rows)]
    unnamed = set(CSV_KEY_COLUMNS) - set(named)
    rows = [{column: value for column, value in row.items() if column not in unnamed} for row in rows]
    writer = csv.DictWriter(text, fieldnames=(*CSV_COLUMNS, *named), lineterminator="\n")
    writer.writeheader()
    # A CSV file is read in terminals and spreadsheets, never imported: a control character
    # (a GPU name written straight into the database) is shown as an escape, not replayed.
    writer.writerows({column: _cell(v) if isinstance(v, str) else v for column, v in row.items()} for row in rows)
    return text.getvalue()


# A spreadsheet takes a cell that begins with one of these for a formula (=HYPERLINK(...) from an
# imported records file's GPU name would run on opening): such a text cell gets a leading ', which
# spreadsheets show as text and do not display.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(text: str) -> str:
    shown = printable(text)
    return "'" + shown if shown.startswith(_FORMULA_STARTS) else shown


def import_file(path: Path, db: str | None = None, *, shipped: bool = True) -> Imported:
    """Import a records file (validated whole first; all or nothing); returns how many trials were
    stored, how many of them replaced a shipped row's time, and how many the file holds. The file
    is read and checked before the database is opened: a bad file creates no database. Without
    `shipped`, the database is one that never takes the shipped records (api.without_shipped)."""
    parsed = read_records(path)
    if not shipped:
        api.without_shipped(db)
    count: Imported = api.store(db).import_records(path, parsed)
    return count
