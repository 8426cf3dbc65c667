"""What enters the store and what the store hands out: a user's records file beside the shipped
ones, commands that only write refusing the in-memory fallback, and problem rows written straight
into the database kept from every reader."""

# The CLI fixtures (run, shipped) come from test_cli; ruff takes their use as arguments for redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError, AutotuneWarning
from autotune.store import Store, config_key, open_store
from tests import shipped_copies
from tests.test_cli import H200, SHAPE, Cli, _fresh_api, run, shipped  # noqa: F401
from tests.test_store import GPU_LINE, cfg, trial_line, write_records
from tests.test_store import SHAPE as RECORDED  # the problem test_store's trial_line names

# --- a user's measurement of a key a shipped row holds --------------------------------------------


def _ship(folder: Path, *trials: dict[str, object]) -> None:
    folder.mkdir(exist_ok=True)
    write_records(folder / "nvidia-h200.jsonl", [GPU_LINE, *trials])


def _rows_of(store: Store, block: int) -> list[tuple[str, float | None]]:
    pid = store.problem_id(RECORDED, H200.name, create=False)
    assert pid is not None
    return [(t.origin, t.time_us) for t in store.trials(pid) if t.config == cfg(block)]


def test_a_user_time_of_a_shipped_key_is_stored_and_outlives_the_shipped_file(tmp_path: Path) -> None:
    ships = tmp_path / "records"
    _ship(ships, trial_line(5.0, 64), trial_line(6.0, 128))
    mine = tmp_path / "mine.jsonl"
    write_records(mine, [GPU_LINE, trial_line(99.0, 64)])  # the user's own time of a shipped config
    with open_store(str(tmp_path / "t.db"), import_shipped=False) as store:
        assert store.import_shipped(ships) == 2
        imported = store.import_records(mine)
        assert (imported, imported.replaced) == (1, 1)
        assert _rows_of(store, 64) == [(f"imported:{mine}", 99.0)]  # one row per key: the user's
        again = store.import_records(mine)
        assert (again, again.replaced) == (0, 0)
        _ship(ships, trial_line(6.0, 128))  # a new autotune ships the file without that line
        assert store.import_shipped(ships) == 1
        assert _rows_of(store, 64) == [(f"imported:{mine}", 99.0)]
        assert [origin for origin, _ in _rows_of(store, 128)] == ["shipped:nvidia-h200.jsonl"]


def test_a_user_file_repeating_the_shipped_measurement_leaves_it_shipped(tmp_path: Path) -> None:
    ships = tmp_path / "records"
    _ship(ships, trial_line(5.0, 64))
    copy = tmp_path / "export.jsonl"
    write_records(copy, [GPU_LINE, trial_line(5.0, 64)])  # an export of a database holding the shipped row
    with open_store(str(tmp_path / "t.db"), import_shipped=False) as store:
        store.import_shipped(ships)
        assert store.import_records(copy) == 0
        assert _rows_of(store, 64) == [("shipped:nvidia-h200.jsonl", 5.0)]


