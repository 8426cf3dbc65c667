"""autotune export (a records file, or CSV) and autotune import: round trips and one-line errors."""

from __future__ import annotations

import csv
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from autotune import api, exports
from autotune.core import paths
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.store import open_store
from tests.fakes import ok, record, run_cli

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
H100 = GpuInfo("NVIDIA H100 80GB HBM3", "GPU-2222", "9.0", 132, 50 * 2**20, 80 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
FAST = {**gemv.DEFAULT_CONFIG, "block": 256, "vec": 8}
SLOW = {**gemv.DEFAULT_CONFIG, "block": 64}


@pytest.fixture
def db(tmp_path: Path) -> str:
    api.new_session()
    path = str(tmp_path / "tuned.db")
    with open_store(path, import_shipped=False) as store:
        record(store, SHAPE, FAST, ok(5.0), H200)
        record(store, SHAPE, SLOW, ok(8.0), H200)
        record(store, SHAPE, SLOW, ok(9.0), H100)
        record(store, SHAPE, gemv.DEFAULT_CONFIG, ok(2.0), H200, src="0ld50urce")  # an older kernel's
    yield path
    api.new_session()


def test_a_records_file_of_the_best_config_round_trips(db: str, tmp_path: Path) -> None:
    out = tmp_path / "h200.jsonl"
    assert exports.export(out, gpu="h200", db=db) == 1
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["kind"] == "gpu" and lines[1]["config"] == FAST  # today's kernels only: not the 2.0 us
    fresh = str(tmp_path / "fresh.db")
    api.new_session()
    assert exports.import_file(out, db=fresh) >= 1
    best = api.store(fresh).best(H200.name, SHAPE, None)
    assert best is not None and (best.config, best.time_us) == (FAST, 5.0)


def test_csv_has_a_row_per_config_and_problem_of_every_gpu(db: str, tmp_path: Path) -> None:
    out = tmp_path / "all.csv"
    assert exports.export(out, fmt="csv", top=2, db=db) == 3
    rows = list(csv.DictReader(out.open()))
    assert [(r["gpu"], r["rank"], r["time_us"]) for r in rows] == [
        (H100.name, "1", "9.0"),
        (H200.name, "1", "5.0"),
        (H200.name, "2", "8.0"),
    ]
    assert rows[1]["op"] == "hgemv" and json.loads(rows[1]["config"]) == FAST and rows[1]["tflops"] == ""


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"fmt": "xml"}, "unknown export format"),
        ({}, "a records file holds one GPU"),
        ({"gpu": "NVIDIA A100"}, "unknown GPU 'NVIDIA A100': the database holds"),
        ({"allow_partial": True}, "--allow-partial applies to --format bundle"),
    ],
)
def test_export_errors_are_one_line(db: str, tmp_path: Path, kwargs: dict[str, str], words: str) -> None:
    with pytest.raises(AutotuneError, match=words) as error:
        exports.export(tmp_path / "out", db=db, **kwargs)  # type: ignore[arg-type]
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()


def test_a_damaged_file_imports_nothing(db: str, tmp_path: Path) -> None:
    out = tmp_path / "h200.jsonl"
    exports.export(out, gpu="h200", db=db)
    text = out.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join([*text, text[1].replace('"time_us"', '"time_us": -1, "x"')]) + "\n")
    fresh = str(tmp_path / "fresh.db")
    api.new_session()
    with pytest.raises(AutotuneError, match=r"damaged\.jsonl") as error:
        exports.import_file(damaged, db=fresh)
    assert "\n" not in str(error.value)
    assert api.store(fresh).best(H200.name, SHAPE, None) is None  # all or nothing


# --- rows the store skips, written straight into the database -----------------------------------------

EVIL = {**FAST, "block": "128 -DEVIL=1"}  # a string nvcc would read as a flag
OFF_SPACE = {**FAST, "block": 7}  # integers only, but no point of the space: import refuses it


