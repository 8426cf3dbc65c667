"""The orchestrator's side of the worker: spawn, request with a deadline, validate the reply, kill, respawn."""

from __future__ import annotations

import collections
import itertools
import json
import logging
import os
import queue
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.interpreter import module_command
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.measure.worker.replies import (
    MAX_REPLY_CHARS,
    BadReply,
    gpu_from_reply,
    outcome_from_reply,
    parse_envelope,
)

__all__ = ["SetupLost", "Worker", "WorkerLost", "outcome_from_reply", "worker_command"]

# The orchestrator never creates a CUDA context. A worker that hangs past its deadline is killed and
# the trial is recorded as a timeout; a worker that dies, or answers with anything but a well-formed
# reply to the request it was sent, is recorded as crashed; either way the next request starts a
# fresh worker and replays the current problem's setup.
HELLO_TIMEOUT_S = 120.0
SETUP_TIMEOUT_S = 300.0
# Fresh workers tried before a problem's setup counts as lost: one killed from outside while it sets
# up (the OOM killer, a user, the fault drill) is not a problem that cannot be set up.
SETUP_ATTEMPTS = 3
MEASURE_TIMEOUT_S = 60.0
# How long a worker whose output has ended gets to exit: a dying process exits at once, one that
# closed its output and lives on would otherwise be waited for without end. Also how long a killed
# worker is waited for before it is left to the system (one stuck in the GPU driver may not die).
EXIT_GRACE_S = 2.0


log = logging.getLogger(__name__)


