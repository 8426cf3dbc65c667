"""The selection table (autotune/store/selection_table.py): the launch path selects from it without SQLAlchemy
while it is current for the default database, gets the store's answer for every problem, tuned or
not, and falls back to the store wherever the table is stale, missing or damaged."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune import api
from autotune.core import fingerprint
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.ops import gemv, make_problem
from autotune.runtime import shipset
from autotune.select.choose import EVIDENCE_TOP, Choice, Selector
from autotune.store import Store, open_store, queries, stamps
from autotune.store import selection_table as table
from tests import shipped_copies
from tests.fakes import ok, record

REPO = Path(__file__).resolve().parents[1]
REBUILD = "run `python scripts/build_selection_table.py`"
H200 = GpuInfo("NVIDIA H200", "GPU-local-1", "9.0", 132, 60 << 20, 141 << 30, "580.159.04", "13.0")
SHIPPED = make_problem("gemv", "float16", 4096, 8192)  # a problem the shipped records measured on the H200
UNTUNED = [make_problem("gemv", "float16", 5000, 7001), make_problem("gemv", "float32", 3000, 12000, trans=True)]
MINE = {**gemv.DEFAULT_CONFIG, "block": 64, "lanes": 16, "unroll": 2, "rows": 2}  # no record picks it
THEIRS = {**MINE, "rows": 1}


def forget() -> None:
    """The API's per-process state dropped: the next selection is a new process's first."""
    api.new_session()


def launch_choice(problem: Problem = SHIPPED, db: str | None = None) -> Choice:
    """What the launch path selects for `problem` on an H200 (the device as the launcher sees it)."""
    device = SimpleNamespace(gpu=H200)
    return api.choose_on(problem, device, db)


def from_table() -> bool:
    """Whether the last selection came from the table: the default database was never opened."""
    return not api.default_store_opened()


# The records files the tests below ship: the H200's and the H100's GEMVs (SHIPPED among them, two
# GPUs). Every store of them, and every table the store writes beside a database, reads all their
# trials: with the whole of db/records (the tests marked slow below) each table written takes seconds.
SHIPPED_FILES = ("nvidia-h200.jsonl", "nvidia-h100-80gb-hbm3.jsonl")


@pytest.fixture(scope="module")
def shipped_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """db/ holding SHIPPED_FILES and the shipped table made from them, as
    scripts/build_selection_table.py makes db/selection.json from db/records (made once for the module)."""
    folder = shipped_copies.db_folder(tmp_path_factory.mktemp("shipped") / "db", SHIPPED_FILES)
    with open_store("sqlite://", import_shipped=False) as store:
        store.import_shipped(folder / "records")
        table.write(folder / table.SHIPPED_TABLE, table.to_lines(store.selection_rows(table.PER_SOURCE), None))
    return folder


@pytest.fixture
def resources(shipped_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """db/ as this checkout lays it out (records, shipped table, migrations), in a folder of the test's
    own: SHIPPED_FILES and their shipped table."""
    folder = shipped_copies.db_folder(tmp_path / "db", SHIPPED_FILES)
    shutil.copy(shipped_db / table.SHIPPED_TABLE, folder / table.SHIPPED_TABLE)
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: folder)
    forget()
    yield folder
    forget()


def database() -> Path:
    found = table.default_database()
    assert found is not None
    return found


@pytest.fixture(scope="module")
def records() -> Iterator[Store]:
    """A store holding the shipped records (in memory), as a new default database holds them."""
    with open_store("sqlite://", import_shipped=False) as store:
        store.import_shipped(REPO / "db" / "records")
        yield store


@pytest.mark.slow
def test_the_shipped_table_is_made_from_the_shipped_records(records: Store) -> None:
    committed = (REPO / "db" / table.SHIPPED_TABLE).read_text().splitlines()
    made = table.to_lines(records.selection_rows(table.PER_SOURCE), None)
    assert committed == made, f"db/{table.SHIPPED_TABLE} is stale: {REBUILD}"


def test_the_table_keeps_what_the_selector_reads(store: Store, db_path: Path) -> None:
    assert max(queries._RANKED, EVIDENCE_TOP) <= table.PER_SOURCE
    # Every trigger the table relies on exists at the schema's head, and each watched write counts.
    assert table.new_identity(db_path)
    before = table.read_version(db_path)
    assert before is not None
    record(store, SHIPPED, MINE, ok(1.0), H200)  # a GPU, a problem, a trial started, then finished
    after = table.read_version(db_path)
    assert after is not None and after.changes >= before.changes + 4 and after.identity == before.identity


def every_question(store: Store) -> list[tuple[Problem, str]]:
    """Problems of every kind the selector answers: stored ones (measured), the standard set (measured
    or estimated by the cost model), shapes nothing was tuned near, on every GPU stored and one only
    described (the defaults of its families)."""
    problems = [*shipset.standard_problems(), *UNTUNED]
    gpus = store.gpu_names()
    stored = [(row.problem, row.gpu_name) for row in store.problems()]
    described = [(problem, "NVIDIA A100-SXM4-80GB") for problem in problems[:: max(1, len(problems) // 12)]]
    return [*stored, *((problem, gpu) for gpu in gpus for problem in problems), *described]


def assert_same_answers(store: Store, lines: list[str], tmp_path: Path, every: int = 1) -> int:
    """Ask the store and the table the same questions (every `every`-th of them); returns how many."""
    path = tmp_path / "t.json"
    table.write(path, lines)
    from_store, from_file = Selector(store), Selector(table.read(path).table)
    questions = every_question(store)[::every]
    for problem, gpu in questions:
        expected = from_store.choose(problem, gpu, "580.0", "12.8")
        assert from_file.choose(problem, gpu, "580.0", "12.8") == expected, f"{problem} on {gpu}"
    return len(questions)


@pytest.mark.slow
def test_the_shipped_table_answers_as_the_store(records: Store, tmp_path: Path) -> None:
    """Every fourth question of every kind: the cost model's estimates make the whole set 11 s, so it
    runs whole under -m stress (.ci/run), below."""
    asked = assert_same_answers(records, table.to_lines(records.selection_rows(table.PER_SOURCE), None), tmp_path, 4)
    assert asked > 200


@pytest.mark.stress
def test_the_shipped_table_answers_every_question_as_the_store(records: Store, tmp_path: Path) -> None:
    asked = assert_same_answers(records, table.to_lines(records.selection_rows(table.PER_SOURCE), None), tmp_path)
    assert asked > 800


def test_a_database_with_old_kernels_and_bad_rows_answers_as_the_store(store: Store, tmp_path: Path) -> None:
    """Trials of an earlier kernel source (faster than today's), rows an older autotune let in (a
    config that is not all integers), two physical GPUs of one model: read alike."""
    second = GpuInfo("NVIDIA H200", "GPU-local-2", "9.0", 132, 60 << 20, 141 << 30, "580.0", "12.8")
    for m, n in ((4096, 8192), (1024, 4096), (8192, 2048)):
        problem = make_problem("gemv", "float16", m, n)
        record(store, problem, MINE, ok(20.0), H200)
        record(store, problem, THEIRS, ok(25.0), second)
        record(store, problem, {**MINE, "unroll": 4}, ok(5.0), H200, src="0123456789abcdef")
        record(store, problem, {**MINE, "unroll": 8}, ok(1.0), H200)
    with sqlite3.connect(store.sqlite_file) as connection:
        connection.execute("UPDATE trials SET config = ? WHERE time_us = 1.0", (json.dumps({"block": "64"}),))
    lines = table.to_lines(store.selection_rows(table.PER_SOURCE), Path("/nowhere"))
    assert assert_same_answers(store, lines, tmp_path) > 100
    best = Selector(table.read(tmp_path / "t.json").table).choose(
        make_problem("gemv", "float16", 4096, 8192), H200.name
    )
    assert best.config == MINE and best.source == "measured"


@pytest.mark.slow
def test_every_shipped_problem_is_answered_from_its_exact_hit_line_as_the_full_selector(records: Store) -> None:
    """The first call's fast path: a problem the shipped records measured is answered from its
    group's exact-hit line alone (no group parsed, no cost model), with the store's answer."""
    shipped = table.read(REPO / "db" / table.SHIPPED_TABLE).table
    held = shipped.problems()
    full = Selector(records)
    measured = 0
    for gpu, problem in held:
        fresh = shipped
        fresh._parsed.clear()  # as in a new process: nothing parsed yet
        fresh._exact.clear()
        choice = Selector(fresh).choose(problem, gpu, "580.0", "12.8")
        assert choice == full.choose(problem, gpu, "580.0", "12.8"), f"{problem} on {gpu}"
        if choice.source == "measured":
            measured += 1
            assert not fresh._parsed, f"{problem} on {gpu}: a group was parsed"
    assert {gpu for gpu, _ in held} == set(records.gpu_names()) and measured > 0.9 * len(held)


def test_without_a_database_the_shipped_table_answers_and_no_database_is_made(resources: Path) -> None:
    choice = launch_choice()
    assert choice.source == "measured" and from_table()
    assert not database().exists()
    assert [launch_choice(problem) for problem in UNTUNED] == [
        api.session().selector(None).choose(p, H200.name, H200.driver, H200.cuda) for p in UNTUNED
    ]


def test_a_shape_tuned_here_wins_over_the_shipped_records(resources: Path) -> None:
    shipped = launch_choice()
    database().parent.mkdir(parents=True)
    with open_store(str(database())) as mine:  # the default database, as a sweep on this machine fills it
        record(mine, SHIPPED, MINE, ok(1.0), H200)
    forget()
    assert launch_choice().config == MINE and not from_table()  # the store, which writes the table beside it
    assert table.beside(database()).is_file()
    forget()
    assert launch_choice().config == MINE and from_table()
    # Shapes tuned nowhere near get the selector's answer from the table too.
    untuned = [launch_choice(problem) for problem in UNTUNED]
    forget()
    assert untuned == [api.session().selector(None).choose(p, H200.name, H200.driver, H200.cuda) for p in UNTUNED]
    # Another process writes a faster config: the table is stale at once, the store answers.
    with open_store(str(database())) as other:
        record(other, SHIPPED, THEIRS, ok(0.5), H200)
    forget()
    assert launch_choice().config == THEIRS and not from_table()
    assert shipped.config not in (MINE, THEIRS)


def test_a_write_by_another_program_stales_the_table(resources: Path) -> None:
    api.store()  # made, shipped records imported
    forget()
    launch_choice()  # the store: the table is written
    forget()
    assert launch_choice().config != MINE and from_table()
    with sqlite3.connect(database()) as connection:  # not through autotune at all
        connection.execute("DELETE FROM trials")
    forget()
    assert launch_choice().source == "estimate" or launch_choice().source == "default"
    assert not from_table()


def test_a_database_whose_counter_cannot_be_trusted_is_asked_directly(resources: Path) -> None:
    api.store()
    forget()
    launch_choice()
    assert table.default_table() is not None
    with sqlite3.connect(database()) as connection:
        connection.execute(f"DROP TRIGGER {table.TRIGGERS[4]}")
    assert table.read_version(database()) is None and table.default_table() is None


def test_changed_shipped_records_stale_both_tables(resources: Path) -> None:
    assert table.default_table() is not None
    path = sorted((resources / "records").glob("*.jsonl"))[0]
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # one trial fewer
    assert table.default_table() is None  # the shipped table
    api.store()
    forget()
    launch_choice()
    forget()
    assert table.default_table() is not None  # the database's own, made after it imported the file
    path.write_text("".join(lines))
    assert table.default_table() is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: "",
        lambda text: text[: len(text) // 2],
        lambda text: text.replace("block", "blocc", 1),  # a group that no longer matches the header's hash
        lambda text: "not json\n" + text.split("\n", 1)[1],
        lambda text: text.replace(f'"format":{table.FORMAT}', '"format":99', 1),
    ],
    ids=["empty", "cut", "edited", "header", "format"],
)
def test_a_damaged_table_falls_back_to_the_store_in_one_line(
    resources: Path, damage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    expected = launch_choice()
    shipped = resources / table.SHIPPED_TABLE
    shipped.write_text(damage(shipped.read_text()))
    forget()
    with caplog.at_level(logging.WARNING, logger="autotune"):
        assert launch_choice() == expected and not from_table()
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "\n" not in warned[0] and "the store answers" in warned[0]
    # The database's own table, damaged alike, is written again by the store.
    beside = table.beside(database())
    beside.write_text(damage(beside.read_text()))
    forget()
    assert launch_choice() == expected and not from_table()
    forget()
    assert launch_choice() == expected and from_table()


def test_explicit_databases_go_to_the_store(resources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert launch_choice(db=str(tmp_path / "other.db")).source == "measured"
    assert api.session().opened(str(tmp_path / "other.db"))
    forget()
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    assert table.default_database() is None and table.default_table() is None
    assert launch_choice().source == "measured" and not from_table()


def test_a_read_only_folder_keeps_no_table_and_is_asked_directly(
    resources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.store()
    forget()
    monkeypatch.setattr(table, "_writable", lambda folder: False)
    assert table.read_version(database()) is None
    assert launch_choice().source == "measured" and not from_table()


# The launch path in a fresh process, the driver replaced by test doubles (tests/test_runtime.py's):
# a shipped GEMV and GEMM on an H200, selected, found and launched without SQLAlchemy or PyCUDA.
LAUNCH = """\
import contextlib, ctypes, json, sys
import autotune
from autotune.core.fingerprint import GpuInfo
from autotune.gpu import driver
from autotune.gpu import device as device_module
from autotune.runtime import launcher

