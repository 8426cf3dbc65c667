"""Tests of the storage layer on SQLite files: migrations, trials, results, records files, errors."""

from __future__ import annotations

import functools
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, Toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.store import Provenance, Store, check_url, config_key, open_store, resolve_url
from autotune.store.database import alembic_config
from autotune.store.models import Base
from tests.test_migrations import migrating

REPO = Path(__file__).resolve().parents[1]
H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
TOOLS = Toolchain(nvcc="13.0.88", pycuda="2025.1", autotune="0.1.0")
SHAPE = Problem("gemv", "float16", 4096, 4096)
OTHER = Problem("gemv", "float16", 8192, 1024)
SRC = "src-now"
TABLES = {
    "gpus",
    "problems",
    "trials",
    "crashes",
    "read_floors",
    "shipped_imports",
    "queue",
    "change_counter",
    "alembic_version",
}


def ok(time_us: float) -> Outcome:
    return Outcome(Status.OK, time_us=time_us, times_us=[time_us, time_us * 1.01], gbs=1000 / time_us)


def measure(store: Store, problem: Problem, config: dict[str, int], outcome: Outcome, src: str = SRC) -> int:
    gpu = store.upsert_gpu(H200)
    pid = store.problem_id(problem, H200.name)
    assert pid is not None
    trial = store.start_trial(Provenance(pid, gpu, src, TOOLS, H200.driver, H200.cuda), config)
    store.finish_trial(trial, outcome)
    return pid


def sqlite_tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as connection:
        # sqlite_sequence is SQLite's own (AUTOINCREMENT's counters).
        found = connection.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
        return {row[0] for row in found}


def write_records(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def trial_line(time_us: float, block: int, m: int = 4096) -> dict[str, object]:
    return {
        "kind": "trial",
        "op": "gemv",
        "dtype": "float16",
        "m": m,
        "n": 4096,
        "config": cfg(block),
        "time_us": time_us,
        "times_us": [time_us],
        "gbs": 1.0,
        "rel_error": None,
        "source_hash": SRC,
        "nvcc": "13.0.88",
        "pycuda": "2025.1",
        "driver": "13.0",
        "cuda": "13.0",
        "created_at": "2025-01-02T03:04:05+00:00",
    }


@functools.cache
def _valid_configs() -> list[dict[str, int]]:
    """GEMV configs valid for both SHAPE and OTHER: records files hold only points of the space."""
    both = (c for c in itertools.islice(gemv.OP.space(SHAPE), 20000) if gemv.OP.space(OTHER).check(c) is None)
    return list(itertools.islice(both, 1100))


def cfg(number: int) -> dict[str, int]:
    """A valid config, distinct for each number."""
    return dict(_valid_configs()[number])


GPU_LINE = {"kind": "gpu", **{k: v for k, v in H200.to_dict().items() if k != "uuid"}}


# --- opening and migrations ------------------------------------------------------------------------


def test_migrations_create_every_table_at_head(store: Store, db_path: Path) -> None:
    assert sqlite_tables(db_path) == TABLES
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]


def test_migration_matches_models(store: Store) -> None:
    with store.db.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []


def test_upgrade_from_0001_keeps_gemv_problems(db_path: Path) -> None:
    with migrating(f"sqlite:///{db_path}", "0001") as (connection, _):
        connection.exec_driver_sql(
            "INSERT INTO problems (id, gpu_name, op, dtype, m, n, created_at) "
            "VALUES (1, 'NVIDIA H200', 'gemv', 'float16', 4096, 4096, '2025-01-01 00:00:00')"
        )
    with open_store(str(db_path), import_shipped=False) as store:
        assert store.problem_id(SHAPE, H200.name) == 1
        assert store.problem_id(Problem("gemv", "float16", 4096, 4096, trans=True), H200.name) != 1
        gemm = Problem("gemm", "float16", 4096, 4096, 4096)
        measure(store, gemm, cfg(1), ok(9.0))
        assert [p.problem for p in store.problems(op="gemm")] == [gemm]


def test_wal_mode_is_on(store: Store, db_path: Path) -> None:
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_reopen_is_idempotent(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as first:
        measure(first, SHAPE, cfg(1), ok(5.0))
    with open_store(str(db_path), import_shipped=False) as second:
        assert second.best(H200.name, SHAPE, SRC) is not None
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)


