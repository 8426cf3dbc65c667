"""The worker protocol without a GPU: hangs, deaths, errors and every kind of broken reply become outcomes."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.outcome import Status
from autotune.measure.worker.client import (
    EXIT_GRACE_S,
    SetupLost,
    Worker,
    WorkerLost,
    outcome_from_reply,
    worker_command,
)
from autotune.measure.worker.replies import parse_envelope
from autotune.measure.worker.server import serve

MISBEHAVING = Path(__file__).with_name("misbehaving_worker.py")


@pytest.fixture
def worker() -> Iterator[Worker]:
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
    outcome = worker.measure(Path("missing.cubin"), "k", {"block": 1})
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


# -- replies that break the protocol (tests/misbehaving_worker.py) -----------------------------------
def _misbehaving(mode: str, **kwargs: Any) -> Worker:
    return Worker(command=[sys.executable, str(MISBEHAVING), mode], **kwargs)


BROKEN = [
    "garbage",
    "binary",
    "long",
    "no-id",
    "list",
    "missing-status",
    "bad-status",
    "worker-quarantine",
    "string-time",
    "bool-time",
    "extra-key",
    "result-and-error",
    "future-id",
    "deep",
    "bad-samples",
    "zero-samples",
]


@pytest.mark.parametrize("mode", BROKEN)
def test_a_broken_reply_is_a_crash_of_that_worker_never_an_exception(mode: str) -> None:
    with _misbehaving(mode) as worker:
        pid = worker.request("ping", 30)["pid"]
        outcome = worker.measure(Path("k.cubin"), "k", {"x": 3})
        assert outcome.status is Status.CRASHED and "bad reply" in outcome.message, outcome
        assert "\x1b" not in outcome.message  # quoted with repr, never raw
        assert worker.request("ping", 30)["pid"] != pid  # it was killed: a fresh worker answers


def test_a_reply_cut_off_by_the_workers_death_is_a_crash() -> None:
    with _misbehaving("half") as worker:
        outcome = worker.measure(Path("k.cubin"), "k", {"x": 3})
        assert outcome.status is Status.CRASHED and "cut off" in outcome.message, outcome


def test_an_extra_reply_never_shifts_a_result_onto_the_next_config() -> None:
    # Each answer arrives twice, the copy with another time: ids tie every answer to its request.
    with _misbehaving("extra") as worker:
        times = [worker.measure(Path("k.cubin"), "k", {"x": x}).time_us for x in range(1, 6)]
        assert times == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert worker.restarts == 0


def test_a_malformed_hello_is_a_one_line_error() -> None:
    with _misbehaving("fine") as worker, pytest.raises(AutotuneError, match="hello is malformed"):
        worker.hello()


def test_a_deeply_nested_hello_is_a_one_line_error() -> None:
    with _misbehaving("deep") as worker, pytest.raises(AutotuneError, match="nested deeper than") as error:
        worker.hello()
    assert "\n" not in str(error.value) and not worker.alive


def test_brackets_inside_a_text_are_no_nesting() -> None:
    line = json.dumps({"id": 3, "error": '[[[[[[{{{{"\\' * 100}) + "\n"
    assert parse_envelope(line, 3) == json.loads(line)


@pytest.mark.parametrize(
    ("mode", "sample"), [("bad-samples", "times_us[0] is 'nan'"), ("zero-samples", "times_us[0] is '-5.0'")]
)
def test_an_implausible_sample_is_never_an_ok_time(mode: str, sample: str) -> None:
    with _misbehaving(mode) as worker:
        outcome = worker.measure(Path("k.cubin"), "k", {"x": 3})
    assert outcome.status is Status.CRASHED and sample in outcome.message and outcome.time_us is None


def test_a_time_below_the_floor_is_a_wrong_result() -> None:
    with _misbehaving("tiny-time") as worker:
        outcome = worker.measure(Path("k.cubin"), "k", {"x": 3})
    assert outcome.status is Status.WRONG_RESULT and outcome.time_us is None, outcome


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_worker_that_closes_its_output_and_lives_on_is_killed_in_bounded_time() -> None:
    with _misbehaving("close-stdout", measure_timeout=5) as worker:
        worker.ready()
        pid = worker.pid
        assert pid is not None
        start = time.monotonic()
        outcome = worker.measure(Path("k.cubin"), "k", {"x": 3})
        assert time.monotonic() - start < 5 + EXIT_GRACE_S
        assert outcome.status is Status.CRASHED and "did not exit" in outcome.message, outcome
        assert _gone(pid)


def test_a_worker_that_stops_reading_is_killed_at_the_deadline() -> None:
    with _misbehaving("deaf") as worker:
        worker.ready()
        pid = worker.pid
        assert pid is not None
        start = time.monotonic()
        with pytest.raises(WorkerLost, match="did not read its request") as lost:
            worker.request("ping", 1.0, blob="x" * (1 << 20))  # far more than a pipe holds
        assert time.monotonic() - start < 1.0 + EXIT_GRACE_S
        assert lost.value.status is Status.TIMEOUT and _gone(pid)


def test_a_failed_setup_replay_raises_setup_lost_instead_of_charging_the_config() -> None:
    # The config never ran: a `crashed` outcome would count towards its quarantine.
    with _misbehaving("setup-dies") as worker:
        worker._setup = {"cmd": "setup", "problem": {}, "seed": 1}
        with pytest.raises(SetupLost, match="could not set the problem up again"):
            worker.measure(Path("k.cubin"), "k", {"x": 3})
        with pytest.raises(SetupLost):
            worker.ready()


def test_a_worker_killed_while_it_sets_up_is_replaced_not_taken_for_a_lost_setup(tmp_path: Path) -> None:
    with _misbehaving(f"setup-dies-once:{tmp_path / 'died'}") as worker:
        worker._setup = {"cmd": "setup", "problem": {}, "seed": 1}
        worker.ready()
        assert worker.alive and (tmp_path / "died").exists()
        assert worker.measure(Path("k.cubin"), "k", {"x": 3}).time_us == 3.0


def test_the_server_answers_a_request_that_is_not_json_and_keeps_serving() -> None:
    requests = io.StringIO("nonsense\n[1, 2]\n" + json.dumps({"id": 7, "cmd": "ping"}) + "\n")
    replies = io.StringIO()
    serve(0, requests, replies)
    answers = [json.loads(line) for line in replies.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [None, None, 7]
    assert "error" in answers[0] and answers[2]["result"]["pid"] == os.getpid()


# -- which autotune the worker runs --------------------------------------------------------------------
def _fake_package(root: Path, marker: str) -> Path:
    """An `autotune` package whose worker answers every request with `marker`."""
    folder = root
    for part in Worker.__module__.split(".")[:-1]:  # autotune, ..., worker
        folder = folder / part
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (folder / "__main__.py").write_text(
        "import json, sys\n"
        f"who = {marker!r}\n"
        "for line in sys.stdin:\n"
        "    reply = {'id': json.loads(line)['id'], 'result': {'pid': 0, 'who': who}}\n"
        "    print(json.dumps(reply), flush=True)\n"
    )
    return root


def test_an_autotune_folder_in_the_current_directory_is_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_fake_package(tmp_path, "the current directory"))
    with Worker() as worker:
        reply = worker.request("ping", 30)
    assert "who" not in reply and reply["pid"] > 0


def test_a_source_checkout_on_pythonpath_is_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_fake_package(tmp_path / "checkout", "PYTHONPATH")))
    monkeypatch.chdir(tmp_path)
    with Worker() as worker:
        assert worker.request("ping", 30).get("who") == "PYTHONPATH"


def test_below_python_3_11_the_worker_drops_the_current_directory_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "version_info", (3, 10, 0))
    command = worker_command(0)
    assert "-P" not in command
    monkeypatch.chdir(_fake_package(tmp_path, "the current directory"))
    with Worker(command=command) as worker:
        reply = worker.request("ping", 30)
    assert "who" not in reply and reply["pid"] > 0
