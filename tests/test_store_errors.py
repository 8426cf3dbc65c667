"""Damaged, locked, full, read-only or foreign databases and an unusable HOME: one line each, or an answer."""

# The CLI fixtures (run, shipped) come from test_cli; ruff takes their use as arguments for redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import event

from autotune.core.errors import AutotuneError, AutotuneWarning
from autotune.store import open_store
from autotune.store import sqlite as store_sqlite
from tests.test_cli import FAST, H200, SHAPE, Cli, _fresh_api, assert_one_error, run, shipped, tuned_db  # noqa: F401

BEST = ("best", "--m", "4096", "--n", "8192", "--gpu", "h200")


def _answers(result: object, time_text: str = "measured 4.00 us") -> None:
    assert getattr(result, "code", None) == 0, result
    assert time_text in getattr(result, "out", ""), result


# --- no writable place: the shipped records answer from memory -------------------------------------


def test_home_that_is_a_file_answers_from_the_shipped_records(
    run: Cli, shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME")
    result = run(*BEST)
    _answers(result)
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: cannot create the database folder"), result.err
    assert "held in memory" in lines[0] and "Traceback" not in result.text
    listed = run("list")
    assert listed.code == 0 and "hgemv" in listed.out


def test_an_unwritable_default_folder_answers_from_memory(
    run: Cli, shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    (data / "autotune").mkdir(parents=True)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.setattr(store_sqlite, "_writable", lambda path: False)  # as on a read-only mount
    result = run(*BEST)
    _answers(result)
    assert "warning: cannot open database" in result.err and "is not writable" in result.err


def test_the_library_warns_once_in_a_warning_class(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "file"))
    (tmp_path / "file").write_text("")
    with pytest.warns(AutotuneWarning, match="held in memory"), open_store() as store:
        assert store.best(H200.name, SHAPE, None) is not None


def test_a_given_db_in_an_unwritable_folder_is_an_error(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_sqlite, "_writable", lambda path: False)
    assert_one_error(run("list", "--db", str(tmp_path / "new.db")), "cannot open database", "is not writable")


# --- read-only databases ---------------------------------------------------------------------------


def _journal_delete(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=DELETE")
    connection.close()


@pytest.mark.parametrize("folder_writable", [True, False])
def test_a_read_only_database_is_served_and_never_written(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder_writable: bool
) -> None:
    db = tuned_db(tmp_path / "tuned.db")
    _journal_delete(db)  # setting WAL, as opening used to, would write the file
    before = db.read_bytes()
    monkeypatch.setattr(store_sqlite, "_writable", lambda path: folder_writable and path.is_dir())
    _answers(run(*BEST, "--db", str(db)))
    listed = run("list", "--db", str(db))
    assert listed.code == 0 and "hgemv" in listed.out
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuned.db"]  # no -wal or -shm beside it
    with open_store(str(db)) as store, pytest.raises(AutotuneError, match="is read-only") as caught:
        store.upsert_gpu(H200)
    assert "\n" not in str(caught.value)


def test_a_read_only_database_that_needs_an_upgrade_is_one_line(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tuned_db(tmp_path / "tuned.db")
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0003'")
    connection.close()
    monkeypatch.setattr(store_sqlite, "_writable", lambda path: False)
    assert_one_error(run(*BEST, "--db", str(db)), "is read-only and needs a schema upgrade")


# --- files that are not ours, damaged files, locks, a full disk ------------------------------------


def test_a_sqlite_file_of_another_program_is_refused_untouched(run: Cli, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        connection.execute("INSERT INTO customers VALUES (1, 'Ada')")
    connection.close()
    before = other.read_bytes()
    for command in (["list"], list(BEST), ["gpus"]):
        assert_one_error(run(*command, "--db", str(other)), "is not an autotune database", "customers")
    assert other.read_bytes() == before


@pytest.mark.parametrize("damage", ["garbage pages", "trials page", "truncated", "garbage header"])
@pytest.mark.parametrize("command", [["list"], ["gpus"], list(BEST)])
def test_a_damaged_file_is_one_line(run: Cli, tmp_path: Path, damage: str, command: list[str]) -> None:
    db = tuned_db(tmp_path / "tuned.db")
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("PRAGMA journal_mode=DELETE")
    connection.close()
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    if damage == "garbage pages":
        data[page:] = bytes(range(256)) * ((len(data) - page) // 256) + bytes((len(data) - page) % 256)
    elif damage == "trials page":  # the schema reads fine, opening works; a query of the trials fails
        start = data.index(b"measured") // page * page  # origin: only in the trials table's rows
        data[start : start + 8] = b"\xff" * 8  # the b-tree page header
    elif damage == "truncated":
        data = data[: page + page // 2]
    else:
        data[:100] = b"\xde\xad" * 50
    db.write_bytes(bytes(data))
    result = run(*command, "--db", str(db))
    assert_one_error(result, "database")


def test_a_lock_held_past_the_wait_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "tune.db"
    monkeypatch.setenv(store_sqlite.LOCK_WAIT_VAR, "0.3")
    with open_store(str(db), import_shipped=False) as store:
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        start = time.monotonic()
        with pytest.raises(AutotuneError, match=r"is locked: another process held it for more than 0.3 s") as caught:
            store.upsert_gpu(H200)
        waited = time.monotonic() - start
        holder.execute("ROLLBACK")
        holder.close()
        assert 0.25 <= waited < 5 and "\n" not in str(caught.value)
        assert store.upsert_gpu(H200) == 1  # free again: the same store writes


def test_a_lock_released_within_the_wait_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "tune.db"
    monkeypatch.setenv(store_sqlite.LOCK_WAIT_VAR, "10")
    with open_store(str(db), import_shipped=False) as store:
        holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.5, lambda: holder.execute("ROLLBACK"))
        release.start()
        assert store.upsert_gpu(H200) == 1
        release.join()
        holder.close()


def test_a_bad_lock_wait_setting_is_one_line(run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(store_sqlite.LOCK_WAIT_VAR, "soon")
    assert_one_error(run("list", "--db", str(tmp_path / "x.db")), store_sqlite.LOCK_WAIT_VAR)


def test_a_full_disk_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "tune.db"
    with open_store(str(db), import_shipped=False) as store:
        store.upsert_gpu(H200)
        store.db.engine.dispose()

        def no_room(connection: sqlite3.Connection, _record: object) -> None:
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count={pages}")  # as if the disk were full

        event.listen(store.db.engine, "connect", no_room)
        pid = store.problem_id(SHAPE, H200.name)
        with pytest.raises(AutotuneError, match="cannot grow: database or disk is full") as caught:
            for number in range(2000):
                store.problem_id(SHAPE.__class__("gemv", "float16", 64 + number, 64), H200.name)
        assert "\n" not in str(caught.value) and pid == 1
        assert store.best(H200.name, SHAPE, None) is None  # still reads


def test_rows_an_older_autotune_let_in_are_not_handed_out(run: Cli, tmp_path: Path) -> None:
    # Imports used to take any config and dtype: a string value crashed `best` for neighbouring
    # shapes, an unknown dtype broke `list`, and a leader's config went to nvcc.
    db = tuned_db(tmp_path / "tuned.db")
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO problems (gpu_name, op, dtype, m, n, k, trans, created_at) "
            "VALUES ('NVIDIA H200', 'gemv', 'int4', 64, 64, 0, 0, '2025-01-01')"
        )
        bad = json.dumps({**FAST, "order": '0\n#include "/etc/passwd"'}, sort_keys=True)
        connection.execute(
            "INSERT INTO trials (problem_id, gpu_id, config_key, config, status, time_us, times_us, message, "
            "source_hash, nvcc, pycuda, driver, cuda, origin, rounds, created_at) SELECT problem_id, gpu_id, ?, ?, "
            "'ok', 0.5, '[0.5]', '', source_hash, nvcc, pycuda, driver, cuda, 'shipped:old.jsonl', 1, created_at "
            "FROM trials LIMIT 1",
            (bad, bad),
        )
    connection.close()
    listed = run("list", "--db", str(db))
    assert listed.code == 0 and "int4" not in listed.out and "passwd" not in listed.out, listed
    _answers(run(*BEST, "--db", str(db)))  # the 4.00 us config, not the 0.5 us one with code in it
    nearby = run("best", "--m", "4096", "--n", "4096", "--gpu", "h200", "--db", str(db))
    assert nearby.code == 0 and "passwd" not in nearby.out, nearby
    with open_store(str(db), import_shipped=False) as store:
        pid = store.problem_id(SHAPE, H200.name, create=False)
        assert pid is not None
        assert all(
            "passwd" not in json.dumps(t.config) for t in store.leaders(pid, store.trials(pid)[0].source_hash, 5)
        )


@pytest.mark.parametrize(
    ("column", "text"),
    [
        ("config", '{"block": #28, "lanes": 128}'),
        ("config", "not json at all"),
        ("times_us", "[4.0, 4."),
        ("created_at", "not a date"),
        ("status", "weird"),
        ("time_us", "fast"),
    ],
)
def test_a_row_whose_stored_text_is_damaged_is_skipped(run: Cli, tmp_path: Path, column: str, text: str) -> None:
    # SQLite keeps JSON, dates and enums as text and checks no column's type: a byte changed in the
    # file passes integrity_check.
    db = tuned_db(tmp_path / "tuned.db")
    with sqlite3.connect(db) as connection:
        connection.execute(f"UPDATE trials SET {column} = ? WHERE time_us = 4.0", (text,))
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    connection.close()
    shape = ["--m", "4096", "--n", "8192", "--gpu", "h200", "--db", str(db)]
    listed = run("list", "--db", str(db))
    assert listed.code == 0 and "9.00" in listed.out and "4.00" not in listed.out, listed
    _answers(run("best", *shape), "measured 9.00 us")  # the damaged 4 us row is skipped, not chosen
    shown = run("show", *shape)
    assert shown.code == 0 and "9.00" in shown.out and "4.00" not in shown.out, shown
    for fmt in ("jsonl", "csv"):
        exported = run("export", "-o", str(tmp_path / f"out.{fmt}"), "--format", fmt, "--db", str(db))
        assert exported.code == 0, exported
        assert "#28" not in (tmp_path / f"out.{fmt}").read_text()
    reported = run("report", "-o", str(tmp_path / "r.html"), "--db", str(db))
    assert reported.code == 0 and "Traceback" not in reported.text, reported


def test_tables_without_a_schema_revision_are_a_damaged_file(run: Cli, tmp_path: Path) -> None:
    """Upgrading from nothing would fail on "table gpus already exists": the file is said damaged, unchanged."""
    db = tuned_db(tmp_path / "tuned.db")
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM alembic_version")
    connection.close()
    before = db.read_bytes()
    assert_one_error(run("list", "--db", str(db)), "holds autotune's tables but no schema revision", "damaged")
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("table", "column"),
    [("gpus", "name"), ("gpus", "driver"), ("problems", "gpu_name"), ("trials", "source_hash"), ("trials", "message")],
)
def test_a_text_column_holding_a_blob_reads_as_its_text(run: Cli, tmp_path: Path, table: str, column: str) -> None:
    """SQLite keeps a BLOB in a text column (a value cast by hand, a damaged file); read back as bytes it
    failed best, list, gpus, report and export with a TypeError (bytes sorted beside str, JSON, HTML).
    Read as text, it answers; where SQL compares it (a GPU looked up by its name), it is one line."""
    db = tuned_db(tmp_path / "t.db")
    with sqlite3.connect(db) as connection:
        connection.execute(f"UPDATE {table} SET {column} = CAST({column} AS BLOB)")
    for args in (
        ["best", "--m", "4096", "--n", "8192", "--gpu", "h200"],
        ["list"],
        ["gpus"],
        ["report", "-o", str(tmp_path / "r.html")],
        ["export", "-o", str(tmp_path / "e.csv"), "--format", "csv"],
    ):
        result = run(*args, "--db", str(db))
        if result.code != 0:
            assert_one_error(result)
    assert "4096x8192" in run("list", "--db", str(db)).out