def test_resolve_url_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    assert resolve_url(None) == f"sqlite:///{tmp_path}/data/autotune/autotune.db"
    assert (tmp_path / "data" / "autotune").is_dir()
    monkeypatch.setenv("AUTOTUNE_DB", "postgresql+psycopg://u:pw@host/db")
    assert resolve_url(None) == "postgresql+psycopg://u:pw@host/db"
    monkeypatch.chdir(tmp_path)
    assert resolve_url("rel.db") == f"sqlite:///{tmp_path}/rel.db"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("nosuchdriver://x", "unknown database driver"),
        ("sqlite:////nonexistent/dir/x.db", "its folder /nonexistent/dir does not exist"),
    ],
)
def test_bad_url_is_one_line_error(url: str, words: str) -> None:
    with pytest.raises(AutotuneError) as caught:
        open_store(url, import_shipped=False)
    message = str(caught.value)
    assert "\n" not in message and words in message and url.split("://")[0] in message
    assert not Path("/nonexistent").exists()  # a user-given folder is never created


def test_file_that_is_not_a_database(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("these are notes, not a database\n" * 50)
    before = text.read_bytes()
    expected = r"^cannot open database sqlite:///.*notes.txt: file is not a database$"
    with pytest.raises(AutotuneError, match=expected):
        open_store(str(text), import_shipped=False)
    assert text.read_bytes() == before


def test_password_is_masked() -> None:
    with pytest.raises(AutotuneError) as caught:
        open_store("postgresql+nosuchdbapi://user:hunter2@localhost/db", import_shipped=False)
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_check_url_touches_no_database(tmp_path: Path) -> None:
    assert check_url(str(tmp_path / "later.db")) == f"sqlite:///{tmp_path}/later.db"
    assert not (tmp_path / "later.db").exists()
    with pytest.raises(AutotuneError, match=r"^cannot open database nosuchdriver://x: unknown database"):
        check_url("nosuchdriver://x")


def test_newer_schema_is_refused_and_left_unchanged(db_path: Path) -> None:
    open_store(str(db_path), import_shipped=False).close()
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'ffff9999'")
    before = db_path.read_bytes()
    with pytest.raises(AutotuneError, match="schema revision ffff9999, newer than this autotune knows"):
        open_store(str(db_path), import_shipped=False)
    assert db_path.read_bytes() == before


def test_failed_migration_creates_nothing(db_path: Path) -> None:
    # A foreign table named like ours makes the migration fail half-way: nothing of it may remain.
    with sqlite3.connect(db_path) as connection:
        connection.execute("CREATE TABLE trials (x INTEGER)")
    with pytest.raises(AutotuneError, match="table trials already exists"):
        open_store(str(db_path), import_shipped=False)
    assert sqlite_tables(db_path) == {"trials"}


# --- trials of a sweep -----------------------------------------------------------------------------


def test_start_finish_round_trip(store: Store) -> None:
    gpu = store.upsert_gpu(H200)
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None and store.problem_id(SHAPE, H200.name, create=False) == pid
    assert store.problem_id(OTHER, H200.name, create=False) is None
    trial = store.start_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), {"block": 128, "rows": 4})
    assert store.completed_trials(pid, SRC) == []
    store.finish_trial(trial, ok(7.5))
    [row] = store.completed_trials(pid, SRC)
    assert row.id == trial and row.status is Status.OK and row.time_us == 7.5
    assert row.config == {"block": 128, "rows": 4} and row.config_key == '{"block":128,"rows":4}'
    assert (row.nvcc, row.pycuda, row.origin) == ("13.0.88", "2025.1", "measured")
    assert row.created_at.tzinfo is not None and row.finished_at is not None
    assert store.completed_trials(pid, "other-source") == []


def test_batched_reads_answer_as_the_reads_of_one_problem(store: Store) -> None:
    """The report's two queries for every problem give what trials() and read_floor() give one by one."""
    shape_id = measure(store, SHAPE, cfg(0), ok(9.0))
    measure(store, SHAPE, cfg(1), ok(7.0))
    other_id = measure(store, OTHER, cfg(2), Outcome(Status.COMPILE_ERROR, message="nvcc said no"))
    store.record_read_floor(H200, SHAPE.matrix_bytes, 6.0, "floor")
    store.record_read_floor(H200, SHAPE.matrix_bytes, 5.5, "floor")
    batched = store.trials_by_problem()
    assert batched == {(H200.name, SHAPE): store.trials(shape_id), (H200.name, OTHER): store.trials(other_id)}
    assert [row.time_us for row in batched[H200.name, SHAPE]] == [7.0, 9.0]  # best first, as trials()
    assert store.trials_by_problem("NVIDIA H100") == {}
    assert store.read_floors() == {(H200.name, SHAPE.matrix_bytes): store.read_floor(H200.name, SHAPE.matrix_bytes)}
    assert store.read_floors()[H200.name, SHAPE.matrix_bytes] == 5.5


