"""Stored rows that no kernel of ours can run (a config outside its problem's space, written by
another program or left by a space narrowed since) never answer: not as a problem's best in
`autotune best` or the launch path (store or selection table), not as the cost model's evidence,
and never hiding the measured rows behind them, however many there are."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from autotune import ops
from autotune.core.problem import Problem
from autotune.core.target import targeting
from autotune.ops import make_problem, source_hash
from autotune.select.choose import MEASURED, Choice, Selector
from autotune.store import Store, open_store, queries
from autotune.store import selection_table as table
from tests import shipped_copies
from tests.fakes import run_cli

GPU = "NVIDIA H200"
SHIPPED = make_problem("gemv", "float16", 4096, 8192)  # measured on the H200 by the shipped records
NEIGHBOURS = [make_problem("gemv", "float16", 4096, 7000), make_problem("gemv", "float16", 5000, 8192)]
# The shipped best's config with a block no GEMV kernel has: the review's injected row.
OUTSIDE = {
    "block": 99999,
    "cluster": 1,
    "lanes": 128,
    "order": 1,
    "persist": 0,
    "policy": 1,
    "prefetch": 3,
    "rows": 2,
    "split": 1,
    "unroll": 8,
    "vec": 8,
    "x_smem": 0,
}
INSERT = (
    "INSERT INTO trials (problem_id, gpu_id, config_key, config, status, time_us, times_us, message,"
    " source_hash, nvcc, pycuda, driver, cuda, origin, created_at, rounds) VALUES (?, 1, ?, ?, 'ok', ?, ?, '',"
    " ?, 'x', 'x', 'x', 'x', 'measured', '2026-01-01 00:00:00', 1)"
)

pytestmark = pytest.mark.shipped_records


@pytest.fixture(scope="module")
def shipped_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """db/ with the H200's GEMV records alone (SHIPPED, its neighbours and the evidence the cost model
    learns from for them): every answer, table and listing below reads the whole store, which with
    the whole of db/records takes seconds each."""
    return shipped_copies.db_folder(tmp_path_factory.mktemp("shipped") / "db", ["nvidia-h200.jsonl"])


@pytest.fixture(autouse=True)
def _shipped_gemvs(shipped_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: shipped_db)


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[Path]:
    """A database file holding the shipped records (of shipped_db)."""
    path = tmp_path / "inj.db"
    open_store(str(path)).close()
    yield path


def current_source() -> str:
    with targeting("9.0"):
        return source_hash(SHIPPED)


def problem_id(path: Path) -> int:
    with closing(sqlite3.connect(path)) as connection:
        (found,) = connection.execute(
            "SELECT id FROM problems WHERE gpu_name = ? AND op = 'gemv' AND dtype = 'float16' AND m = 4096"
            " AND n = 8192 AND trans = 0",
            (GPU,),
        ).fetchone()
    return int(found)


def inject(path: Path, count: int) -> None:
    """`count` OK trials of SHIPPED outside its space, each faster than any measured one, written
    straight into the database (as another program would)."""
    pid = problem_id(path)
    with closing(sqlite3.connect(path)) as connection, connection:
        for i in range(count):
            config = {**OUTSIDE, "block": OUTSIDE["block"] - i}
            time_us = 0.9 + i / 100
            connection.execute(
                INSERT, (pid, f"outside-{i}", json.dumps(config), time_us, json.dumps([time_us]), current_source())
            )


def choices(source: object) -> list[Choice]:
    selector = Selector(source)  # type: ignore[arg-type]  # a Store or a Table
    return [selector.choose(problem, GPU) for problem in (SHIPPED, *NEIGHBOURS)]


def in_space(problem: Problem, config: dict[str, int]) -> bool:
    with targeting("9.0"):
        return ops.for_problem(problem).space(problem).check(config) is None


def table_of(store: Store, tmp_path: Path) -> table.Table:
    path = tmp_path / "t.json"
    table.write(path, table.to_lines(store.selection_rows(table.PER_SOURCE), Path("/nowhere")))
    return table.read(path).table


def test_one_out_of_space_row_fastest_of_its_problem_leaves_the_measured_best(
    shipped: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The review's reproduction: `best` answered [estimate] with a slower config."""
    asked = ("best", "--gpu", "H200", "--m", "4096", "--n", "8192", "--db", str(shipped))
    code, before, _ = run_cli(monkeypatch, capsys, *asked)
    assert code == 0 and "[measured]" in before
    inject(shipped, 1)
    code, after, _ = run_cli(monkeypatch, capsys, *asked)
    assert code == 0 and after == before and "99999" not in after
    code, listed, _ = run_cli(monkeypatch, capsys, "list", "--gpu", "H200", "--db", str(shipped))
    assert code == 0 and "0.90" not in listed


def test_more_out_of_space_rows_than_are_ranked_leave_every_answer_as_it_was(shipped: Path, tmp_path: Path) -> None:
    """More such rows than the store first ranks per problem and the table keeps per kernel source:
    the measured best still answers, from the store and from a table made from it, and the cost
    model of the shapes around learns from the same evidence as before."""
    pid = problem_id(shipped)
    with open_store(str(shipped), import_shipped=False) as store:
        before = choices(store)
        led = store.leaders(pid, current_source(), table.PER_SOURCE)
    assert before[0].source == MEASURED and led
    inject(shipped, 3 * max(queries._RANKED, table.PER_SOURCE))
    with open_store(str(shipped), import_shipped=False) as store:
        assert choices(store) == before
        assert choices(table_of(store, tmp_path)) == before
        assert store.leaders(pid, current_source(), table.PER_SOURCE) == led
        best = store.best(GPU, SHIPPED, current_source())
        assert best is not None and best.config == before[0].config
        summary = next(row for row in store.problems(GPU) if row.problem == SHIPPED)
        assert summary.best_config == before[0].config


def test_a_table_keeps_no_out_of_space_row(shipped: Path, tmp_path: Path) -> None:
    inject(shipped, 2)
    with open_store(str(shipped), import_shipped=False) as store:
        held = table_of(store, tmp_path)
    pid = held.problem_id(SHIPPED, GPU)
    assert pid is not None
    kept = held.leaders(pid, current_source(), table.PER_SOURCE)
    assert kept and all(in_space(SHIPPED, row.config) for row in kept)