def test_a_measured_row_is_not_replaced_by_an_import(tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    write_records(mine, [GPU_LINE, trial_line(99.0, 64)])
    other = tmp_path / "other.jsonl"
    write_records(other, [GPU_LINE, trial_line(50.0, 64)])
    with open_store(str(tmp_path / "t.db"), import_shipped=False) as store:
        assert store.import_records(mine) == 1
        assert store.import_records(other) == 0  # only a shipped row gives way: the first import's stays
        assert _rows_of(store, 64) == [(f"imported:{mine}", 99.0)]


def test_the_review_reproduction_through_the_cli(run: Cli, shipped: Path, tmp_path: Path) -> None:
    shipped_file = tmp_path / "resources" / "records" / "nvidia-h200.jsonl"
    gpu, first, second = shipped_file.read_text().splitlines()
    line = json.loads(first)
    mine = tmp_path / "mine.jsonl"
    mine.write_text(gpu + "\n" + json.dumps({**line, "time_us": 99.0}) + "\n")
    result = run("import", str(mine), "--db", str(shipped))
    assert result.code == 0, result
    assert f"imported 1 trial (1 replacing a shipped row's time) from {mine}" in result.err
    assert "imported 0 trials" in run("import", str(mine), "--db", str(shipped)).err
    shipped_file.write_text(gpu + "\n" + second + "\n")  # the shipped file no longer holds that line
    assert run("list", "--db", str(shipped)).code == 0
    with sqlite3.connect(shipped) as db:
        kept = db.execute(
            "SELECT origin, time_us FROM trials WHERE config_key = ?", [config_key(line["config"])]
        ).fetchall()
    assert kept == [(f"imported:{mine}", 99.0)]


# --- commands that only write refuse the in-memory fallback -----------------------------------------


@pytest.fixture
def unusable_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME is a file: the default database cannot be created, the store falls back to memory."""
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME")


def _refused(result: object, action: str) -> None:
    assert getattr(result, "code", None) == 2, result
    text = getattr(result, "out", "") + getattr(result, "err", "")
    lines = getattr(result, "err", "").splitlines()
    assert "Traceback" not in text and lines[-1].startswith(f"error: cannot {action}"), text
    assert "keeps nothing" in lines[-1] and "--db" in lines[-1] and "AUTOTUNE_DB" in lines[-1]


def test_import_and_queue_add_refuse_the_in_memory_fallback(
    run: Cli, shipped: Path, unusable_home: None, tmp_path: Path
) -> None:
    records = tmp_path / "resources" / "records" / "nvidia-h200.jsonl"
    _refused(run("import", str(records)), "import")
    _refused(run("queue", "--add", "--gpu", "h200", "--m", "64", "--n", "64"), "queue problems")
    answered = run("best", "--m", "4096", "--n", "8192", "--gpu", "h200")  # reading still answers
    assert answered.code == 0 and "measured 4.00 us" in answered.out
    assert run("import", str(records), "--db", str(tmp_path / "given.db")).code == 0  # a place given is used
    exported = run("export", "-o", str(tmp_path / "fallback.csv"), "--format", "csv")  # no file to write over
    assert exported.code == 0 and (tmp_path / "fallback.csv").exists(), exported


def test_a_sweep_refuses_the_in_memory_fallback_before_it_tunes(
    shipped: Path, unusable_home: None, recwarn: pytest.WarningsRecorder
) -> None:
    with open_store() as store:
        assert store.fallback is not None
        with pytest.raises(AutotuneError, match=r"cannot queue problems: .*keeps nothing"):
            store.enqueue(H200.name, [SHAPE])  # a sweep of problems given queues them first
        with pytest.raises(AutotuneError, match=r"cannot tune: .*keeps nothing"):
            store.claim_next(H200.name, timedelta(minutes=5))  # sweep --pending claims from the queue
    with open_store(str(shipped)) as given:
        assert given.fallback is None and given.enqueue(H200.name, [SHAPE])


# --- problem rows written straight into the database -----------------------------------------------


def _add_bad_problem(db: Path, gpu_name: str, op: str, dtype: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO problems (gpu_name, op, dtype, m, n, k, trans, created_at)"
            " VALUES (?, ?, ?, -5, 0, 0, 0, '2026-01-01 00:00:00')",
            [gpu_name, op, dtype],
        )


@pytest.mark.shipped_records
def test_a_stored_problem_of_bad_sizes_is_skipped_by_warmup_and_the_bundle(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The H100's GEMV records alone: the warmup and the bundle read every stored problem.
    shipped_db = shipped_copies.db_folder(tmp_path / "resources", ["nvidia-h100-80gb-hbm3.jsonl"])
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: shipped_db)
    db = tmp_path / "t.db"
    open_store(str(db)).close()
    _add_bad_problem(db, "NVIDIA H100 80GB HBM3", "gemv", "float32")
    warmed = run("warmup", "--stored", "--op", "sgemv", "--gpu", "h100", "--db", str(db))
    assert warmed.code == 0 and "Traceback" not in warmed.text, warmed
    assert "-5" not in warmed.out and " shipped, 0 cached, 0 compiled" in warmed.out
    bundle = run(
        "export", "--format", "bundle", "--op", "sgemv", "--gpu", "h100", "-o", str(tmp_path / "b"), "--db", str(db)
    )
    assert bundle.code == 0 and "Traceback" not in bundle.text, bundle
    assert "-5" not in (tmp_path / "b" / "manifest.json").read_text()


def test_every_reader_skips_a_stored_problem_of_bad_sizes(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    mine = tmp_path / "mine.jsonl"
    write_records(mine, [GPU_LINE, trial_line(5.0, 64)])
    with open_store(str(db), import_shipped=False) as store:
        store.import_records(mine)
    _add_bad_problem(db, H200.name, "gemv", "float16")
    with sqlite3.connect(db) as connection:  # a trial of it too, copied from the good one
        bad_id = connection.execute("SELECT id FROM problems WHERE m = -5").fetchone()[0]
        connection.execute(
            "INSERT INTO trials (problem_id, gpu_id, config_key, config, status, time_us, times_us, message,"
            " source_hash, nvcc, pycuda, driver, cuda, origin, created_at, rounds)"
            " SELECT ?, gpu_id, config_key, config, status, 1.0, times_us, message, source_hash, nvcc, pycuda,"
            " driver, cuda, origin, created_at, rounds FROM trials",
            [bad_id],
        )
    with open_store(str(db), import_shipped=False) as store:
        assert [(p.m, p.n) for p in store.problems()] == [(4096, 4096)]
        assert [(row.m, row.n) for row in store.tuned(H200.name, "gemv", "float16", None)] == [(4096, 4096)]
        assert [problem.m for _, problem, _ in store.selection_rows(4).problems] == [4096]
        assert store.export_records(H200.name, tmp_path / "out.jsonl") == 1


def test_a_queued_problem_of_bad_sizes_is_neither_claimed_nor_listed(tmp_path: Path) -> None:
    """A queued problem whose row was changed straight in to M = -5: a sweep that claimed it would
    meet its sizes; the next sound problem is claimed instead."""
    db = tmp_path / "t.db"
    good, damaged = RECORDED, RECORDED.__class__(RECORDED.op, RECORDED.dtype, 2048, 2048)
    with open_store(str(db), import_shipped=False) as store:
        store.enqueue(H200.name, [damaged, good])
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE problems SET m = -5 WHERE m = 2048")
    with open_store(str(db), import_shipped=False) as store:
        with pytest.warns(AutotuneWarning, match="1 queue row name no problem"):  # never claimed: said so
            assert [row.problem for row in store.queue_rows()] == [good]
        first = store.claim_next(H200.name, timedelta(seconds=60))
        assert first.claim is not None and first.claim.problem == good
        assert store.claim_next(H200.name, timedelta(seconds=60)).claim is None


def test_a_queue_row_of_unknown_state_is_neither_claimed_nor_listed(tmp_path: Path) -> None:
    """A queue row whose state was written straight in as no state the queue knows: claiming it would
    tune a problem nobody queued in that form; the next sound row is claimed instead."""
    db = tmp_path / "t.db"
    good, damaged = RECORDED, RECORDED.__class__(RECORDED.op, RECORDED.dtype, 2048, 2048)
    with open_store(str(db), import_shipped=False) as store:
        store.enqueue(H200.name, [damaged, good])
    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE queue SET state = 'bogus' WHERE problem_id = (SELECT id FROM problems WHERE m = 2048)"
        )
    with open_store(str(db), import_shipped=False) as store:
        with pytest.warns(AutotuneWarning, match="1 queue row name no problem"):
            assert [row.problem for row in store.queue_rows()] == [good]
        first = store.claim_next(H200.name, timedelta(seconds=60))
        assert first.claim is not None and first.claim.problem == good
        assert store.claim_next(H200.name, timedelta(seconds=60)).claim is None
