"""What autotune writes for people and other programs, made safe to read: text with its control
characters shown as escapes, JSON with them as \\u escapes, and files written whole through a new
file renamed into place. Any string of a database may hold a terminal's escape sequences or a
bidirectional override (a GPU name, a driver version, a kernel's message), and an output path may
be a link someone planted."""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import not_a_file

# Controls (C0, DEL, C1), format characters (bidirectional overrides and isolates, zero-width
# ones) and the line and paragraph separators, which a terminal or an editor acts on.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden(ch: str) -> bool:
    return unicodedata.category(ch) in _HIDDEN


def printable(text: str) -> str:
    """`text` with its control and format characters written out as visible escapes (ESC as
    \\x1b, U+202E as \\u202e); newlines and tabs stay, every other character too."""
    # Only characters outside printable ASCII can be hidden ones: the regex finds those in C, so a
    # page of a megabyte is not looked at character by character in Python.
    return _NOT_PLAIN_ASCII.sub(lambda m: _escaped(m.group()), text)


_NOT_PLAIN_ASCII = re.compile(r"[^\x20-\x7e\n\t]")


def _escaped(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii") if _hidden(ch) else ch


def json_text(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON whose control and format characters are \\u escapes and whose other
    characters (a GPU name in another script) stay readable: json.dumps escapes C0 controls inside
    strings, not DEL, C1 or U+202E. Outside strings JSON is ASCII, so each one met is in a string."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return "".join(json.dumps(ch)[1:-1] if ord(ch) > 0x7E and _hidden(ch) else ch for ch in text)


def write_atomically(path: Path, text: str, *, what: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all: write_bytes_atomically."""
    write_bytes_atomically(path, [text.encode("utf-8")], what=what)


def write_bytes_atomically(path: Path, chunks: Iterable[bytes], *, what: str) -> None:
    """Write `chunks` to `path` whole or not at all, replacing the file there: a reader or a crash
    never sees half a file, and a symbolic link planted at `path` is replaced, not written through.
    The staging file beside it comes from mkstemp (a new name, created exclusively), so no link
    planted there is followed either. It gets the mode a plain open() gives (0o666 less the umask).
    A path that is, or links to, anything but a file (a folder, a device such as /dev/null, a pipe)
    is refused before anything is written: the rename would put a file in its place, and run as
    root that deletes the device. `what` names the file in the one-line error."""
    refuse_unless_file(path, what)
    temporary: Path | None = None
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        temporary = Path(name)
        with os.fdopen(handle, "wb") as staged:
            os.fchmod(staged.fileno(), 0o666 & ~umask())
            for chunk in chunks:
                staged.write(chunk)
            staged.flush()
            os.fsync(staged.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise AutotuneError(f"cannot write {what} {path}: {exc.strerror or exc}") from None


def refuse_unless_file(path: Path, what: str) -> None:
    """Raise the one-line error where `path` is, or links to, something other than a regular file; a
    missing path (or a link to nothing) is fine: it becomes one."""
    kind = not_a_file(path)
    if kind is not None:
        raise AutotuneError(f"cannot write {what} {path}: it is {kind}, not a file; give the path of a file")


def umask() -> int:
    """This process's umask. Read from /proc where it can be: setting the umask to learn it
    changes it, for a moment, for every thread of the process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o077)
    os.umask(current)
    return current
