"""Tuning on a miss (AUTOTUNE_TUNE_ON_MISS=1): an untuned problem the launch path meets is tuned by a
background `autotune sweep` process, one problem at a time, in the order they were met. When one
finishes, the launch path is told to forget its choices, so later calls select the new measurement;
a CUDA graph captured before keeps the kernel it captured.

The sweep runs in a process of its own (its compiles and its timing worker never touch the caller's
process) and shares the GPU with the caller's work: its timings are noisier than an offline sweep's,
and the next offline sweep of the problem (`autotune sweep --pending`, or `--retime`) confirms them.
Nothing here runs on the launch path: `submit` only queues the problem and wakes the thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import threading
import warnings
from collections import deque
from collections.abc import Callable

from autotune import ops
from autotune.core.errors import AutotuneWarning
from autotune.core.interpreter import module_command
from autotune.core.problem import Problem
from autotune.core.redact import mask_url

ENV = "AUTOTUNE_TUNE_ON_MISS"  # "1": tune untuned problems in the background
TRIALS_ENV = "AUTOTUNE_TUNE_ON_MISS_TRIALS"
DEFAULT_TRIALS = 32
# More trials than any problem's sweep is worth in the background of a program (hours of GPU time).
MAX_TRIALS = 4096
DB_ENV = "AUTOTUNE_DB"  # how the sweep is told its database: never on its command line

log = logging.getLogger(__name__)

# The command that tunes one problem: (problem, device index, trials) -> argv. The database goes to
# the child in its environment: a command line is readable by every local user (/proc/PID/cmdline)
# and a server URL holds a password.
Command = Callable[[Problem, int, int], list[str]]
# The index of a local GPU of a model (a name), to tune on.
Locate = Callable[[str], int]


_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def enabled() -> bool:
    """Whether $AUTOTUNE_TUNE_ON_MISS asks for it: 1 (true, yes, on) or 0 (false, no, off, unset); any
    other value is warned about, once, and leaves it off."""
    text = os.environ.get(ENV, "").strip().lower()
    if text not in _ON and text not in _OFF:
        _warn(f"{ENV}={text!r} is neither 1 nor 0: tuning on a miss stays off")
    return text in _ON


def trials() -> int:
    """$AUTOTUNE_TUNE_ON_MISS_TRIALS, a whole number from 1 to MAX_TRIALS. Read on the launch path's
    background thread, where an error would reach no one: a value that is not a whole number is
    warned about and the default used; one out of range is warned about and brought into range."""
    text = os.environ.get(TRIALS_ENV, "").strip()
    if not text:
        return DEFAULT_TRIALS
    try:
        asked = int(text)
    except ValueError:
        _warn(f"{TRIALS_ENV}={text!r} is not a whole number of trials; using {DEFAULT_TRIALS}")
        return DEFAULT_TRIALS
    used = min(max(asked, 1), MAX_TRIALS)
    if used != asked:
        _warn(f"{TRIALS_ENV}={text!r} is not from 1 to {MAX_TRIALS}; using {used}")
    return used


def _warn(message: str) -> None:
    # Python's warning filter shows each message once per process: once per value set.
    warnings.warn(message, AutotuneWarning, stacklevel=3)


def first_of_model(name: str) -> int:
    """The first of this machine's GPUs of model `name` (0 where none is: the sweep then says why)."""
    from autotune.core.fingerprint import local_gpus  # nvidia-smi: run in the tuning thread only

    return next((index for index, gpu in enumerate(local_gpus()) if gpu.name == name), 0)


def sweep_command(problem: Problem, device: int, budget: int) -> list[str]:
    """`autotune sweep` of this one problem, as the CLI takes it, run from the installed package
    (module_command: never an `autotune/` folder in the caller's current folder)."""
    args = ["-q", "sweep", "--op", problem.op, "--dtype", problem.dtype, "--m", str(problem.m), "--n", str(problem.n)]
    args += ["--k", str(problem.k)] if "K" in ops.get(problem.op).sizes else []
    args += ["--trans"] if problem.trans else []
    args += ["--trials", str(budget), "--device", str(device)]
    return module_command("autotune", *args)


def sweep_environment(db: str | None) -> dict[str, str]:
    """The sweep's environment: the caller's, without the switch (a sweep does not tune its own
    misses), and with the database in AUTOTUNE_DB where one was given."""
    env = {key: value for key, value in os.environ.items() if key != ENV}
    if db is not None:
        env[DB_ENV] = db
    return env


class MissTuner:
    """Tunes each submitted problem once, in a background process, and calls `on_tuned` after each
    one that finished (from its own thread)."""

    def __init__(
        self, on_tuned: Callable[[], None], command: Command = sweep_command, locate: Locate = first_of_model
    ) -> None:
        self._on_tuned, self._command, self._locate = on_tuned, command, locate
        # Problems to tune, and events to set once everything queued before them is done (wait()).
        self._queue: deque[tuple[Problem, str | None, str] | threading.Event] = deque()
        self._seen: set[tuple[Problem, str | None]] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._closed = False
        self.generation = 0  # problems tuned so far: the launch path forgets its choices on a change

    def submit(self, problem: Problem, db: str | None, gpu: str) -> None:
        """Queue `problem` for tuning on a GPU of model `gpu` into `db` (None: the default database),
        once."""
        with self._lock:
            if self._closed or (problem, db) in self._seen:
                return
            self._seen.add((problem, db))
            self._queue.append((problem, db, gpu))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="autotune tune-on-miss", daemon=True)
                self._thread.start()
                atexit.register(self.close)
        self._wake.set()

    def close(self) -> None:
        """Stop: the problem being tuned is left (what its sweep stored stays stored), the rest dropped."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            child = self._child
        self._wake.set()
        if child is not None and child.poll() is None:
            child.terminate()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is tuned (tests, warm-up scripts): True if it was."""
        thread = self._thread
        if thread is None:
            return True
        done = threading.Event()
        with self._lock:
            self._queue.append(done)
        self._wake.set()
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                if self._closed:
                    return
                if not self._queue:
                    self._wake.clear()
                    continue
                item = self._queue.popleft()
            if isinstance(item, threading.Event):
                item.set()
            else:
                self._tune(*item)

    def _tune(self, problem: Problem, db: str | None, gpu: str) -> None:
        argv = self._command(problem, self._locate(gpu), trials())
        env = sweep_environment(db)
        into = f" into {mask_url(db)}" if db is not None else ""
        log.info("tuning %s in the background%s (%s)", problem, into, " ".join(argv[1:]))
        try:
            with self._lock:
                if self._closed:
                    return
                child = self._child = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            _, errors = child.communicate()
            code = child.returncode
        except OSError as exc:
            log.warning("could not start the background tuning of %s: %s", problem, exc)
            return
        finally:
            with self._lock:
                self._child = None
        if self._closed:  # close() stopped it (the process is exiting): nothing to report
            return
        if code != 0:
            last = (errors or "").strip().splitlines()[-1:] or [f"exit status {code}"]
            log.warning("the background tuning of %s failed: %s", problem, last[0])
            return
        self.generation += 1
        log.info("tuned %s in the background: later calls use its best config", problem)
        try:
            self._on_tuned()
        except Exception as exc:  # the launch path must not die with this thread
            log.warning("could not refresh the launch path after tuning %s: %s", problem, exc)
