"""The clocks and power a timing ran at: NVML readings in the worker (a stand-in NVML here), the
worker's reply, the store, records files, `autotune show` and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.measure.sensors import Reading, Sensors, medians
from autotune.measure.worker.replies import BadReply, outcome_from_reply
from autotune.ops import gemv
from autotune.store import Store, open_store
from tests.fakes import record

H200 = GpuInfo("Clock Test GPU", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)


class FakeNvml:
    """As much of pynvml as Sensors uses; `fail` names the call that raises."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, fail: str = "") -> None:
        self.fail, self.uuid = fail, ""

    def _maybe_fail(self, name: str) -> None:
        if self.fail == name:
            raise RuntimeError(f"NVML {name} failed")

    def nvmlInit(self) -> None:
        self._maybe_fail("init")

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self._maybe_fail("handle")
        self.uuid = uuid
        return "handle"

    def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> int:
        self._maybe_fail("clock")
        return 1980 if which == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 412_345  # milliwatts


def test_sensors_read_the_gpu_by_its_uuid() -> None:
    nvml = FakeNvml()
    sensors = Sensors("GPU-1111", nvml)
    assert sensors.available and nvml.uuid == "GPU-1111"
    assert sensors.sample() == Reading(1980.0, 3201.0, 412.345)


@pytest.mark.parametrize("fail", ["init", "handle"])
def test_without_nvml_a_timing_records_no_clocks(fail: str) -> None:
    sensors = Sensors("GPU-1111", FakeNvml(fail))
    assert not sensors.available and sensors.sample() is None


def test_a_reading_that_fails_is_left_out_not_the_timing() -> None:
    assert Sensors("GPU-1111", FakeNvml("clock")).sample() is None


def test_the_medians_of_the_readings_taken() -> None:
    readings = [Reading(1900, 3200, 400), None, Reading(1980, 3200, 420), Reading(1700, 3200, 700)]
    assert medians(readings) == {"sm_mhz": 1900, "mem_mhz": 3200, "power_w": 420}
    assert medians([None, None]) == {"sm_mhz": None, "mem_mhz": None, "power_w": None}


def test_the_worker_reply_carries_them_and_types_are_checked() -> None:
    reply = {"status": "ok", "time_us": 5.0, "times_us": [5.0], "sm_mhz": 1980, "mem_mhz": 3201.0, "power_w": None}
    outcome = outcome_from_reply(reply)
    assert (outcome.sm_mhz, outcome.mem_mhz, outcome.power_w) == (1980.0, 3201.0, None)
    with pytest.raises(BadReply, match="power_w"):
        outcome_from_reply({**reply, "power_w": "hot"})


def _timed(time_us: float, sm: float | None = 1980.0) -> Outcome:
    return Outcome(Status.OK, time_us=time_us, times_us=[time_us], gbs=1.0, sm_mhz=sm, mem_mhz=3201.0, power_w=512.5)


def test_the_store_keeps_them_and_a_records_file_carries_them(store: Store, tmp_path: Path) -> None:
    config = gemv.OP.default_config(SHAPE)
    pid = record(store, SHAPE, config, _timed(5.0), H200)
    [row] = store.trials(pid)
    assert (row.sm_mhz, row.mem_mhz, row.power_w) == (1980.0, 3201.0, 512.5)
    path = tmp_path / "out.jsonl"
    store.export_records(H200.name, path)
    line = json.loads(path.read_text().splitlines()[1])
    assert (line["sm_mhz"], line["mem_mhz"], line["power_w"]) == (1980.0, 3201.0, 512.5)
    with open_store(str(tmp_path / "other.db"), import_shipped=False) as other:
        assert other.import_records(path) == 1
        [imported] = other.trials(other.problem_id(SHAPE, H200.name, create=False) or 0)
        assert (imported.sm_mhz, imported.power_w) == (1980.0, 512.5)


def test_a_trial_timed_without_nvml_exports_no_clock_fields(store: Store, tmp_path: Path) -> None:
    record(store, SHAPE, gemv.OP.default_config(SHAPE), Outcome(Status.OK, time_us=5.0, times_us=[5.0]), H200)
    path = tmp_path / "out.jsonl"
    store.export_records(H200.name, path)
    assert "sm_mhz" not in path.read_text()


@pytest.mark.parametrize("bad", [-5, 0, "fast", True, 1e9])
def test_a_records_file_with_a_bad_clock_is_refused(store: Store, tmp_path: Path, bad: Any) -> None:
    record(store, SHAPE, gemv.OP.default_config(SHAPE), _timed(5.0), H200)
    path = tmp_path / "out.jsonl"
    store.export_records(H200.name, path)
    lines = path.read_text().splitlines()
    trial = {**json.loads(lines[1]), "sm_mhz": bad}
    path.write_text("\n".join([lines[0], json.dumps(trial)]) + "\n")
    with (
        open_store(str(tmp_path / "other.db"), import_shipped=False) as other,
        pytest.raises(Exception, match="sm_mhz"),
    ):
        other.import_records(path)


def test_the_report_plots_each_trials_clock_against_its_power(tmp_path: Path) -> None:
    from autotune import api
    from autotune.report import gather, render

    db = str(tmp_path / "clocks.db")
    with open_store(db, import_shipped=False) as store:
        record(store, SHAPE, gemv.OP.default_config(SHAPE), _timed(5.0), H200)
        record(store, SHAPE, {**gemv.OP.default_config(SHAPE), "block": 128}, _timed(6.0, sm=1755.0), H200)
    api.new_session()
    html = render(gather(db=db))
    clocks = html[html.index("Clocks and power</text>") :]
    assert clocks.index("</svg>") > clocks.index('class="mark"') and "mark note" not in clocks[: clocks.index("</svg>")]