H200 = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 << 20, 141 << 30, "580.159.04", "13.0")
launched, origins = [], []

class Lib:
    def __getitem__(self, name):
        return {"cuLaunchKernelEx": self.launch, "cuCtxGetCurrent": self.current}[name]
    def launch(self, config, function, params, extra):
        launched.append(function.value)
        return 0
    def current(self, ref):
        ref._obj.value = 1000
        return 0

for name, value in {
    "lib": lambda: Lib(), "device_count": lambda: 1, "primary_context": lambda index: 1000,
    "in_context": lambda context: contextlib.nullcontext(), "relaxed_capture": contextlib.nullcontext,
    "capture_id": lambda stream: 0, "pointer_device": lambda pointer: 0, "allow_shared": lambda f, s: None,
    "load_function": lambda image, name: origins.append(image[:4].hex()) or 7,
    "mem_alloc": lambda n: 1 << 40, "memset_d32_async": lambda *a: None,
}.items():
    setattr(driver, name, value)
device_module.gpu_info = lambda index: H200

class Array:
    def __init__(self, shape, typestr, pointer):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (pointer, False), "version": 3}

def arrays(*shapes):
    return [Array(shape, "<f2", (i + 1) << 30) for i, shape in enumerate(shapes)]

A, x, y = arrays((4096, 8192), (8192,), (4096,))
autotune.gemv(A, x, out=y)
A, B, C = arrays((8, 4096), (4096, 4096), (8, 4096))
autotune.gemm(A, B, out=C)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "pycuda", "optuna", "sqlite3"})
print(json.dumps({"launched": len(launched), "images": origins, "loaded": loaded}))
"""


def test_the_launch_path_of_a_shipped_problem_imports_no_database_and_no_pycuda(tmp_path: Path) -> None:
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH)
    env = {
        "PATH": str(tmp_path / "bin"),  # no nvcc: nothing may compile
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["launched"] == 2 and result["loaded"] == []
    assert len(result["images"]) == 2  # both shipped (no nvcc on PATH), unpacked from db/kernels/
    assert not (tmp_path / "data" / "autotune" / "autotune.db").exists()


def test_nvcc_version_is_read_from_the_toolkit_without_running_nvcc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 3\n")  # running it would give no version
    nvcc.chmod(0o755)
    (toolkit / "version.json").write_text(json.dumps({"cuda_nvcc": {"name": "CUDA NVCC", "version": "12.8.93"}}))
    try:
        with monkeypatch.context() as patched:
            patched.setenv("PATH", str(toolkit / "bin"))
            fingerprint.nvcc_version.cache_clear()
            assert fingerprint.nvcc_version() == "12.8.93" and fingerprint.cuda_release() == "12.8"
    finally:
        # Taken again on the real PATH, as conftest.py took it: it is part of every cubin's cache key,
        # and left unset a later test with a fake nvcc first on PATH would set it, missing every cubin
        # the background compiled for the tests marked `nvcc`.
        fingerprint.nvcc_version.cache_clear()
        fingerprint.nvcc_version()


def test_the_driver_version_is_read_as_nvidia_smi_shows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "version"
    monkeypatch.setattr(fingerprint, "DRIVER_VERSION_FILE", str(proc))
    assert fingerprint.kernel_driver_version() is None
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U16)\n"
    )
    assert fingerprint.kernel_driver_version() == "580.159.04"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert fingerprint.kernel_driver_version() == "550.54.15"
    wide = "\uff15\uff15\uff10.54"  # digits, but not ASCII ones
    for garbled in ("NVRM version: Kernel Module for x86_64\n", "Kernel Module 550.x\n", f"Kernel Module {wide}"):
        proc.write_text(garbled)
        assert fingerprint.kernel_driver_version() is None


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled at once (stamps.py records what it checks however recently it changed)."""
    monkeypatch.setattr(stamps, "RACY_NS", 0)


