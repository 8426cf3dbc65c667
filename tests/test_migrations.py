"""Upgrades from every earlier schema revision, with rows in every table: nothing lost, ids kept."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, Toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import config_key
from autotune.ops import gemv
from autotune.store import Provenance, open_store
from autotune.store import selection_table as table
from autotune.store.database import alembic_config
from autotune.store.models import Base
from tests import postgres

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 4096)
RUNS = gemv.DEFAULT_CONFIG  # a config of SHAPE's space: only such a row is a problem's best
WHEN = "2025-01-01 00:00:00"


def earlier_revisions() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config())
    head = script.get_current_head()
    return sorted(r.revision for r in script.walk_revisions() if r.revision != head)


def _fill(connection: sqlite3.Connection, revision: str) -> None:
    """One row in every table, as an autotune at `revision` wrote them."""
    connection.execute(
        "INSERT INTO gpus VALUES (1, 'NVIDIA H200', 'GPU-1111', '9.0', 132, 62914560, 151397597184, '13.0', '13.0', ?)",
        (WHEN,),
    )
    problem_cols = "id, gpu_name, op, dtype, m, n, created_at"
    connection.execute(
        f"INSERT INTO problems ({problem_cols}) VALUES (1, 'NVIDIA H200', 'gemv', 'float16', 4096, 4096, ?)", (WHEN,)
    )
    trial_cols = (
        "problem_id, gpu_id, config_key, config, status, time_us, times_us, gbs, rel_error, message, "
        "source_hash, nvcc, pycuda, driver, cuda, origin, created_at, finished_at"
    )
    for trial_id, key, status, time_us in ((1, '{"a":1}', "ok", 3.5), (7, '{"a":2}', "running", None)):
        connection.execute(
            f"INSERT INTO trials (id, {trial_cols}) VALUES (?, 1, 1, ?, ?, ?, ?, '[3.5]', 100.0, 0.0, '', "
            "'src', 'n', 'p', '13.0', '13.0', 'measured', ?, ?)",
            (trial_id, key, key, status, time_us, WHEN, WHEN if status == "ok" else None),
        )
    connection.execute("INSERT INTO crashes VALUES (1, '{\"a\":3}', 'src', 2, ?)", (WHEN,))
    connection.execute("INSERT INTO shipped_imports VALUES ('nvidia-h200.jsonl', 'abc', ?)", (WHEN,))
    if revision >= "0002":
        connection.execute("UPDATE problems SET k = 0, trans = 0")
    if revision >= "0003":
        connection.execute("UPDATE trials SET rounds = 2 WHERE id = 1")


def _add_trial(connection: sqlite3.Connection, trial_id: int, problem_id: int, config: dict[str, int]) -> None:
    """An OK trial of `config` (its key the config's text) for a config migration to move."""
    cols = (
        "problem_id, gpu_id, config_key, config, status, time_us, times_us, gbs, rel_error, message, "
        "source_hash, nvcc, pycuda, driver, cuda, origin, created_at, finished_at"
    )
    connection.execute(
        f"INSERT INTO trials (id, {cols}) VALUES (?, ?, 1, ?, ?, 'ok', 20.5, '[20.5]', 100.0, 0.0, '', "
        "'src', 'n', 'p', '13.0', '13.0', 'measured', ?, ?)",
        (trial_id, problem_id, config_key(config), config_key(config), WHEN, WHEN),
    )


def _trial_configs(connection: sqlite3.Connection) -> dict[int, tuple[str, dict[str, int]]]:
    """Each trial's key and config, by id."""
    found = connection.execute("SELECT id, config_key, config FROM trials ORDER BY id")
    return {i: (key, json.loads(config)) for i, key, config in found}


@contextmanager
def migrating(
    url: str, revision: str, step: Callable[[Config, str], None] = command.upgrade
) -> Iterator[tuple[Connection, Config]]:
    """One transaction on the database at `url`, which first takes it through the migrations up (or `step`
    down) to `revision`, one after the other; its connection and Alembic config, to add rows and go on."""
    engine = create_engine(url)
    config = alembic_config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            step(config, revision)
            yield connection, config
    finally:
        engine.dispose()


def migrated_to(path: Path, revision: str, step: Callable[[Config, str], None] = command.upgrade) -> None:
    """A SQLite file taken through the migrations up (or `step` down) to `revision`, one after the other."""
    with migrating(f"sqlite:///{path}", revision, step):
        pass


def database_at(path: Path, revision: str) -> None:
    migrated_to(path, revision)
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA foreign_keys=ON")
        _fill(connection, revision)
    connection.close()


def _sql(text: str | None) -> object:
    """A table's SQL with its constraints as a set: Alembic's batch mode, which rebuilds a SQLite table,
    writes them in an order that changes from one run to the next."""
    if text is None or not text.startswith("CREATE TABLE"):
        return text
    lines = [line.strip().rstrip(",") for line in text.splitlines()]
    constraints = {line for line in lines if line.startswith("CONSTRAINT")}
    return [line for line in lines if line not in constraints], constraints


def _schema_and_rows(path: Path) -> tuple[list[tuple[object, ...]], dict[str, list[tuple[object, ...]]]]:
    with sqlite3.connect(path) as connection:
        found = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
        schema = [(kind, name, table, _sql(sql)) for kind, name, table, sql in found]
        tables = [name for kind, name, _, _ in schema if kind == "table" and not name.startswith("sqlite_")]
        rows = {name: connection.execute(f'SELECT * FROM "{name}"').fetchall() for name in tables}
    connection.close()
    return schema, rows


def test_a_new_file_is_what_every_migration_leaves(tmp_path: Path) -> None:
    """A new SQLite file gets the head schema in one go (database.head_schema): its tables, indexes,
    triggers, their SQL and its rows are those of a file taken through every migration."""
    migrated, made = tmp_path / "migrated.db", tmp_path / "made.db"
    migrated_to(migrated, "head")
    open_store(str(made), import_shipped=False).close()
    schema, rows = _schema_and_rows(made)
    assert (schema, rows) == _schema_and_rows(migrated)
    assert sum(kind == "trigger" for kind, *_ in schema) == 12 and rows["change_counter"] == [(1, 0)]
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert rows["alembic_version"] == [(head,)]


def test_every_revision_but_head_is_tried() -> None:
    assert earlier_revisions()[0] == "0001" and len(earlier_revisions()) >= 3


@pytest.mark.parametrize("revision", earlier_revisions())
def test_upgrade_keeps_every_row(db_path: Path, revision: str) -> None:
    database_at(db_path, revision)
    with open_store(str(db_path), import_shipped=False) as store:
        pid = store.problem_id(SHAPE, H200.name, create=False)
        assert pid == 1
        assert [g.uuid for g in store.gpus()] == ["GPU-1111"]
        [done] = store.completed_trials(pid, "src")
        assert (done.id, done.config, done.time_us) == (1, {"a": 1}, 3.5)
        assert done.rounds == (2 if revision >= "0003" else 1)
        assert store.crash_count(pid, '{"a":3}', "src") == 2
        # The running row an older autotune left has no owner: it counts as abandoned.
        assert store.drop_unfinished(pid) == 1
        where = Provenance(pid, 1, "src", Toolchain("n", "p", "a"), "13.0", "13.0")
        new = store.start_trial(where, RUNS)
        assert new > 7  # the dropped row's id is not handed out again
        store.finish_trial(new, Outcome(Status.OK, time_us=2.0))
        best = store.best(H200.name, SHAPE, "src")
        assert best is not None and best.config == RUNS
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
        assert connection.execute("SELECT file_name FROM shipped_imports").fetchall() == [("nvidia-h200.jsonl",)]
    connection.close()


def test_an_upgrade_that_would_break_references_is_rolled_back(db_path: Path) -> None:
    database_at(db_path, "0001")
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE trials SET problem_id = 99 WHERE id = 1")  # foreign keys off: a stray row
    connection.close()
    with pytest.raises(AutotuneError, match="refer to rows that do not exist"):
        open_store(str(db_path), import_shipped=False)
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
    connection.close()


PROBLEM_KEY = "SELECT id, gpu_name, op, dtype, m, n, k, trans FROM problems ORDER BY id"
COUNTED = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'change_counter_%'"


def test_problems_gain_input_dtypes_and_variant_and_read_as_before(db_path: Path) -> None:
    database_at(db_path, "0008")
    with sqlite3.connect(db_path) as connection:
        before = connection.execute(PROBLEM_KEY).fetchall()
    connection.close()
    with open_store(str(db_path), import_shipped=False) as store:
        [summary] = store.problems()
        assert summary.problem == SHAPE and (summary.input_dtypes, summary.variant) == ("", "")
        # The problems table was rebuilt (SQLite's batch mode): the change count still sees its writes.
        assert table.new_identity(db_path)
        counted = table.read_version(db_path)
        assert counted is not None
        assert store.problem_id(replace(SHAPE, m=8), H200.name) is not None
        moved = table.read_version(db_path)
        assert moved is not None and moved.changes > counted.changes
    with sqlite3.connect(db_path) as connection:
        assert connection.execute(PROBLEM_KEY).fetchall()[:1] == before
        assert connection.execute("SELECT input_dtypes, variant FROM problems").fetchall() == [("", "")] * 2
        assert connection.execute(COUNTED).fetchone() == (len(table.TRIGGERS),)
    connection.close()


def test_a_downgrade_below_0009_keeps_only_problems_the_older_schema_names(db_path: Path) -> None:
    database_at(db_path, "0009")
    with sqlite3.connect(db_path) as connection:
        connection.execute(
            "INSERT INTO problems (id, gpu_name, op, dtype, m, n, variant, created_at) "
            "VALUES (2, 'NVIDIA H200', 'gemv', 'float16', 4096, 4096, 'g128', ?)",
            (WHEN,),
        )
        connection.execute("UPDATE trials SET problem_id = 2 WHERE id = 7")
    connection.close()
    migrated_to(db_path, "0008", command.downgrade)
    with sqlite3.connect(db_path) as connection:
        assert [row[:3] for row in connection.execute(PROBLEM_KEY)] == [(1, "NVIDIA H200", "gemv")]
        assert connection.execute("SELECT id FROM trials").fetchall() == [(1,)]
        assert connection.execute(COUNTED).fetchone() == (len(table.TRIGGERS),)
    connection.close()


@contextmanager
def postgres_database() -> Iterator[str]:
    """The URL of a new database on a throwaway PostgreSQL server."""
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # pytest's tmp_path is closed to the server's user
    try:
        with postgres.server(folder) as server:
            yield server.new_database()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.stress
def test_0009_on_postgresql_matches_the_models_and_keeps_problems() -> None:
    """PostgreSQL alters the table in place: the new columns, the wider unique key, every row kept.
    A real server, so under stress."""
    with postgres_database() as url:
        with migrating(url, "0008") as (connection, _):
            connection.exec_driver_sql(
                "INSERT INTO problems (gpu_name, op, dtype, m, n, created_at) "
                f"VALUES ('NVIDIA H200', 'gemv', 'float16', 4096, 4096, '{WHEN}')"
            )
        with open_store(url, import_shipped=False) as store:
            assert [summary.problem for summary in store.problems()] == [SHAPE]
            # The wider unique key holds a second row of the shape that differs in its variant alone.
            assert store.problem_id(replace(SHAPE, variant="g128"), H200.name) == 2
            with store.db.engine.connect() as connection:
                assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []


NARROW = {"block": 1024, "width": 64, "vec": 8, "unroll": 4, "prefetch": 1, "per_sm": 2}  # narrow's keys before 0010


def test_narrow_configs_gain_lean_at_0_and_lose_it_on_the_way_down(db_path: Path) -> None:
    """0010: a transposed GEMV's narrow config gains "lean": 0 (trial and crash count, key and all);
    the plain GEMV's configs and any other keys are left as they were."""
    database_at(db_path, "0009")
    with sqlite3.connect(db_path) as connection:
        connection.execute(
            "INSERT INTO problems (id, gpu_name, op, dtype, m, n, k, trans, created_at) "
            "VALUES (2, 'NVIDIA H200', 'gemv', 'float16', 131072, 256, 0, 1, ?)",
            (WHEN,),
        )
        for trial_id, config in ((9, NARROW), (10, {**NARROW, "lanes": 1})):
            _add_trial(connection, trial_id, 2, config)
        connection.execute("INSERT INTO crashes VALUES (2, ?, 'src', 1, ?)", (config_key(NARROW), WHEN))
    connection.close()
    crashes = "SELECT problem_id, config_key FROM crashes ORDER BY problem_id"
    migrated_to(db_path, "head")
    lean = {**NARROW, "lean": 0}
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(lean), lean)
        assert rows[10] == (config_key({**NARROW, "lanes": 1}), {**NARROW, "lanes": 1})  # not narrow's: as it was
        assert rows[1] == ('{"a":1}', {"a": 1})  # the plain GEMV's
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(lean))]
    connection.close()
    migrated_to(db_path, "0009", command.downgrade)
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT config_key FROM trials WHERE id = 9").fetchone() == (config_key(NARROW),)
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(NARROW))]
    connection.close()