def test_upsert_gpu_updates_driver(store: Store) -> None:
    first = store.upsert_gpu(H200)
    newer = GpuInfo(**{**H200.to_dict(), "driver": "13.1", "cuda": "13.1"})
    assert store.upsert_gpu(newer) == first
    [gpu] = store.gpus()
    assert (gpu.driver, gpu.cuda, gpu.trials) == ("13.1", "13.1", 0)
    assert store.gpu_names() == [H200.name]


def test_running_row_survives_a_killed_sweep(db_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import os, signal
        from autotune.core.fingerprint import GpuInfo, Toolchain
        from autotune.core.problem import Problem
        from autotune.store import Provenance, open_store
        store = open_store({str(db_path)!r}, import_shipped=False)
        gpu = store.upsert_gpu(GpuInfo(*{tuple(H200.to_dict().values())!r}))
        pid = store.problem_id(Problem("gemv", "float16", 4096, 4096), "NVIDIA H200")
        store.start_trial(Provenance(pid, gpu, {SRC!r}, Toolchain("n", "p", "a"), "13.0", "13.0"), {{"block": 64}})
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    with open_store(str(db_path), import_shipped=False) as store:
        pid = store.problem_id(SHAPE, H200.name, create=False)
        assert pid is not None
        assert [t.status for t in store.trials(pid)] == [Status.RUNNING]
        assert store.completed_trials(pid, SRC) == []
        assert store.drop_unfinished(pid) == 1
        assert store.trials(pid) == []
        measure(store, SHAPE, {"block": 64}, ok(3.0))
        assert [t.status for t in store.completed_trials(pid, SRC)] == [Status.OK]


def test_start_trial_reuses_a_running_row(store: Store) -> None:
    gpu = store.upsert_gpu(H200)
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    first = store.start_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), {"a": 1, "b": 2})
    again = store.start_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), {"b": 2, "a": 1})
    assert again == first and len(store.trials(pid)) == 1
    other_source = store.start_trial(Provenance(pid, gpu, "src-old", TOOLS, "13.0", "13.0"), {"a": 1, "b": 2})
    assert other_source != first
    assert store.drop_unfinished() == 2


def test_record_trial_keeps_the_final_row(store: Store) -> None:
    gpu = store.upsert_gpu(H200)
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    invalid = Outcome(Status.INVALID, "block does not divide n")
    first = store.record_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), cfg(3), invalid)
    failed = Outcome(Status.COMPILE_ERROR, "nvcc failed")
    second = store.record_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), cfg(3), failed)
    assert second == first
    [row] = store.trials(pid)
    assert (row.status, row.message) == (Status.INVALID, "block does not divide n")
    # A running row for the key is finished in place rather than duplicated.
    running = store.start_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), cfg(5))
    assert store.record_trial(Provenance(pid, gpu, SRC, TOOLS, "13.0", "13.0"), cfg(5), invalid) == running
    assert {t.status for t in store.trials(pid)} == {Status.INVALID}


def test_finish_trial_refuses_running(store: Store) -> None:
    with pytest.raises(ValueError):
        store.finish_trial(1, Outcome(Status.RUNNING))


