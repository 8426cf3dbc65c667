"""The orchestrator's side of the worker: spawn, request with a deadline, kill, respawn.

The orchestrator never creates a CUDA context. A worker that hangs past its deadline is killed and
the trial is recorded as a timeout; a worker that dies is recorded as crashed; either way the next
request starts a fresh worker and replays the current problem's setup.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from autotune.errors import AutotuneError
from autotune.fingerprint import GpuInfo
from autotune.outcome import Outcome, Status
from autotune.problem import Problem

HELLO_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 300.0
MEASURE_TIMEOUT_S = 60.0


class WorkerLost(Exception):
    """The worker hung (timeout) or died (crashed) while answering."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


def _pump(stream: IO[str], sink: queue.Queue[str | None]) -> None:
    for line in stream:
        sink.put(line)
    sink.put(None)  # end of stream: the process is gone


class Worker:
    def __init__(
        self, device: int = 0, command: list[str] | None = None, measure_timeout: float = MEASURE_TIMEOUT_S
    ) -> None:
        self.device = device
        self.measure_timeout = measure_timeout  # past this a trial is a hang: the worker is killed
        self._command = command or [sys.executable, "-m", "autotune.worker", "--device", str(device)]
        self._process: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._ids = itertools.count(1)
        self._setup: dict[str, Any] | None = None  # replayed into every fresh worker
        self._spawns = 0

    # -- process management -------------------------------------------------------------------
    @property
    def restarts(self) -> int:
        """Fresh workers started after the first (each after a hang or a death)."""
        return max(0, self._spawns - 1)

    def _start(self) -> None:
        self._spawns += 1
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._replies = queue.Queue()
        assert self._process.stdout is not None and self._process.stderr is not None
        threading.Thread(target=_pump, args=(self._process.stdout, self._replies), daemon=True).start()
        threading.Thread(target=self._drain_stderr, args=(self._process.stderr,), daemon=True).start()

    def _drain_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line.rstrip())

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        if self._process is not None:
            if self._process.stdin:
                self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- requests -----------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self.alive:
            return
        self._process = None
        self._start()
        if self._setup is not None:
            self._send(dict(self._setup), SETUP_TIMEOUT_S)

    def _stderr_tail(self) -> str:
        lines = [line for line in self._stderr if line.strip()]
        return " | ".join(lines[-3:])

    def _send(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self._process is not None and self._process.stdin is not None
        request["id"] = next(self._ids)
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died; the reader reports that below
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerLost(Status.TIMEOUT, f"no answer within {timeout:g} s; worker killed") from None
        if line is None:
            code = self._process.wait()
            self._process = None
            raise WorkerLost(Status.CRASHED, f"worker died (exit {code}) {self._stderr_tail()}".strip())
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise AutotuneError(str(reply["error"]))
        result: dict[str, Any] = reply["result"]
        return result

    def request(self, command: str, timeout: float, **payload: Any) -> dict[str, Any]:
        self._ensure_started()
        return self._send({"cmd": command, **payload}, timeout)

    # -- the calls the tuner makes --------------------------------------------------------------
    def hello(self) -> GpuInfo:
        try:
            return GpuInfo(**self.request("hello", HELLO_TIMEOUT_S))
        except WorkerLost as lost:
            raise AutotuneError(f"the GPU worker failed to start: {lost}") from None

    def setup(self, problem: Problem, seed: int, *, fresh_memory: bool = False) -> dict[str, Any]:
        """Allocate and fill the problem's buffers (random data from `seed`). With `fresh_memory`,
        the new buffers are allocated before the old ones are freed, so they lie elsewhere."""
        payload = {"problem": problem.__dict__, "seed": seed, "fresh_memory": fresh_memory}
        request = {"cmd": "setup", **payload}
        self._setup = None
        result = self.request("setup", SETUP_TIMEOUT_S, **payload)
        self._setup = request
        return result

    def measure(self, cubin: Path, kernel: str, config: Mapping[str, int]) -> Outcome:
        """Verify and time one compiled config. Every failure comes back as an Outcome."""
        try:
            result = self.request("measure", self.measure_timeout, cubin=str(cubin), kernel=kernel, config=dict(config))
        except WorkerLost as lost:
            return Outcome(lost.status, str(lost))
        except AutotuneError as exc:
            return Outcome(Status.LAUNCH_ERROR, str(exc))
        return outcome_from_reply(result)


def outcome_from_reply(result: Mapping[str, Any]) -> Outcome:
    outcome = Outcome(
        status=Status(result["status"]),
        message=str(result.get("message", "")),
        time_us=result.get("time_us"),
        times_us=list(result.get("times_us", [])),
        gbs=result.get("gbs"),
        rel_error=result.get("rel_error"),
    )
    if outcome.ok and (outcome.time_us is None or not math.isfinite(outcome.time_us) or outcome.time_us <= 0):
        return Outcome(Status.WRONG_RESULT, f"the worker reported a time of {outcome.time_us}")
    return outcome
