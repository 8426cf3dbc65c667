"""Child process groups (nvcc with the cicc and ptxas it starts) that end with this process, even under kill -9."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

# The watcher: a separate process reading "+pgid<TAB>folder" and "-pgid" lines. Its stdin is a pipe
# whose only writer is this process, so when this process ends, however it ends (kill -9 included),
# the watcher reads end-of-file and kills every group still registered, then removes its temporary
# folder. It runs isolated (-I) in a session of its own, so a Ctrl-C or a hang-up sent to the
# terminal's process group leaves it standing to do that.
_WATCHER = """
import os, shutil, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
live = {}
for line in sys.stdin:
    head, _, folder = line.rstrip("\\n").partition("\\t")
    if head[:1] == "+":
        live[int(head[1:])] = folder
    elif head[:1] == "-":
        live.pop(int(head[1:]), None)
for pgid, folder in live.items():
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
"""


class ProcessGroups:
    """Runs commands each in a process group of its own and ends every group still running when
    kill_all() is called (a compile pool closing, interpreter exit) or when this process dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, int | None] = {}  # pgid -> id() of the owner that started it
        self._watcher: subprocess.Popen[str] | None = None
        self._watcher_failed = False

    def _ensure_watcher(self) -> None:
        """Start the watcher once (the lock held); without one, groups still end with kill_all()
        at exit, though not after a kill -9."""
        if self._watcher is None and not self._watcher_failed:
            try:
                self._watcher = subprocess.Popen(
                    [sys.executable, "-I", "-c", _WATCHER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,
                )
            except OSError:
                self._watcher_failed = True

    def _tell(self, line: str) -> None:
        with self._lock:
            self._ensure_watcher()
            if self._watcher is not None and self._watcher.stdin is not None:
                try:
                    self._watcher.stdin.write(line + "\n")
                    self._watcher.stdin.flush()
                except OSError:
                    self._watcher = None  # it died: kill_all() at exit is what is left
                    self._watcher_failed = True

    def run(
        self, command: list[str], timeout: float, folder: Path | None = None, owner: object | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` to completion in a new process group (its output captured as text). Past
        `timeout` the whole group is killed and TimeoutExpired raised. `folder` is removed by the
        watcher if this process dies while the group runs; kill_all(owner) ends the owner's groups."""
        with self._lock:
            self._ensure_watcher()  # before the group exists, so it is watched as soon as it does
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        pgid = process.pid  # a new session's leader: its pid is the group's id
        with self._lock:
            self._live[pgid] = None if owner is None else id(owner)
        self._tell(f"+{pgid}\t{folder or ''}")
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:  # a timeout, or the caller interrupted: the whole group goes
            _kill_group(pgid)
            process.communicate()
            raise
        finally:
            with self._lock:
                self._live.pop(pgid, None)
            self._tell(f"-{pgid}")
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def kill_all(self, owner: object | None = None) -> None:
        """End every group still running, or only those `owner` started (their commands then
        return killed)."""
        with self._lock:
            groups = [pgid for pgid, by in self._live.items() if owner is None or by == id(owner)]
        for pgid in groups:
            _kill_group(pgid)

    def close(self) -> None:
        self.kill_all()
        with self._lock:
            watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher.stdin is not None:
            watcher.stdin.close()
            watcher.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(OSError):  # already gone
        os.killpg(pgid, signal.SIGKILL)


GROUPS = ProcessGroups()
atexit.register(GROUPS.close)