ONE_ROW = {"mt": 1, "block": 128, "rpw": 2, "unroll": 1, "policy": 1, "ksplit": 4}  # q8gemm at M = 1 before 0011
SKINNY = {**ONE_ROW, "mt": 8, "rpw": 16, "mma": 1, "stage": 0}  # q8gemm past M = 1 before 0011


def test_q8gemm_configs_gain_ring_and_at_one_row_mma_and_stage(db_path: Path) -> None:
    """0011: every q8gemm config gains "ring": 1, those of M = 1 also "mma": 0 and "stage": 0 (trial and
    crash count, key and all); other ops' configs are left alone, and the downgrade takes the keys off."""
    database_at(db_path, "0010")
    with sqlite3.connect(db_path) as connection:
        for problem_id, m in ((2, 1), (3, 16)):
            connection.execute(
                "INSERT INTO problems (id, gpu_name, op, dtype, m, n, k, trans, input_dtypes, variant, created_at) "
                "VALUES (?, 'NVIDIA H200', 'q8gemm', 'float16', ?, 4096, 4096, 0, 'float16,int8,float16', 'int8', ?)",
                (problem_id, m, WHEN),
            )
        for trial_id, problem_id, config in ((9, 2, ONE_ROW), (10, 3, SKINNY)):
            _add_trial(connection, trial_id, problem_id, config)
        connection.execute("INSERT INTO crashes VALUES (2, ?, 'src', 1, ?)", (config_key(ONE_ROW), WHEN))
    connection.close()
    crashes = "SELECT problem_id, config_key FROM crashes ORDER BY problem_id"
    migrated_to(db_path, "0011")
    one_row = {**ONE_ROW, "mma": 0, "stage": 0, "ring": 1}
    skinny = {**SKINNY, "ring": 1}
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(one_row), one_row)
        assert rows[10] == (config_key(skinny), skinny)
        assert rows[1] == ('{"a":1}', {"a": 1})  # the GEMV's
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(one_row))]
    connection.close()
    migrated_to(db_path, "0010", command.downgrade)
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(ONE_ROW), ONE_ROW) and rows[10] == (config_key(SKINNY), SKINNY)
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(ONE_ROW))]
    connection.close()