def test_crash_count_survives_reopen(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as store:
        pid = store.problem_id(SHAPE, H200.name)
        assert pid is not None
        key = config_key(cfg(1024))
        assert store.crash_count(pid, key, SRC) == 0
        assert store.note_crash(pid, key, SRC) == 1
        assert store.note_crash(pid, key, SRC) == 2
    with open_store(str(db_path), import_shipped=False) as store:
        assert store.crash_count(pid, key, SRC) == 2
        assert store.crash_count(pid, key, "other-source") == 0


# --- results ---------------------------------------------------------------------------------------


def fill(store: Store) -> int:
    """SHAPE: OK at 5, 3 and 4 us, a wrong result, a timeout, a faster stale-source trial; OTHER: OK 9 us."""
    pid = measure(store, SHAPE, cfg(1), ok(5.0))
    measure(store, SHAPE, cfg(2), ok(3.0))
    measure(store, SHAPE, cfg(4), ok(4.0))
    measure(store, SHAPE, cfg(8), Outcome(Status.WRONG_RESULT, "max error 0.5", time_us=1.0))
    measure(store, SHAPE, cfg(16), Outcome(Status.TIMEOUT, "killed after 10 s"))
    measure(store, SHAPE, cfg(32), ok(0.5), src="src-old")
    measure(store, OTHER, cfg(2), ok(9.0))
    return pid


def test_best_picks_the_fastest_ok_trial(store: Store) -> None:
    fill(store)
    best = store.best(H200.name, SHAPE, SRC)
    assert best is not None
    assert (best.config, best.time_us, best.source_hash, best.trials) == (cfg(2), 3.0, SRC, 5)
    assert best.problem == SHAPE and best.origin == "measured"
    any_source = store.best(H200.name, SHAPE, None)
    assert any_source is not None and any_source.config == cfg(32) and any_source.trials == 6
    assert store.best(H200.name, Problem("gemv", "float16", 1, 1), SRC) is None
    assert store.best("NVIDIA A100", SHAPE, SRC) is None


def test_tuned_lists_one_best_per_problem(store: Store) -> None:
    fill(store)
    measure(store, Problem("gemv", "float32", 4096, 4096), cfg(1), ok(1.0))
    tuned = store.tuned(H200.name, "gemv", "float16", SRC)
    assert [(r.m, r.n, r.time_us) for r in tuned] == [(4096, 4096, 3.0), (8192, 1024, 9.0)]


def test_problems_and_trials_summaries(store: Store) -> None:
    pid = fill(store)
    measure(store, Problem("gemv", "float16", 64, 64), cfg(1), Outcome(Status.CRASHED))
    summaries = {(s.m, s.n): s for s in store.problems(H200.name, "gemv", "float16")}
    shape = summaries[(4096, 4096)]
    assert (shape.trials, shape.ok, shape.best_us, shape.best_config) == (6, 4, 0.5, cfg(32))
    current = {(s.m, s.n): s for s in store.problems(source_hash=SRC)}[(4096, 4096)]
    assert (current.trials, current.ok, current.best_us) == (5, 3, 3.0)
    assert summaries[(64, 64)].best_us is None and summaries[(64, 64)].trials == 1
    assert store.problems(dtype="float32") == []
    statuses = [(t.status, t.time_us) for t in store.trials(pid)]
    assert statuses[:4] == [(Status.OK, 0.5), (Status.OK, 3.0), (Status.OK, 4.0), (Status.OK, 5.0)]
    assert {s for s, _ in statuses[4:]} == {Status.WRONG_RESULT, Status.TIMEOUT}


def test_leaders_are_the_fastest_ok_trials_of_one_source(store: Store) -> None:
    pid = fill(store)
    assert [(t.config, t.time_us, t.rounds) for t in store.leaders(pid, SRC, 2)] == [
        (cfg(2), 3.0, 1),
        (cfg(4), 4.0, 1),
    ]
    assert store.leaders(pid, "src-other", 2) == []


def test_a_round_keeps_every_sample_and_the_slower_time(store: Store) -> None:
    pid = fill(store)
    fastest, second = store.leaders(pid, SRC, 2)
    store.add_round(fastest.id, ok(4.5))  # slower on the second buffers: it takes that time
    store.add_round(second.id, ok(3.5))  # faster: it keeps its slower first time
    fastest, second = store.leaders(pid, SRC, 2)
    assert (fastest.config, fastest.time_us, fastest.rounds) == (cfg(4), 4.0, 2)
    assert second.config == cfg(2) and (second.time_us, second.rounds) == (4.5, 2)
    assert second.times_us == [3.0, 3.0 * 1.01, 4.5, 4.5 * 1.01]
    assert second.gbs == pytest.approx(1000 / 4.5)
    best = store.best(H200.name, SHAPE, SRC)
    assert best is not None and best.config == cfg(4)


def test_a_round_that_fails_makes_the_trial_fail(store: Store) -> None:
    pid = fill(store)
    fastest = store.leaders(pid, SRC, 1)[0]
    store.add_round(fastest.id, Outcome(Status.WRONG_RESULT, "row 3: got nan"))
    failed = next(t for t in store.trials(pid) if t.id == fastest.id)
    assert (failed.status, failed.time_us, failed.rounds) == (Status.WRONG_RESULT, None, 2)
    assert failed.message == "round 2, on fresh buffers: row 3: got nan"
    assert failed.times_us == [3.0, 3.0 * 1.01]  # the first round's samples are kept
    assert store.leaders(pid, SRC, 1)[0].config == cfg(4)
    with pytest.raises(AutotuneError, match="is not an OK trial"):
        store.add_round(fastest.id, ok(1.0))
    measure(store, SHAPE, cfg(2), ok(3.3))  # measured afresh (a crash's retry): one round again
    again = next(t for t in store.trials(pid) if t.id == fastest.id)
    assert (again.status, again.time_us, again.rounds, again.message) == (Status.OK, 3.3, 1, "")


# --- records files ---------------------------------------------------------------------------------


def test_export_import_round_trip(store: Store, tmp_path: Path) -> None:
    fill(store)
    exported = tmp_path / "nvidia-h200.jsonl"
    # SHAPE's two fastest (one of them from the older source) and OTHER's only one.
    assert store.export_records(H200.name, exported, top=2) == 3
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert lines[0]["kind"] == "gpu" and lines[0]["uuid"] == H200.uuid
    assert all(line["kind"] == "trial" for line in lines[1:])
    with open_store(str(tmp_path / "fresh.db"), import_shipped=False) as fresh:
        assert fresh.import_records(exported) == 3
        assert fresh.import_records(exported) == 0  # unique keys: nothing twice
        best = fresh.best(H200.name, SHAPE, SRC)
        assert best is not None and (best.config, best.time_us) == (cfg(2), 3.0)
        assert best.origin == f"imported:{exported}"  # a user's file, even under a shipped file's name
        again = tmp_path / "again.jsonl"
        fresh.export_records(H200.name, again, top=2)
        assert again.read_text() == exported.read_text()  # deterministic, and nothing lost


def test_a_problem_another_process_inserted_first_is_found_not_doubled(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import inserts its new problems in one savepoint; where one of them appeared meanwhile (here:
    the read of the known problems misses it), each is looked up instead and nothing is doubled."""
    from autotune.store import records

    fill(store)
    exported = tmp_path / "nvidia-h200.jsonl"
    store.export_records(H200.name, exported, top=2)
    with open_store(str(tmp_path / "fresh.db"), import_shipped=False) as fresh:
        pid = fresh.problem_id(SHAPE, H200.name)  # there before the import
        monkeypatch.setattr(records, "_known_problems", lambda session, gpu_name: {})
        assert fresh.import_records(exported) == 3
        assert fresh.problem_id(SHAPE, H200.name, create=False) == pid
        assert len(fresh.problems(H200.name)) == 2


def test_records_carry_the_rounds(store: Store, tmp_path: Path) -> None:
    pid = fill(store)
    store.add_round(store.leaders(pid, SRC, 1)[0].id, ok(3.5))
    exported = tmp_path / "nvidia-h200.jsonl"
    store.export_records(H200.name, exported, top=1, source_hash=SRC)
    assert [json.loads(line).get("rounds") for line in exported.read_text().splitlines()] == [None, 2, 1]
    with open_store(str(tmp_path / "fresh.db"), import_shipped=False) as fresh:
        fresh.import_records(exported)
        fresh_pid = fresh.problem_id(SHAPE, H200.name, create=False)
        assert fresh_pid is not None
        assert [(t.time_us, t.rounds) for t in fresh.leaders(fresh_pid, SRC, 1)] == [(3.5, 2)]
    older = tmp_path / "older.jsonl"  # written before rounds existed: measured once
    write_records(older, [GPU_LINE, trial_line(2.0, 64)])
    assert store.import_records(older) == 1
    assert [t.rounds for t in store.trials(pid) if t.config == cfg(64)] == [1]
    write_records(older, [GPU_LINE, {**trial_line(2.0, 8), "rounds": 0}])
    with pytest.raises(AutotuneError, match="line 2: field 'rounds' must be an integer from 1 to 1000000, got 0"):
        store.import_records(older)


def test_export_of_current_sources_only(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SHAPE's kernel is "src-now" and OTHER's changed since its one trial: a shipped file gets
    # SHAPE's two fastest of today's source (not the faster stale one) and nothing of OTHER.
    from autotune import ops

    fill(store)
    monkeypatch.setattr(ops, "source_hash", lambda problem: SRC if problem == SHAPE else "src-newer")
    exported = tmp_path / "nvidia-h200.jsonl"
    assert store.export_records(H200.name, exported, top=2, current_only=True) == 2
    trials = [json.loads(line) for line in exported.read_text().splitlines()[1:]]
    assert [(t["m"], t["config"], t["source_hash"]) for t in trials] == [
        (4096, cfg(2), SRC),
        (4096, cfg(4), SRC),
    ]


def test_export_of_some_problems_only(store: Store, tmp_path: Path) -> None:
    # What autotune.tune_model writes: the records of the problems a model met, no others.
    fill(store)
    exported = tmp_path / "model.jsonl"
    assert store.export_records(H200.name, exported, top=2, problems={OTHER}) == 1
    trials = [json.loads(line) for line in exported.read_text().splitlines()[1:]]
    assert [(t["m"], t["n"]) for t in trials] == [(OTHER.m, OTHER.n)]
    assert store.export_records(H200.name, exported, top=2, problems=set()) == 0


def test_export_never_follows_a_link_planted_beside_the_target(store: Store, tmp_path: Path) -> None:
    fill(store)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    target = tmp_path / "nvidia-h200.jsonl"
    # The names an export once staged through, predictable from the pid.
    for name in (f".{target.name}.tmp{os.getpid()}", f".{target.name}.tmp"):
        (tmp_path / name).symlink_to(victim)
    old_umask = os.umask(0o022)  # the mode asserted below is a new file's under this umask
    try:
        assert store.export_records(H200.name, target) > 0
    finally:
        os.umask(old_umask)
    assert victim.read_text() == "untouched\n"
    assert not target.is_symlink() and target.read_text().count("\n") > 1
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)


def test_export_unknown_gpu(store: Store, tmp_path: Path) -> None:
    with pytest.raises(AutotuneError, match="no GPU named 'NVIDIA B200'"):
        store.export_records("NVIDIA B200", tmp_path / "x.jsonl")


def test_import_is_all_or_nothing(store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    broken = {**trial_line(2.0, 2), "m": -1}
    write_records(bad, [GPU_LINE, trial_line(1.0, 1), broken])
    with pytest.raises(AutotuneError, match=r"bad.jsonl line 3: M must be a positive integer"):
        store.import_records(bad)
    assert store.gpus() == [] and store.problems() == []
    bad.write_text(json.dumps(GPU_LINE) + "\n{not json\n")
    with pytest.raises(AutotuneError, match=r"bad.jsonl line 2: not JSON"):
        store.import_records(bad)


def test_import_without_uuid_uses_a_shipped_gpu(store: Store, tmp_path: Path) -> None:
    records = tmp_path / "nvidia-h200.jsonl"
    write_records(records, [GPU_LINE, trial_line(2.0, 2)])
    assert store.import_records(records) == 1
    [gpu] = store.gpus()
    assert gpu.uuid == "shipped:nvidia-h200" and gpu.trials == 1


def test_import_shipped_once_and_again_when_changed(store: Store, tmp_path: Path) -> None:
    shipped = tmp_path / "records"
    shipped.mkdir()
    assert store.import_shipped(shipped) == 0
    records = shipped / "nvidia-h200.jsonl"
    write_records(records, [GPU_LINE, trial_line(2.0, 2), trial_line(3.0, 3)])
    assert store.import_shipped(shipped) == 2
    assert store.import_shipped(shipped) == 0
    write_records(records, [GPU_LINE, trial_line(2.5, 4)])
    assert store.import_shipped(shipped) == 1
    best = store.best(H200.name, SHAPE, SRC)
    assert best is not None and (best.config, best.time_us) == (cfg(4), 2.5)  # old records gone
    assert store.problems()[0].trials == 1


def test_open_store_imports_the_shipped_records(db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db_dir = tmp_path / "db"
    (db_dir / "records").mkdir(parents=True)
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: db_dir)
    (db_dir / "migrations").symlink_to(REPO / "db" / "migrations")
    write_records(db_dir / "records" / "nvidia-h200.jsonl", [GPU_LINE, trial_line(2.0, 2)])
    with open_store(str(db_path)) as store:
        assert store.best(H200.name, SHAPE, SRC) is not None
    with open_store(str(db_path)) as store:
        assert store.problems()[0].trials == 1


# --- concurrency -----------------------------------------------------------------------------------


def test_second_store_reads_while_the_first_writes(db_path: Path) -> None:
    with (
        open_store(str(db_path), import_shipped=False) as writer,
        open_store(str(db_path), import_shipped=False) as reader,
    ):
        pid = measure(writer, SHAPE, cfg(1), ok(5.0))
        with writer.db.session_scope(write=True) as session:
            # An uncommitted write is in flight: the reader sees the committed rows, without waiting.
            session.execute(Base.metadata.tables["trials"].delete())
            best = reader.best(H200.name, SHAPE, SRC)
            assert best is not None and best.time_us == 5.0
            assert len(reader.trials(pid)) == 1
            session.rollback()