def no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any) -> Any:
        raise AssertionError("hashed again")

    monkeypatch.setattr(table.hashlib, "sha256", refused)


def test_what_an_earlier_process_checked_is_trusted_until_a_file_changes(
    resources: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert table.default_table() is not None  # checked in full, stamps written
    with monkeypatch.context() as patched:
        no_hashing(patched)
        assert table.default_table() is not None  # the records and the table: stat only
    # A records file rewritten with as many bytes: its stat moves, so it is hashed again.
    path = sorted((resources / "records").glob("*.jsonl"))[0]
    text = path.read_text()
    digit = next(i for i, c in enumerate(text) if c.isdigit() and c != "7")
    path.write_text(text[:digit] + "7" + text[digit + 1 :])
    assert table.default_table() is None
    path.write_text(text)
    assert table.default_table() is not None
    # And so is the table, damaged in place.
    shipped = resources / table.SHIPPED_TABLE
    shipped.write_text(shipped.read_text().replace("block", "blocc", 1))
    assert table.default_table() is None


def test_a_vouched_table_is_read_a_line_at_a_time_from_the_file_that_was_checked(
    resources: Path, settled: None, tmp_path: Path
) -> None:
    shipped = resources / table.SHIPPED_TABLE
    kept = stamps.Stamps(tmp_path / stamps.FILE)
    whole = table.read(shipped, kept).table  # read in full and hashed: the stamp recorded
    problems = whole.problems()
    gpu, problem = problems[0]
    source = whole.tuned(gpu, problem.op, problem.dtype, None, trans=problem.trans)[0].source_hash
    lazily = table.read(shipped, kept).table
    assert isinstance(lazily._texts._read.__self__, table._OpenFile)  # the header alone was read
    assert lazily.problems() == problems
    assert lazily.best(gpu, problem, source) == whole.best(gpu, problem, source)
    # A new table renamed into place (as write() does) leaves the open file answering as checked.
    renamed = lazily.best(gpu, problem, source)
    text = shipped.read_text()
    table.write(shipped, [text.splitlines()[0]] + ["[]"] * (len(text.splitlines()) - 1))
    lazily._exact.clear()
    assert lazily.best(gpu, problem, source) == renamed


def test_a_vouched_table_cut_short_in_place_is_damaged_not_a_crash(
    resources: Path, settled: None, tmp_path: Path
) -> None:
    shipped = resources / table.SHIPPED_TABLE
    kept = stamps.Stamps(tmp_path / stamps.FILE)
    gpu, problem = table.read(shipped, kept).table.problems()[-1]
    lazily = table.read(shipped, kept).table
    with open(shipped, "r+b") as handle:  # truncated in place, under the open descriptor
        handle.truncate(len(shipped.read_bytes().split(b"\n")[0]) + 1)
    with pytest.raises(table.Damaged, match="a bad exact-hit line"):
        lazily.best(gpu, problem, "any")


def test_a_table_whose_line_lengths_do_not_add_up_is_damaged(resources: Path, tmp_path: Path) -> None:
    shipped = resources / table.SHIPPED_TABLE
    header, _, body = shipped.read_bytes().partition(b"\n")
    broken = tmp_path / "broken.json"
    broken.write_bytes(header + b"\n" + body + b"\n")
    with pytest.raises(table.Damaged, match="do not add up"):
        table.read(broken)
    fields = json.loads(header)
    fields["lines"][0] = "many"
    broken.write_bytes(json.dumps(fields).encode() + b"\n" + body)
    with pytest.raises(table.Damaged, match="line lengths"):
        table.read(broken)


def test_files_changed_within_the_racy_window_are_not_recorded(resources: Path) -> None:
    assert table.default_table() is not None
    kept = table.paths.cache_home() / stamps.FILE  # none at all where nothing was recorded
    recorded = json.loads(kept.read_text())["digests"] if kept.exists() else {}
    assert not [name for name in recorded if name.startswith(str(resources))]  # all copied just now


def test_the_change_count_is_read_again_once_the_database_is_written(
    resources: Path, settled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.rmtree(resources / "records")  # none to import: the default database is made at once
    database().parent.mkdir(parents=True)
    with open_store(str(database())) as mine:
        record(mine, SHIPPED, MINE, ok(1.0), H200)
        assert table.refresh(mine, database())  # the table beside it
        assert table.default_table() is not None and table.default_table() is not None  # the count recorded
        with monkeypatch.context() as patched:
            patched.setattr(table, "read_version", lambda database: pytest.fail("the count was read"))
            assert table.default_table() is not None
        with sqlite3.connect(database()) as connection:  # another program's write: the log grows
            connection.execute("DELETE FROM trials")
        assert table.default_table() is None


def test_a_table_of_an_earlier_format_is_not_used_and_not_warned_about(
    resources: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Written by an earlier autotune: the store answers (and rewrites a database's table, as for a
    damaged one), without the warning a damaged table gets."""
    shipped = resources / table.SHIPPED_TABLE
    header, rest = shipped.read_text().split("\n", 1)
    shipped.write_text(header.replace(f'"format":{table.FORMAT}', '"format":1', 1) + "\n" + rest)
    with caplog.at_level(logging.DEBUG, logger="autotune"):
        assert table.default_table() is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and "earlier autotune" in caplog.text


def test_a_stamp_file_that_cannot_be_read_or_written_checks_in_full(tmp_path: Path) -> None:
    path = tmp_path / stamps.FILE
    path.write_text("{not json")
    found = stamps.Stamps(path)
    assert found.digest("/x", [1, 2, 3, 4, 5]) is None
    found.record_digest("/x", [1, 2, 3, 4, 5], "ab", stamps.now_ns())
    found.save()
    assert stamps.Stamps(path).digest("/x", [1, 2, 3, 4, 5]) == "ab"
    assert stamps.Stamps(path).digest("/x", [1, 2, 3, 4, 6]) is None
    blocked = stamps.Stamps(tmp_path / "a-file" / stamps.FILE)
    (tmp_path / "a-file").write_text("")
    blocked.record_digest("/x", [1, 2, 3, 4, 5], "ab", stamps.now_ns())
    blocked.save()  # no folder can be made there: nothing kept, no error


# --- databases rebuilt or replaced outside the store, and what else may sit at a file's place -------

BEST_TRIAL = (
    "SELECT t.id FROM trials t JOIN problems p ON p.id = t.problem_id WHERE p.gpu_name = ? AND p.op = 'gemv'"
    " AND p.dtype = 'float16' AND p.m = 4096 AND p.n = 8192 AND p.trans = 0 AND t.time_us = ?"
)


def counted(path: Path) -> int:
    with closing(sqlite3.connect(path)) as connection:
        return int(connection.execute(f"SELECT changes FROM {table.COUNTER_TABLE}").fetchone()[0])


def a_table_answering(resources: Path) -> Choice:
    """The default database made, its table written by the store and answering the launch path."""
    api.store()
    forget()
    launch_choice()
    forget()
    answered = launch_choice()
    assert from_table() and answered.source == "measured"
    return answered


@pytest.mark.parametrize("place", ["moved", "in place"])
def test_a_database_rebuilt_from_a_dump_is_asked_and_its_table_written_again(resources: Path, place: str) -> None:
    """The usual way to remove a row by hand: dump, edit, reload into a new file, move it into place
    (or empty the file and reload it there). The dump carries the change count (and creates the
    triggers after its inserts), so the count alone would call the old table current; the rebuilt
    file's identity (another inode, or the same file's header id with a moved schema cookie) does not
    match it."""
    removed = a_table_answering(resources)
    with closing(sqlite3.connect(database())) as connection:
        (trial,) = connection.execute(BEST_TRIAL, (H200.name, removed.time_us)).fetchone()
        dump = list(connection.iterdump())
    edited = [line for line in dump if not line.startswith(f'INSERT INTO "trials" VALUES({trial},')]
    assert len(edited) == len(dump) - 1
    count = counted(database())
    if place == "moved":
        rebuilt = database().with_name("rebuilt.db")
        with closing(sqlite3.connect(rebuilt)) as connection:
            connection.executescript("\n".join(edited))
        for suffix in ("-wal", "-shm"):
            database().with_name(database().name + suffix).unlink(missing_ok=True)
        rebuilt.replace(database())
    else:
        with closing(sqlite3.connect(database())) as connection:
            tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            ours = [name for (name,) in tables if not name.startswith("sqlite_")]
            connection.executescript("".join(f'DROP TABLE "{name}";' for name in ours))
            connection.executescript("\n".join(edited))
    assert counted(database()) == count  # what made the old table look current
    forget()
    answered = launch_choice()
    assert not from_table() and answered.source == "measured" and answered.time_us > removed.time_us
    assert answered == Selector(open_store(str(database()))).choose(SHIPPED, H200.name, H200.driver, H200.cuda)
    forget()
    assert launch_choice() == answered and from_table()  # the table was written again


def test_a_copy_restored_in_place_that_went_another_way_is_asked(resources: Path) -> None:
    """A copy of the database taken while its table was current, changed since, then restored over
    the database's own file (same inode) after the database was changed as often: the counts are
    equal, the content is not. Every table written gives the database a new id, so the copy's is old."""
    a_table_answering(resources)
    copy = database().with_name("copy.db")
    with closing(sqlite3.connect(database())) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)
    with closing(sqlite3.connect(copy)) as connection, connection:
        connection.execute("UPDATE trials SET time_us = time_us * 2")  # a change of one statement
    with closing(sqlite3.connect(database())) as connection, connection:
        connection.execute("DELETE FROM trials WHERE id = (SELECT max(id) FROM trials)")
    forget()
    launch_choice()  # the store: the table is written for the database as it is now
    forget()
    launch_choice()
    assert from_table()
    with closing(sqlite3.connect(copy)) as source, closing(sqlite3.connect(database())) as target:
        source.backup(target)
    assert counted(database()) == counted(copy)
    forget()
    answered = launch_choice()
    assert not from_table() and answered.time_us is not None
    with closing(sqlite3.connect(database())) as connection:
        assert connection.execute(BEST_TRIAL, (H200.name, answered.time_us)).fetchone() is not None


def unblock(fifo: Path) -> None:
    """Open the pipe's other end where something still waits on it, so that it ends."""
    with suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def within(seconds: float, call: Any, fifo: Path) -> Any:
    """`call()`'s result, failing where it blocks for `seconds` (it is then released)."""
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        unblock(fifo)
        worker.join(seconds)
        pytest.fail(f"blocked on the named pipe {fifo}")
    assert found
    return found[0]


def test_a_named_pipe_at_the_stamp_file_is_ignored(resources: Path) -> None:
    pipe = table.paths.cache_home() / stamps.FILE
    pipe.parent.mkdir(parents=True, exist_ok=True)
    pipe.unlink(missing_ok=True)
    os.mkfifo(pipe)
    try:
        assert within(5, table.default_table, pipe) is not None  # checked in full
        assert within(5, lambda: stamps.Stamps(pipe).digest("/x", [1, 2, 3, 4, 5]), pipe) is None
        with pytest.raises(OSError, match="not a regular file"):
            stamps.read_regular(pipe)
    finally:
        pipe.unlink()


def test_a_named_pipe_at_a_table_or_the_database_leaves_the_store_to_answer(resources: Path) -> None:
    a_table_answering(resources)
    beside = table.beside(database())
    beside.unlink()
    os.mkfifo(beside)
    forget()
    assert within(5, table.default_table, beside) is None
    with pytest.raises(OSError, match="not a regular file"):
        table.read(beside)
    beside.unlink()
    moved = database().with_name("moved.db")
    database().replace(moved)
    os.mkfifo(database())
    assert within(5, lambda: table.read_version(database()), database()) is None