class WorkerLost(Exception):
    """The worker hung (timeout), died or broke the protocol (crashed) while answering."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status


class SetupLost(AutotuneError):
    """A fresh worker could not be given the current problem again. No config ran, so no config is
    to blame: the caller stops this problem instead of recording an outcome for one."""


def _pump(stream: IO[str], sink: queue.Queue[str | None]) -> None:
    # readline's limit bounds what one reply can hold in memory; a longer line arrives cut in pieces
    # without their newline, which the reader takes as a broken reply.
    while line := stream.readline(MAX_REPLY_CHARS):
        sink.put(line)
    sink.put(None)  # end of stream: the process is gone


def _kill(process: subprocess.Popen[str]) -> None:
    """Kill `process` and reap it, waiting a bounded time: one stuck in the kernel (a GPU driver
    call) may not die at once, and the sweep goes on without it."""
    process.kill()
    try:
        process.wait(timeout=EXIT_GRACE_S)
    except subprocess.TimeoutExpired:
        log.warning("worker %d did not exit within %g s of being killed; left behind", process.pid, EXIT_GRACE_S)


def worker_command(device: int) -> list[str]:
    """How the worker is started: with no current directory on its module path, so an `autotune/`
    folder wherever the sweep runs can never stand in for the installed package (module_command)."""
    return module_command("autotune.measure.worker", "--device", str(device))


class Worker:
    def __init__(
        self, device: int = 0, command: list[str] | None = None, measure_timeout: float = MEASURE_TIMEOUT_S
    ) -> None:
        self.device = device
        self.measure_timeout = measure_timeout  # past this a trial is a hang: the worker is killed
        self._command = command or worker_command(device)
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
        if self._spawns > 1:
            log.info("starting a fresh worker (%d restarts so far)", self._spawns - 1)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",  # bytes that are not UTF-8 become a reply that fails to parse, not a dead reader
            env=env,
        )
        self._replies = queue.Queue()
        assert self._process.stdout is not None and self._process.stderr is not None
        threading.Thread(target=_pump, args=(self._process.stdout, self._replies), daemon=True).start()
        threading.Thread(target=self._drain_stderr, args=(self._process.stderr,), daemon=True).start()

    def _drain_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line.rstrip()[:500])

    def kill(self) -> None:
        if self._process is not None:
            _kill(self._process)
            self._process = None

    def close(self) -> None:
        if self._process is not None:
            try:
                if self._process.stdin:
                    self._process.stdin.close()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                _kill(self._process)
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
        for attempt in range(1, SETUP_ATTEMPTS + 1):
            self._process = None
            self._start()
            if self._setup is None:
                return
            try:
                self._send(dict(self._setup), SETUP_TIMEOUT_S)
                return
            except (WorkerLost, AutotuneError) as exc:
                self.kill()  # a worker without the problem would answer every measure with an error
                if attempt == SETUP_ATTEMPTS:
                    raise SetupLost(
                        f"a fresh worker could not set the problem up again ({attempt} tries): {exc}"
                    ) from None

    def ready(self) -> None:
        """Start a worker where none runs and give it the current problem; raises SetupLost where
        that fails. Called before a trial is recorded as running, so a failed replay is no trial's."""
        self._ensure_started()

    def _stderr_tail(self) -> str:
        lines = [line for line in self._stderr if line.strip()]
        return " | ".join(lines[-3:])

    def _broken(self, why: str) -> WorkerLost:
        """The worker broke the protocol: it is killed, and the next request gets a fresh one."""
        self.kill()
        return WorkerLost(Status.CRASHED, f"bad reply from the worker ({why}); worker killed")

    def _next_line(self, deadline: float, timeout: float) -> str:
        assert self._process is not None
        try:
            line = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()
            raise WorkerLost(Status.TIMEOUT, f"no answer within {timeout:g} s; worker killed") from None
        if line is None:
            raise self._output_ended()
        if not line.endswith("\n"):
            raise self._broken(f"a reply cut off after {len(line)} characters")
        return line

    def _output_ended(self) -> WorkerLost:
        """The worker's output ended: it died, or it closed its output and lives on, which no
        reply can come from; that one is killed."""
        assert self._process is not None
        try:
            code = self._process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return WorkerLost(Status.CRASHED, "the worker closed its output but did not exit; worker killed")
        self._process = None
        return WorkerLost(Status.CRASHED, f"worker died (exit {code}) {self._stderr_tail()}".strip())

    def _write(self, request: dict[str, Any], timeout: float) -> None:
        """Send one request line. A worker that stops reading its input fills the pipe and the write
        blocks: past `timeout` it is killed, which ends the write."""
        process = self._process
        assert process is not None and process.stdin is not None
        stuck = threading.Event()

        def stop() -> None:
            stuck.set()
            process.kill()

        watchdog = threading.Timer(timeout, stop)
        watchdog.daemon = True
        watchdog.start()
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
        except OSError:
            pass  # it died (BrokenPipeError), or was killed here; either is reported below
        finally:
            watchdog.cancel()
        if stuck.is_set():
            self.kill()
            raise WorkerLost(Status.TIMEOUT, f"the worker did not read its request within {timeout:g} s; worker killed")

    def _send(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        request_id = next(self._ids)
        request["id"] = request_id
        deadline = time.monotonic() + timeout
        self._write(request, timeout)
        reply = None
        while reply is None:  # replies to earlier requests are skipped: ids tie each answer to its request
            line = self._next_line(deadline, timeout)
            try:
                reply = parse_envelope(line, request_id)
            except BadReply as bad:
                raise self._broken(str(bad)) from None
        if "error" in reply:
            raise AutotuneError(reply["error"])
        result: dict[str, Any] = reply["result"]
        return result

    def request(self, command: str, timeout: float, **payload: Any) -> dict[str, Any]:
        self._ensure_started()
        return self._send({"cmd": command, **payload}, timeout)

    # -- the calls the tuner makes --------------------------------------------------------------
    def hello(self) -> GpuInfo:
        try:
            return gpu_from_reply(self.request("hello", HELLO_TIMEOUT_S))
        except WorkerLost as lost:
            raise AutotuneError(f"the GPU worker failed to start: {lost}") from None
        except BadReply as bad:
            self.kill()
            raise AutotuneError(f"the GPU worker's hello is malformed: {bad}") from None

    def setup(self, problem: Problem, seed: int, *, fresh_memory: bool = False) -> dict[str, Any]:
        """Allocate and fill the problem's buffers (random data from `seed`). With `fresh_memory`,
        the new buffers are allocated before the old ones are freed, so they lie elsewhere."""
        # The module that registers the problem's op, which the worker imports: an op defined
        # outside autotune/ops (a plug-in, a test) is known to this process only.
        op_module = ops.registering_module(problem.op)
        payload = {"problem": problem.__dict__, "seed": seed, "fresh_memory": fresh_memory, "op_module": op_module}
        request = {"cmd": "setup", **payload}
        self._setup = None
        result = self.request("setup", SETUP_TIMEOUT_S, **payload)
        self._setup = request
        return result

    def measure(self, cubin: Path, kernel: str, config: Mapping[str, int]) -> Outcome:
        """Verify and time one compiled config. Every failure of the worker or of its reply comes
        back as an Outcome; only a fresh worker's failed setup raises (SetupLost: no config ran)."""
        return self._measured(cubin=str(cubin), kernel=kernel, config=dict(config))

    def measure_library(self, family: str, config: Mapping[str, int]) -> Outcome:
        """Verify and time one candidate of library `family` (cuBLASLt's algorithm) for the set-up
        problem, as `measure` does a kernel."""
        return self._measured(library=family, config=dict(config))

    def library_candidates(self, family: str) -> tuple[int, str]:
        """(how many candidates library `family` offers the set-up problem, the library's fingerprint)."""
        result = self.request("library_candidates", SETUP_TIMEOUT_S, family=family)
        count, fingerprint = result.get("count"), result.get("fingerprint")
        if not isinstance(count, int) or not isinstance(fingerprint, str):
            raise AutotuneError(f"the GPU worker's library_candidates reply is malformed: {result}")
        return count, fingerprint

    def _measured(self, **payload: Any) -> Outcome:
        try:
            result = self.request("measure", self.measure_timeout, **payload)
        except WorkerLost as lost:
            return Outcome(lost.status, str(lost))
        except SetupLost:
            raise
        except AutotuneError as exc:
            return Outcome(Status.LAUNCH_ERROR, str(exc))
        try:
            return outcome_from_reply(result)
        except BadReply as bad:
            return Outcome(Status.CRASHED, str(self._broken(str(bad))))
