"""The fault drill (scripts/fault_drill.py) watches the sweep's database while the sweep creates it (CPU only)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from scripts.fault_drill import finished_so_far


def test_the_drill_counts_nothing_until_the_tables_exist(tmp_path: Path) -> None:
    db = tmp_path / "drill.db"
    assert finished_so_far(db, "ours") == 0  # no file yet
    sqlite3.connect(db).close()  # the sweep has opened the file but not migrated it
    assert finished_so_far(db, "ours") == 0
    with sqlite3.connect(db) as connection:
        connection.execute(
            "create table trials (id integer, config_key text, status text, time_us real, source_hash text)"
        )
        connection.executemany(
            "insert into trials values (?, ?, ?, ?, ?)",
            [
                (1, "a", "ok", 1.0, "ours"),
                (2, "b", "running", None, "ours"),
                (3, "c", "wrong_result", None, "ours"),
                (4, "d", "invalid", None, "ours"),
                (5, "e", "ok", 2.0, "cublasLt-13"),
            ],
        )
    assert finished_so_far(db, "ours") == 2  # running and invalid trials are not finished
    # cuBLASLt's rows, which a sweep times first, would otherwise bring the kill before any of ours ran.
    assert finished_so_far(db, "cublasLt-13") == 1