def insert(connection: sqlite3.Connection, table: str, values: dict[str, Any]) -> int:
    names = ", ".join(values)
    cursor = connection.execute(
        f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(values))})", [*values.values()]
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def plant(db: str) -> None:
    """Beside the 5 us FAST trial: faster copies of it with a string config and with a config
    outside the space, and an op autotune does not know ('conv') with a trial of its own."""
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        fast = dict(connection.execute("SELECT * FROM trials WHERE time_us = 5.0").fetchone())
        problem = dict(connection.execute("SELECT * FROM problems WHERE id = ?", (fast["problem_id"],)).fetchone())
        conv = insert(connection, "problems", {**problem, "id": None, "op": "conv"})
        for changes in (
            {"config_key": "evil", "config": json.dumps(EVIL), "time_us": 1.0},
            {"config_key": "off", "config": json.dumps(OFF_SPACE), "time_us": 2.0},
            {"problem_id": conv, "time_us": 0.5},
        ):
            insert(connection, "trials", {**fast, "id": None, **changes})
    connection.close()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_rows_import_would_refuse_are_left_out_of_an_export(
    db: str, tmp_path: Path, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    plant(db)
    out = tmp_path / f"h200.{fmt}"
    with caplog.at_level(logging.WARNING):
        # FAST and SLOW: the faster rows are skipped, the next fastest taking their places
        assert exports.export(out, fmt=fmt, gpu="h200", top=2, db=db) == 2
    # the config outside the space; the others are skipped as by list and best, without a word
    assert "left out 1 stored trials of NVIDIA H200 that `autotune import` would refuse" in caplog.text
    if fmt == "csv":
        rows = list(csv.DictReader(out.open()))
        assert [(r["op"], r["rank"], json.loads(r["config"])) for r in rows] == [
            ("hgemv", "1", FAST),
            ("hgemv", "2", SLOW),
        ]
        return
    fresh = str(tmp_path / "fresh.db")
    api.new_session()
    assert exports.import_file(out, db=fresh) == 2
    best = api.store(fresh).best(H200.name, SHAPE, None)
    assert best is not None and (best.config, best.time_us) == (FAST, 5.0)


def test_a_records_file_import_would_refuse_is_not_written(db: str, tmp_path: Path) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE gpus SET name = ? WHERE uuid = ?", ("NVIDIA H200\x1b[2J", H200.uuid))
        connection.execute("UPDATE problems SET gpu_name = ? WHERE gpu_name = ?", ("NVIDIA H200\x1b[2J", H200.name))
    connection.close()
    with pytest.raises(AutotuneError, match=r"import would refuse its records file: .*control characters") as error:
        exports.export(tmp_path / "h200.jsonl", gpu="NVIDIA H200\x1b[2J", db=db)
    assert "\n" not in str(error.value) and not (tmp_path / "h200.jsonl").exists()


# --- output paths ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_link_planted_at_the_output_is_replaced_not_followed(db: str, tmp_path: Path, fmt: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    out = tmp_path / f"out.{fmt}"
    out.symlink_to(victim)
    old = os.umask(0o027)
    try:
        exports.export(out, fmt=fmt, gpu="h200", db=db)
    finally:
        os.umask(old)
    assert victim.read_text() == "untouched\n"
    assert not out.is_symlink() and out.read_text().count("\n") == 2
    assert oct(out.stat().st_mode & 0o777) == oct(0o640)  # a new file's mode under that umask, not mkstemp's 0600
    assert not list(tmp_path.glob(".*.tmp"))  # no staging file left behind


# --- defaults, counts and an empty database -------------------------------------------------------------


def test_a_records_file_or_bundle_takes_the_only_gpu_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "local_gpu_name", lambda: None)
    api.new_session()
    one = str(tmp_path / "one.db")
    with open_store(one, import_shipped=False) as store:
        record(store, SHAPE, FAST, ok(5.0), H200)
    assert exports.export(tmp_path / "h200.jsonl", db=one) == 1  # no --gpu needed
    assert json.loads((tmp_path / "h200.jsonl").read_text().splitlines()[0])["name"] == H200.name


def test_several_gpus_take_this_machines_else_need_gpu(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "local_gpu_name", lambda: None)
    for fmt, what in (("jsonl", "a records file"), ("bundle", "a bundle")):
        with pytest.raises(AutotuneError, match=f"{what} holds one GPU: give --gpu, one of {H100.name}, {H200.name}"):
            exports.export(tmp_path / "out", fmt=fmt, db=db)
    monkeypatch.setattr(api, "local_gpu_name", lambda: H100.name)
    assert exports.export(tmp_path / "here.jsonl", db=db) == 1
    assert json.loads((tmp_path / "here.jsonl").read_text().splitlines()[0])["name"] == H100.name


def test_an_import_counts_what_it_compared(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "h200.jsonl"
    exports.export(out, gpu="h200", top=2, db=db)
    fresh = str(tmp_path / "fresh.db")
    first = run_cli(monkeypatch, capsys, "import", str(out), "--db", fresh)
    assert first == (0, "", f"imported 2 trials from {out}\n")
    again = run_cli(monkeypatch, capsys, "import", str(out), "--db", fresh)
    assert again == (0, "", f"imported 0 trials from {out} (2 in the file, all stored already)\n")
    lines = out.read_text().splitlines()
    one_more = tmp_path / "one_more.jsonl"
    one_more.write_text("\n".join([*lines, lines[1].replace('"m": 4096', '"m": 4000')]) + "\n")
    third = run_cli(monkeypatch, capsys, "import", str(one_more), "--db", fresh)
    assert third == (0, "", f"imported 1 trial from {one_more} (3 in the file; 2 stored already)\n")


def test_a_failed_import_creates_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("gpu,op\nH200,hgemv\n")
    target = tmp_path / "new2.db"
    code, _, err = run_cli(monkeypatch, capsys, "import", str(bad), "--db", str(target))
    assert code == 2 and "x.csv line 1: not JSON" in err
    code, _, err = run_cli(monkeypatch, capsys, "import", str(tmp_path / "missing.jsonl"), "--db", str(target))
    assert code == 2 and "cannot read records file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.csv"]


def test_no_shipped_makes_a_database_that_never_takes_the_shipped_records(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = paths.db_dir() / "records" / "h100.jsonl"  # the tests' own shipped records folder
    exports.export(shipped, gpu="h100", db=db)
    mine = tmp_path / "h200.jsonl"
    exports.export(mine, gpu="h200", db=db)
    api.new_session()
    empty = str(tmp_path / "empty.db")
    code, _, err = run_cli(monkeypatch, capsys, "import", str(mine), "--db", empty, "--no-shipped")
    assert (code, err) == (0, f"imported 1 trial from {mine}\n")
    api.new_session()  # a later process, without the option: still no shipped records
    assert api.store(empty).gpu_names() == [H200.name]
    with_shipped = str(tmp_path / "with.db")
    assert H100.name in api.store(with_shipped).gpu_names()
    api.new_session()  # a later process
    queue = ("queue", "--add", "--gpu", "h200", "--m", "64", "--n", "64", "--db", with_shipped, "--no-shipped")
    code, _, err = run_cli(monkeypatch, capsys, *queue)
    assert code == 2 and "--no-shipped applies to a new database" in err
