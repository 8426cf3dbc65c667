"""SQLite specifics: connection pragmas, read-only files, the lock wait, and files that are not ours."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, inspect
from sqlalchemy.engine import make_url

from autotune.core.errors import AutotuneError
from autotune.store.models import Base

LOCK_WAIT_VAR = "AUTOTUNE_DB_LOCK_WAIT"
# How long a command waits for another process's write lock before it gives up (SQLite's busy
# handler retries with growing sleeps, up to 100 ms apart). A sweep's write holds it for
# milliseconds and importing every shipped records file for a few seconds.
DEFAULT_LOCK_WAIT = 60.0
# The tables of the models (every migration creates exactly those) and Alembic's own.
OUR_TABLES = frozenset({*Base.metadata.tables, "alembic_version"})


class NoWritablePlace(AutotuneError):
    """The default database can be neither created nor opened: the caller may fall back to memory."""


def lock_wait() -> float:
    """Seconds to wait for a lock: $AUTOTUNE_DB_LOCK_WAIT, else DEFAULT_LOCK_WAIT."""
    text = os.environ.get(LOCK_WAIT_VAR, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 86400:
        raise AutotuneError(f"{LOCK_WAIT_VAR} must be a number of seconds from 0 to 86400, got {text!r}")
    return seconds


@dataclass(frozen=True)
class Access:
    """How a SQLite file can be opened."""

    read_only: bool = False
    # The folder is not writable either: SQLite cannot create the -wal/-shm files a WAL database
    # needs to be read, so the file is opened as immutable (nobody may be writing it).
    immutable: bool = False


def file_path(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory ones."""
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    if parsed.database.startswith("file:"):
        return None  # a URI the user wrote: opened as given
    return Path(parsed.database)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def access(path: Path, masked: str, *, default: bool) -> Access:
    """Read-write where both the file and its folder are writable; read-only where the file exists
    but either is not; an error where the file cannot be created."""
    folder = path.parent
    if path.exists():
        if path.is_dir():
            raise AutotuneError(f"cannot open database {masked}: it is a folder")
        folder_ok = _writable(folder)
        return Access(read_only=not (folder_ok and _writable(path)), immutable=not folder_ok)
    if folder.is_dir() and _writable(folder):
        return Access()
    kind = NoWritablePlace if default else AutotuneError
    why = "is not writable" if folder.is_dir() else "does not exist"
    raise kind(f"cannot open database {masked}: its folder {folder} {why}")


def read_only_url(path: Path, found: Access) -> str:
    # mode=ro: SQLite itself refuses every write, so opening can never write by mistake.
    flags = "mode=ro" + ("&immutable=1" if found.immutable else "")
    return f"sqlite:///file:{quote(str(path))}?{flags}&uri=true"


def on_connect(dbapi_connection: Any, *, read_only: bool) -> None:
    """Pragmas for every new connection; a read-only one only reads its settings."""
    # pysqlite's own transaction handling skips BEGIN before DDL, so a failed migration would leave
    # tables behind; taking over BEGIN (the engine's "begin" hook) makes DDL transactional.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another process may hold for a moment.
        cursor.execute(f"PRAGMA busy_timeout={int(lock_wait() * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        if read_only or _foreign_tables(cursor):
            return  # check_ours refuses a file of another program before anything is written
        # WAL lets readers (`autotune best` during a sweep) read while the sweep writes. Asked only
        # where it is not on yet: setting it writes the file header.
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL survives a killed process; only a power cut may lose the last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _foreign_tables(cursor: Any) -> list[str]:
    found = cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in found if not name.startswith("sqlite_") and name not in OUR_TABLES)


def check_ours(connection: Connection, masked: str) -> None:
    """Refuse a SQLite file that holds tables autotune did not create: it belongs to something else."""
    tables = {name for name in inspect(connection).get_table_names() if not name.startswith("sqlite_")}
    foreign = sorted(tables - OUR_TABLES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise AutotuneError(
            f"{masked} is not an autotune database (it holds tables {shown}): "
            "autotune writes nothing to it; give --db a new file"
        )


def lock_hint(cause: str) -> str:
    """The cause, with how long was waited where it is a lock."""
    if "locked" in cause.lower() or "busy" in cause.lower():
        return f"{cause} (waited {lock_wait():g} s; set {LOCK_WAIT_VAR} to wait longer)"
    return cause


def describe(cause: str, masked: str) -> str:
    """One line for a database error, with what the user can do about it."""
    lowered = cause.lower()
    if "locked" in lowered or "busy" in lowered:
        return (
            f"database {masked} is locked: another process held it for more than {lock_wait():g} s "
            f"(set {LOCK_WAIT_VAR} to wait longer)"
        )
    if "readonly" in lowered or "read-only" in lowered:
        return f"database {masked} is read-only: {cause}"
    if "malformed" in lowered or "not a database" in lowered or "corrupt" in lowered:
        return f"database {masked} is damaged ({cause}): move it aside and autotune starts a new one"
    if "full" in lowered:
        return f"database {masked} cannot grow: {cause}"
    return f"database {masked}: {cause}"