def test_q8gemm_configs_gain_stream(db_path: Path) -> None:
    """0012: every q8gemm config gains "stream": 0 (trial and crash count, key and all), a streaming one
    keeps its key both ways, other ops' configs are left alone, and the downgrade takes the key off."""
    database_at(db_path, "0011")
    before = {**ONE_ROW, "mma": 0, "stage": 0, "ring": 1}
    streaming = {**before, "stream": 1}
    with sqlite3.connect(db_path) as connection:
        connection.execute(
            "INSERT INTO problems (id, gpu_name, op, dtype, m, n, k, trans, input_dtypes, variant, created_at) "
            "VALUES (2, 'NVIDIA H200', 'q8gemm', 'float16', 1, 4096, 4096, 0, 'float16,int8,float16', 'int8', ?)",
            (WHEN,),
        )
        for trial_id, config in ((9, before), (10, streaming)):
            _add_trial(connection, trial_id, 2, config)
        connection.execute("INSERT INTO crashes VALUES (2, ?, 'src', 1, ?)", (config_key(before), WHEN))
    connection.close()
    crashes = "SELECT problem_id, config_key FROM crashes ORDER BY problem_id"
    migrated_to(db_path, "0012")
    after = {**before, "stream": 0}
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(after), after)
        assert rows[10] == (config_key(streaming), streaming)
        assert rows[1] == ('{"a":1}', {"a": 1})  # the GEMV's
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(after))]
    connection.close()
    migrated_to(db_path, "0011", command.downgrade)
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(before), before) and rows[10] == (config_key(streaming), streaming)
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(before))]
    connection.close()


