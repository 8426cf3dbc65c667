"""What an earlier process already checked on the way to a first call's selection, trusted while the
files it looked at are unchanged: the SHA-256 of the shipped records files and of the selection
tables' groups, and the default database's identity and change count. A fresh process then compares
a few `stat` results with one small file in the kernel cache (selection-stamps.json) instead of
hashing 0.65 MB of records, hashing the table and importing `sqlite3` to read the count.

A file counts as unchanged while its size, modification and status-change times (in nanoseconds),
inode and device are those recorded. As git does with its index ("racy git"), nothing is recorded of
a file changed less than `RACY_NS` before it was looked at: a later write within the timestamps'
granularity could otherwise leave all of them as they were. A database's count is recorded with the
stat of the database file and its write-ahead log taken before the count was read: every commit
writes one of the two, so while both are unchanged, the count is too (and so is the identity kept
with it, written by a commit as well). The log's status-change time
is not compared: SQLite, run as root, gives the log its database's owner again whenever it opens
it, a read as much as a write, which moves that time but neither its modification time nor its size.

Anything unreadable (no cache folder, a damaged or foreign stamp file) is an empty stamp file:
everything is checked in full, as before, and the stamps are written again where the folder allows.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.core import paths

log = logging.getLogger(__name__)

FILE = "selection-stamps.json"  # in the kernel cache folder (paths.cache_home())
FORMAT = 2  # 2: a database's identity is kept with its change count
RACY_NS = 2_000_000_000  # a file changed this recently is checked in full, and not recorded
Stat = list[int]  # size, mtime_ns, ctime_ns, inode, device


def stat_of(result: os.stat_result, *, ctime: bool = True) -> Stat:
    """What a stamp compares of a file (0 for the status-change time where it is not compared)."""
    return [result.st_size, result.st_mtime_ns, result.st_ctime_ns if ctime else 0, result.st_ino, result.st_dev]


def _settled(stat: Stat | None, now_ns: int) -> bool:
    """Whether a change after `now_ns` would show in the stat: the file (or its absence) is older
    than the timestamps' granularity."""
    return stat is None or max(stat[1], stat[2]) < now_ns - RACY_NS


class Stamps:
    """The stamp file, read once; `save` writes it back where something new was recorded."""

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            try:
                path = paths.cache_home() / FILE
            except RuntimeError:  # no home folder to find the cache in: nothing kept
                path = None
        self.path = path
        self._digests: dict[str, list[Any]] = {}
        self._databases: dict[str, list[Any]] = {}
        self._changed = False
        try:
            if self.path is None:
                raise FileNotFoundError
            data = json.loads(read_regular(self.path)[0])
            if data["format"] == FORMAT and isinstance(data["digests"], dict) and isinstance(data["databases"], dict):
                self._digests, self._databases = data["digests"], data["databases"]
        except (OSError, ValueError, TypeError, KeyError):
            pass  # none yet, or not ours: everything is checked in full

    def digest(self, path: str, stat: Stat) -> str | None:
        """The SHA-256 recorded for the file at `path` while it has this stat, else None."""
        found = self._digests.get(path)
        if isinstance(found, list) and len(found) == 2 and found[0] == stat and isinstance(found[1], str):
            return found[1]
        return None

    def record_digest(self, path: str, stat: Stat, digest: str, now_ns: int) -> None:
        """Record the SHA-256 of the file at `path` as read with this stat (`now_ns`: when it was taken)."""
        if _settled(stat, now_ns) and self._digests.get(path) != [stat, digest]:
            self._digests[path] = [stat, digest]
            self._changed = True

    def version(self, database: Path, stats: list[Stat | None]) -> tuple[str, int] | None:
        """The identity and change count recorded for `database` while it and its log have these
        stats, else None."""
        found = self._databases.get(str(database))
        if isinstance(found, list) and len(found) == 2 and found[0] == stats and _version(found[1]):
            return found[1][0], found[1][1]
        return None

    def record_version(self, database: Path, stats: list[Stat | None], version: tuple[str, int], now_ns: int) -> None:
        """Record the identity and count read after taking these stats of `database` and its log (at `now_ns`)."""
        entry = [stats, list(version)]
        if all(_settled(stat, now_ns) for stat in stats) and self._databases.get(str(database)) != entry:
            self._databases[str(database)] = entry
            self._changed = True

    def save(self) -> None:
        """Write the stamp file where something new was recorded (atomically; a folder that cannot be
        written keeps none, and every process checks in full)."""
        if not self._changed or self.path is None:
            return
        self._changed = False
        text = json.dumps({"format": FORMAT, "digests": self._digests, "databases": self._databases})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(prefix=f"{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(handle, "w") as staged:
                    staged.write(text)
                os.replace(name, self.path)
            except OSError:
                Path(name).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.debug("cannot keep the selection stamps at %s: %s", self.path, exc)


def _version(found: Any) -> bool:
    return isinstance(found, list) and len(found) == 2 and isinstance(found[0], str) and type(found[1]) is int


def now_ns() -> int:
    return time.time_ns()


def read_regular(path: Path | str) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes, with its stat as opened; OSError for anything else at its place."""
    descriptor, found = open_regular(path)
    try:
        return read_all(descriptor), found
    finally:
        os.close(descriptor)


def open_regular(path: Path | str) -> tuple[int, os.stat_result]:
    """An open descriptor of a regular file (the caller closes it), with its stat; OSError for
    anything else at its place.

    The files the launch path reads sit in folders that others may write (a shared kernel cache):
    a named pipe put there would block a plain open or read for good, a device would never end.
    Opened without blocking, then checked on the descriptor itself, so that nothing swapped in
    between a check and the open is read."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, found


def read_all(descriptor: int) -> bytes:
    """Everything of an open file from its start (pread leaves the position there)."""
    os.lseek(descriptor, 0, os.SEEK_SET)
    with os.fdopen(descriptor, "rb", closefd=False) as handle:
        return handle.read()
