"""GPU fault drill (scripts/fault_drill.py; pytest -m gpu): planted faults inside a real sweep that is
SIGKILLed and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.fault_drill import drill

pytestmark = pytest.mark.gpu


def test_every_fault_is_survived_and_recorded_and_nothing_is_lost(tmp_path: Path) -> None:
    report = drill(tmp_path / "drill.db", trials=24, kill_after=10, measure_timeout=5.0)
    for fault in report["faults"]:
        assert fault["survived"], fault
    assert report["sweep_killed_midway"] and report["resumed_exit_code"] == 0
    assert report["rows_found"] == report["rows_expected"] == 24
    assert report["duplicates"] == 0 and report["completed_rows_kept"]