def test_qgemm_cuda_core_configs_gain_chain(db_path: Path) -> None:
    """0013: a qgemm config of a float16 M = 1 problem that names rpw gains "chain": 2 (trial and crash
    count, key and all); a bfloat16 problem's config (no CUDA-core GEMV there) and other ops' are left
    alone, a config of chain 4 keeps its key both ways, and the downgrade takes the key off."""
    database_at(db_path, "0012")
    simt = {
        "mt": 1,
        "block": 256,
        "tiles": 1,
        "unroll": 4,
        "cluster": 1,
        "policy": 0,
        "min_blocks": 1,
        "ring": 2,
        "persist": 0,
        "rpw": 2,
    }
    four = {**simt, "chain": 4}
    tensor = {k: v for k, v in simt.items() if k != "rpw"}  # bfloat16's space has no rpw
    with sqlite3.connect(db_path) as connection:
        for pid, dtype in ((2, "float16"), (3, "bfloat16")):
            connection.execute(
                "INSERT INTO problems (id, gpu_name, op, dtype, m, n, k, trans, input_dtypes, variant, created_at) "
                f"VALUES ({pid}, 'NVIDIA H200', 'qgemm', '{dtype}', 1, 4096, 4096, 0, "
                f"'{dtype},int4,{dtype},uint8', 'g128', ?)",
                (WHEN,),
            )
        for trial_id, pid, config in ((9, 2, simt), (10, 2, four), (11, 3, tensor)):
            _add_trial(connection, trial_id, pid, config)
        connection.execute("INSERT INTO crashes VALUES (2, ?, 'src', 1, ?)", (config_key(simt), WHEN))
    connection.close()
    crashes = "SELECT problem_id, config_key FROM crashes ORDER BY problem_id"
    migrated_to(db_path, "0013")
    after = {**simt, "chain": 2}
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(after), after)
        assert rows[10] == (config_key(four), four)
        assert rows[11] == (config_key(tensor), tensor)
        assert rows[1] == ('{"a":1}', {"a": 1})  # the GEMV's
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(after))]
    connection.close()
    migrated_to(db_path, "0012", command.downgrade)
    with sqlite3.connect(db_path) as connection:
        rows = _trial_configs(connection)
        assert rows[9] == (config_key(simt), simt) and rows[10] == (config_key(four), four)
        assert connection.execute(crashes).fetchall() == [(1, '{"a":3}'), (2, config_key(simt))]
    connection.close()


