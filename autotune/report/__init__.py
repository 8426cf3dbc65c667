"""`autotune report`: one self-contained HTML page of what the database holds, per GPU and op: a
banner counted from the data (cuBLASLt trials, read floors, imported problems), contents, failures by
kind, clocks, and per op a collapsed group with the best time per shape (beside the read floor where
one is stored), tuning convergence or the kept leaders, and every config's time per shape. data.py
gathers, svg.py draws the charts, page.py writes the page."""

from __future__ import annotations

from pathlib import Path

from autotune.core.output import refuse_unless_file, write_atomically
from autotune.report.data import ReportData, gather
from autotune.report.page import render
from autotune.store.database import refuse_writing_over

__all__ = ["ReportData", "gather", "render", "write_report"]


def write_report(path: Path, *, gpu: str | None = None, db: str | None = None) -> ReportData:
    """Write the report of the database `db` (of one GPU, `--gpu` matching) to `path`; returns what it shows."""
    refuse_unless_file(path, "the report")  # before the database is read
    refuse_writing_over(path, db, "the report")
    data = gather(gpu, db)
    write_atomically(path, render(data), what="the report")
    return data
