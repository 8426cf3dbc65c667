"""Whether a path a user names is a file: autotune reads and writes regular files only. Read, a pipe
never ends unless someone writes to it and /dev/zero never ends at all (`autotune import /dev/zero`
filled memory until it was killed); written through a new file renamed into place
(autotune/core/output.py), a device would be replaced by that file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autotune.core.errors import AutotuneError

# What a path is where it is not a regular file, by its mode (os.stat's, links followed).
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: Path) -> str | None:
    """What `path` is where it is, or links to, something other than a regular file ("a pipe", "a
    character device (through a link)"); None for a regular file and for a path with nothing there
    (or nothing this process may look at): opening it says what is wrong."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a path holding a NUL byte
        return None
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{kind} (through a link)" if path.is_symlink() else kind


def refuse_to_read(path: Path, what: str) -> None:
    """Raise the one-line error where `path`, a `what` to read, is, or links to, anything but a file."""
    kind = not_a_file(path)
    if kind is not None:
        raise AutotuneError(f"cannot read {what} {path}: it is {kind}, not a file")