@pytest.mark.stress
def test_0010_on_postgresql_gives_narrow_configs_lean() -> None:
    """PostgreSQL's JSON column and boolean `trans`: a narrow config gains "lean": 0 there too, a plain
    GEMV's config is left alone. A real server, so under stress."""
    with postgres_database() as url:
        with migrating(url, "0009") as (connection, config):
            connection.exec_driver_sql(
                "INSERT INTO gpus (id, name, uuid, compute_capability, sm_count, l2_bytes, memory_bytes, "
                f"driver, cuda, created_at) VALUES (1, 'NVIDIA H200', 'GPU-1111', '9.0', 132, 1, 1, '13.0', "
                f"'13.0', '{WHEN}')"
            )
            for pid, trans in ((1, "false"), (2, "true")):
                connection.exec_driver_sql(
                    "INSERT INTO problems (id, gpu_name, op, dtype, m, n, k, trans, created_at) "
                    f"VALUES ({pid}, 'NVIDIA H200', 'gemv', 'float16', 4096, 4096, 0, {trans}, '{WHEN}')"
                )
            for tid, pid, stored in ((1, 1, {"a": 1}), (2, 2, NARROW)):
                connection.exec_driver_sql(
                    "INSERT INTO trials (id, problem_id, gpu_id, config_key, config, status, times_us, message, "
                    "source_hash, nvcc, pycuda, driver, cuda, origin, created_at) VALUES "
                    f"({tid}, {pid}, 1, '{config_key(stored)}', '{config_key(stored)}', 'ok', '[]', '', 'src', "
                    f"'n', 'p', '13.0', '13.0', 'measured', '{WHEN}')"
                )
            command.upgrade(config, "head")
            rows = dict(connection.exec_driver_sql("SELECT id, config_key FROM trials").fetchall())
        assert rows == {1: config_key({"a": 1}), 2: config_key({**NARROW, "lean": 0})}
