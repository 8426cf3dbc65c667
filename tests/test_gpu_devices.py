"""GPU tests of one sweep over every GPU of a machine (`autotune sweep --devices all`): they need two
GPUs and skip on one. The scheduling itself is tested on the CPU with fake workers (tests/test_fleet.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from autotune import api
from autotune.core.fingerprint import local_gpus
from autotune.store import models as orm
from autotune.store import open_store

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 1024), (2048, 2048), (1000, 3000), (4096, 1024), (3000, 1000), (512, 8192)]
TRIALS = 6


def test_a_sweep_over_two_gpus_stores_each_measurement_once(tmp_path: Path) -> None:
    """Both GPUs tune at once into one SQLite database; each problem is tuned by one of them, with
    its trials stored once, and both GPUs take part."""
    if len(local_gpus()) < 2:
        pytest.skip("needs two GPUs")
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("".join(f"{m} {n}\n" for m, n in SHAPES))
    url = str(tmp_path / "two.db")
    results = api.sweep_devices("0,1", op="hgemv", shapes_file=shapes, trials=TRIALS, patience=None, db=url)
    assert [r.error for r in results] == [None, None]
    tuned = [{str(item.problem) for item in r.report.problems if item.result.measured} for r in results]
    assert all(tuned), f"a GPU tuned nothing: {tuned}"
    assert not tuned[0] & tuned[1], "a problem was tuned on both GPUs"
    assert len(tuned[0] | tuned[1]) == len(SHAPES)
    with open_store(url, import_shipped=False) as store, store.db.session_scope() as session:
        twice = session.execute(
            select(orm.Trial.problem_id, orm.Trial.config_key, func.count())
            .group_by(orm.Trial.problem_id, orm.Trial.config_key)
            .having(func.count() > 1)
        ).all()
        assert twice == [], "a config was measured twice"
        summaries = store.problems(op="gemv", dtype="float16")
    # The database holds the shipped records too (other GPUs, transposed problems): this GPU's
    # problems of these shapes only.
    here = results[0].report.gpu.name
    ours = [s for s in summaries if s.gpu_name == here and not s.trans and (s.m, s.n) in SHAPES]
    assert len(ours) == len(SHAPES) and all(s.ok >= 1 for s in ours)
