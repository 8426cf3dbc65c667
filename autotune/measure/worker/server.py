"""The worker subprocess: the only process that creates a CUDA context while tuning.

It reads one JSON request per line on stdin and answers one JSON line on its private copy of
stdout. Whatever a kernel does to it (illegal address, hang, death) stays in this process: after
an error that poisons the context it answers, then exits, and the orchestrator starts a fresh one.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem


class _State:
    def __init__(self, device: int) -> None:
        self.device = device
        self.runner: Any = None
        self.poisoned = False
        self._gpu: Any = None
        self._kernels: Any = None
        self._timer: Any = None
        self._support: Path | None = None

    def gpu(self) -> Any:
        if self._gpu is None:
            from autotune.measure import pycuda_gpu

            self._gpu = pycuda_gpu.device_info(self.device)
            self._kernels = pycuda_gpu.Kernels()
        return self._gpu

    def support(self) -> Path:
        if self._support is None:
            from autotune.build.compiler import compile_support
            from autotune.measure.sensors import Sensors
            from autotune.measure.worker.timing import Timer

            self._support = compile_support(self.gpu().arch)
            self._timer = Timer(self._kernels, self._support, Sensors(self.gpu().uuid))
        return self._support

    def setup(self, problem: Problem, seed: int, fresh_memory: bool = False) -> dict[str, Any]:
        from autotune.measure.worker.runner import Runner

        if not fresh_memory:
            self.runner = None  # free the previous problem's buffers first
        # Otherwise the old buffers are freed only once the new ones are allocated, so the new ones
        # cannot reuse their memory: a confirmation measures on other memory (autotune/tune/confirm.py).
        start = time.perf_counter()
        support, gpu = self.support(), self.gpu()  # these also create the kernel cache and timer
        # Each problem's candidates get fresh split-K scratch and tensor maps, as a caller's first
        # call does: nothing an earlier problem's candidate left behind (a dirty counter, a buffer
        # grown for another shape) reaches this one's timings.
        from autotune.measure.worker.runner import launch_device

        launch_device(self.device).release_scratch(0)
        self.runner = Runner(self._kernels, self._timer, support, problem, gpu, seed, self.device)
        return {"copies": self.runner.copies, "seconds": time.perf_counter() - start}


def _context_is_poisoned() -> bool:
    """After a CUDA error: does the context still work? Sticky errors (illegal address) break it."""
    try:
        from autotune.measure.pycuda_gpu import driver

        cuda = driver()
        cuda.Context.synchronize()
        probe = cuda.mem_alloc(4)
        cuda.memset_d32(probe, 0, 1)
        cuda.Context.synchronize()
        return False
    except Exception:
        return True


def _test_behaviour(request: dict[str, Any]) -> dict[str, Any]:
    """Planted faults for the orchestrator's own tests (no GPU needed)."""
    behaviour = request["behaviour"]
    if behaviour == "sleep":
        time.sleep(float(request.get("seconds", 3600)))
    elif behaviour == "raise":
        raise RuntimeError("planted failure")
    elif behaviour == "die":
        os._exit(9)
    elif behaviour == "nan":
        return {"status": "ok", "time_us": float("nan")}
    return {"status": "ok", "time_us": 1.0, "behaviour": behaviour}


def _handle(state: _State, request: dict[str, Any]) -> dict[str, Any]:
    command = request["cmd"]
    if command == "ping":
        return {"pid": os.getpid()}
    if command == "test":
        return _test_behaviour(request)
    if command == "hello":
        return dict(state.gpu().to_dict())
    if command == "setup":
        fresh_memory = bool(request.get("fresh_memory", False))
        if request.get("op_module"):
            importlib.import_module(str(request["op_module"]))  # registers the op
        fields = dict(request["problem"])
        problem = Problem(**{**fields, "inputs": tuple(fields.get("inputs", ()))})  # JSON holds a list
        ops.get(problem.op)  # an op this process does not know fails here, before any GPU work
        return state.setup(problem, int(request["seed"]), fresh_memory)
    if command == "measure":
        return _measure(state, request)
    if command == "library_candidates":
        return _library_candidates(state, str(request["family"]))
    raise AutotuneError(f"unknown worker command {command!r}")


def _measure(state: _State, request: dict[str, Any]) -> dict[str, Any]:
    from autotune.core.outcome import Outcome, Status
    from autotune.gpu.driver import DriverError
    from autotune.measure.pycuda_gpu import driver

    if state.runner is None:
        raise AutotuneError("measure before setup")
    cuda = driver()
    try:
        if request.get("library"):
            outcome = state.runner.measure_library(str(request["library"]), request["config"])
        else:
            outcome = state.runner.measure(Path(request["cubin"]), request["kernel"], request["config"])
    except (cuda.Error, DriverError) as exc:  # PyCUDA's (a later sync), or the launch plan's own
        state.poisoned = _context_is_poisoned()
        outcome = Outcome(Status.LAUNCH_ERROR, f"{type(exc).__name__}: {exc}".strip())
    result = asdict(outcome)
    result["status"] = outcome.status.value
    return result


def _library_candidates(state: _State, family: str) -> dict[str, Any]:
    """How many candidates library `family` offers the set-up problem, and the library's fingerprint."""
    if state.runner is None:
        raise AutotuneError("library_candidates before setup")
    count = state.runner.library_candidates(family)
    return {"count": count, "fingerprint": ops.library_named(family).fingerprint()}


def serve(device: int, requests: IO[str], replies: IO[str]) -> None:
    state = _State(device)
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            # Not a request: answered, so the orchestrator's reader is not left waiting for nothing.
            replies.write(json.dumps({"id": None, "error": "a request must be one JSON object a line"}) + "\n")
            replies.flush()
            continue
        reply: dict[str, Any] = {"id": request.get("id")}
        try:
            reply["result"] = _handle(state, request)
        except AutotuneError as exc:
            reply["error"] = str(exc)
        except Exception as exc:  # any other failure is reported, not fatal to the protocol
            reply["error"] = f"{type(exc).__name__}: {exc}"
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if state.poisoned:
            os._exit(3)  # the CUDA context is broken: the orchestrator starts a fresh worker


def main() -> None:
    device = int(sys.argv[sys.argv.index("--device") + 1]) if "--device" in sys.argv else 0
    # Keep a private channel for replies; anything else that prints (C libraries, warnings) goes to
    # stderr so it can never corrupt the protocol.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(device, sys.stdin, replies)
