"""Who owns a running trial, and whether that owner is provably gone (so its row may be dropped)."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

# A running row of another host cannot be checked for a live process: it counts as abandoned once
# it is this old. One trial is bounded by the worker's timeout (a minute) and its retry; an hour is
# far beyond any live measurement.
LEASE = timedelta(hours=1)
# Tokens of the stores open in this process: a row of this pid is gone once its store closed.
_OPEN_TOKENS: set[str] = set()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (Linux): [0] the state, [19] the start
    time; None where there is no such file."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    return text[text.rfind(")") + 2 :].split()


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), which tells a reused pid apart."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, alive
    except OSError:
        return False
    # A killed process its parent has not reaped yet (a sweep process of `--devices`, until the
    # others end) still answers signal 0, but it is a zombie: dead, its claims free at once.
    fields = _stat_fields(pid)
    return not (fields and fields[0] in ("Z", "X"))


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.readline().strip() or None
    except OSError:
        return None


def _pid_namespace() -> str | None:
    """The inode of this process's pid namespace (Linux), "4026531836" for the host's own."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return link[link.find("[") + 1 : link.rfind("]")] or None


def pid_space(hostname: str, boot_id: str | None, namespace: str | None) -> str:
    """The name of the space this process's pid means something in: the host name, and where
    Linux tells them, the boot and the pid namespace. Containers with host networking share the host
    name but not their pids, and a reboot reuses pids: a pid of another space proves nothing here."""
    if boot_id is None and namespace is None:
        return hostname
    return f"{hostname}/{boot_id or '-'}/{namespace or '-'}"


def this_space() -> str:
    hostname = socket.gethostname() or "-"
    return pid_space(hostname, _first_line("/proc/sys/kernel/random/boot_id"), _pid_namespace())


@dataclass(frozen=True)
class Owner:
    # this_space(): "host/boot-id/pid-namespace", or the bare host name where those are unknown.
    # Rows written before the boot and namespace were recorded hold the bare host name; they count as
    # of another space, which only their lease can tell gone.
    host: str
    pid: int
    started: str  # "-" where the platform does not tell
    token: str  # one per open store: two stores of one process are two owners

    def text(self) -> str:
        return f"{self.host} {self.pid} {self.started} {self.token}"

    @property
    def hostname(self) -> str:
        return self.host.split("/", 1)[0]

    @classmethod
    def parse(cls, text: str | None) -> Owner | None:
        parts = (text or "").split(" ")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])


def this_process() -> Owner:
    """A new owner identity for this process (a fresh token each call), live until release()."""
    pid = os.getpid()
    owner = Owner(this_space(), pid, _start_time(pid) or "-", uuid.uuid4().hex[:12])
    _OPEN_TOKENS.add(owner.token)
    return owner


def release(owner: Owner) -> None:
    """The store of this owner closed: its running rows are abandoned from now on."""
    _OPEN_TOKENS.discard(owner.token)


def is_gone(owner_text: str | None, started_at: datetime, now: datetime) -> bool:
    """Whether the process that owns a running row is provably gone: in this pid space (this_space())
    its pid is not running or runs another program (a different start time); elsewhere its lease has
    run out. A row with no owner (written before owners were recorded) counts as gone."""
    owner = Owner.parse(owner_text)
    if owner is not None and owner.host != this_space():
        return now - started_at > LEASE
    return gone_here(owner_text)


def gone_here(owner_text: str | None) -> bool:
    """Whether the owner is provably gone here: no owner at all, or a process of this pid space
    (this host, boot and pid namespace) that ended (or whose pid now runs another program). An owner
    of another host, boot or container never is: only the lease the row carries can tell it died."""
    owner = Owner.parse(owner_text)
    if owner is None:
        return True
    if owner.host != this_space():
        return False
    if owner.pid == os.getpid() and owner.started == (_start_time(owner.pid) or "-"):
        return owner.token not in _OPEN_TOKENS
    if not _alive(owner.pid):
        return True
    started = _start_time(owner.pid)
    return owner.started != "-" and started is not None and started != owner.started
