"""The selector's picks of results/select_nvidia-h200.json (the held-out shapes of scripts/bench_select.py,
none of them in the shipped records), replayed on the CPU from the shipped selection table, cuBLASLt
answering as the version the records were timed with: what the file measured is what `autotune best` and the
launch path answer today, cuBLASLt's algorithms (a library family, autotune/ops/cublas/) included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune import api, ops
from autotune.select import choose

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "select_nvidia-h200.json"
# Picks that changed after the file was measured, each for a change to the selection or the records
# made since (the file is re-measured on a GPU by scripts/bench_select.py: `--dry-run --changed-state S`,
# then `--resume S` there times only these). None since the last measurement.
CHANGED_SINCE: set[str] = set()


@pytest.mark.slow
@pytest.mark.shipped_records
@pytest.mark.vendor
def test_the_held_out_picks_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """No default database (the shipped selection table answers), cuBLASLt taking part: a question
    about another machine's GPU is answered with the library its stored trials were timed with, here
    on a machine without cuBLASLt."""
    monkeypatch.setattr(choose, "vendor_fingerprint", lambda: None)
    api.forget_choices()
    rows: list[dict[str, Any]] = json.loads(RESULTS.read_text())["rows"]
    changed, library_picks = set(), 0
    for row in rows:
        choice = api.best(
            row["op"], row["m"], row["n"], row["k"], trans=row["trans"], dtype=row["dtype"], gpu="NVIDIA H200"
        )
        # The file's config as today's space names it (a narrow config from before `bands`: bands 0).
        if dict(choice.config) != ops.for_problem(choice.problem).stored_config(choice.problem, row["config"]):
            changed.add(row["id"])
        elif ops.library_for(choice.config) is not None:
            library_picks += 1
    api.forget_choices()
    assert changed == CHANGED_SINCE
    # Every cuBLASLt pick of the file that did not change comes back as cuBLASLt's.
    kept = [row for row in rows if row["id"] not in CHANGED_SINCE]
    # (19 of the 51 are cuBLASLt's: docs/findings.md.)
    assert library_picks == sum(ops.library_for(row["config"]) is not None for row in kept) >= 19
