"""The worker protocol without a GPU: planted requests that sleep, raise, return NaN or kill the
worker each come back as their own outcome, and the next request gets a fresh worker."""

from __future__ import annotations

import pytest

from autotune.errors import AutotuneError
from autotune.outcome import Status
from autotune.worker.client import Worker, WorkerLost, outcome_from_reply


@pytest.fixture
def worker() -> Worker:
    with Worker() as w:
        yield w


def test_ping(worker: Worker) -> None:
    assert worker.request("ping", 30)["pid"] > 0


def test_sleep_past_the_deadline_is_a_timeout_and_the_worker_restarts(worker: Worker) -> None:
    first = worker.request("ping", 30)["pid"]
    with pytest.raises(WorkerLost) as lost:
        worker.request("test", 1.0, behaviour="sleep", seconds=60)
    assert lost.value.status is Status.TIMEOUT
    assert worker.request("ping", 30)["pid"] != first
    assert worker.restarts == 1


def test_death_is_a_crash(worker: Worker) -> None:
    with pytest.raises(WorkerLost) as lost:
        worker.request("test", 30, behaviour="die")
    assert lost.value.status is Status.CRASHED and "exit 9" in str(lost.value)
    assert worker.request("ping", 30)["pid"] > 0


def test_an_exception_is_an_error_reply_and_the_worker_lives(worker: Worker) -> None:
    pid = worker.request("ping", 30)["pid"]
    with pytest.raises(AutotuneError, match="planted failure"):
        worker.request("test", 30, behaviour="raise")
    assert worker.request("ping", 30)["pid"] == pid


def test_nan_time_is_a_wrong_result(worker: Worker) -> None:
    reply = worker.request("test", 30, behaviour="nan")
    assert outcome_from_reply(reply).status is Status.WRONG_RESULT


def test_measure_turns_every_failure_into_an_outcome(worker: Worker, tmp_path: object) -> None:
    # No setup was sent: the worker answers with an error, which becomes a recorded outcome.
    outcome = worker.measure(__import__("pathlib").Path("missing.cubin"), "k", {"block": 1})
    assert outcome.status is Status.LAUNCH_ERROR and "setup" in outcome.message


def test_setup_is_replayed_into_a_fresh_worker() -> None:
    calls: list[str] = []

    class Recording(Worker):
        def _send(self, request: dict, timeout: float) -> dict:  # type: ignore[override]
            calls.append(request["cmd"])
            return super()._send(request, timeout) if request["cmd"] != "setup" else {}

    with Recording() as w:
        w._setup = {"cmd": "setup", "problem": {}, "seed": 1}
        w.request("ping", 30)
    assert calls == ["setup", "ping"]
