"""Importing the shipped records (db/records: hundreds of problems, thousands of trials) takes about
a second, and dozens of tests import them into a new database of their own: through open_store, the
API's default database, the CLI, a bundle export. conftest.py wraps autotune.store.records.import_shipped
in `wrap` below, for the tests' own process: the first import of a set of records files into a new
SQLite database is done for real and the database it gave is kept in memory; a later import of the
same files (by content) into a database in the same state (schema, rows, pragmas) gets a copy of
that one instead, page for page through SQLite's backup API, with what the import returns and logs.

Anything else is imported for real: a database holding more than a few rows, one in another state,
other or changed files, a server database, a read-only one, and every import in another process. The
copy differs from a new import only where the import writes the time (gpus and problems created_at,
shipped_imports imported_at): the first import's, seconds earlier.

A test that needs shipped records but not all of them (every store of them, every selection table
and bundle made from one reads all their trials) ships a few files of db/records instead: `db_folder`.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from autotune.store import records
from autotune.store.database import Database

ImportShipped = Callable[[Database, Path | None], int]

REPO = Path(__file__).resolve().parents[1]


def db_folder(folder: Path, shipped: Iterable[str]) -> Path:
    """`folder` made a db/ as this checkout lays it out (migrations, GPU table, shipped kernels), its
    records only the named files of db/records (copies) and no selection table; for
    autotune.core.paths.db_dir."""
    (folder / "records").mkdir(parents=True)
    for name in ("migrations", "gpus.json", "kernels"):
        (folder / name).symlink_to(REPO / "db" / name)
    for name in shipped:
        shutil.copy(REPO / "db" / "records" / name, folder / "records" / name)
    return folder


# A database is a candidate for a copy only where it holds this few rows (a new one holds two: its
# schema revision and its change count): its whole state is then the key of what importing into it gives.
_FEW_ROWS = 64
_PRAGMAS = ("page_size", "journal_mode", "user_version", "application_id", "auto_vacuum", "encoding")

State = tuple[object, ...]
Files = tuple[tuple[str, str], ...]

# (the state before, the records files) -> (the database the import gave, the trials it added)
_imported: dict[tuple[State, Files], tuple[sqlite3.Connection, int]] = {}
_lock = threading.Lock()  # the kept databases are shared by every thread of the process


def _state(connection: sqlite3.Connection) -> State | None:
    """Everything a database holds, where it holds only a few rows; else None. Each table's
    constraints are taken in any order: the migrations write them in an order that varies from one
    new database to the next (the order of the columns is kept)."""
    schema = connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    tables = [name for kind, name, _, _ in schema if kind == "table"]
    if sum(connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in tables) > _FEW_ROWS:
        return None
    definitions = tuple(
        (kind, name, table, tuple(sorted(line.strip().rstrip(",").strip() for line in (sql or "").splitlines())))
        for kind, name, table, sql in schema
    )
    columns = tuple(tuple(connection.execute(f'PRAGMA table_info("{name}")').fetchall()) for name in tables)
    rows = tuple(tuple(sorted(map(repr, connection.execute(f'SELECT * FROM "{name}"')))) for name in tables)
    pragmas = tuple(connection.execute(f"PRAGMA {name}").fetchone()[0] for name in _PRAGMAS)
    return definitions, columns, rows, pragmas


def _files(folder: Path) -> Files:
    return tuple((path.name, hashlib.sha256(path.read_bytes()).hexdigest()) for path in sorted(folder.glob("*.jsonl")))


@contextmanager
def _driver_connection(db: Database) -> Iterator[sqlite3.Connection]:
    """A connection of the database's own pool, as the sqlite3 module's."""
    raw = db.engine.raw_connection()
    try:
        connection = raw.driver_connection
        assert isinstance(connection, sqlite3.Connection)
        yield connection
    finally:
        raw.close()


def wrap(real: ImportShipped) -> ImportShipped:
    """autotune.store.records.import_shipped, answering from a copy where it can (see above)."""

    def import_shipped(db: Database, records_dir: Path | None = None) -> int:
        folder = records_dir if records_dir is not None else records._shipped_dir()
        if folder is None or not folder.is_dir() or db.read_only or db.engine.dialect.name != "sqlite":
            return real(db, records_dir)
        files = _files(folder)
        if not files:
            return real(db, records_dir)
        with _driver_connection(db) as connection:
            state = _state(connection)
            with _lock:
                kept = None if state is None else _imported.get((state, files))
                if kept is not None:
                    kept[0].backup(connection)
        if kept is not None:
            records.log.info("imported %d shipped trials from %s into %s", kept[1], folder, db.url)
            return kept[1]
        added = real(db, records_dir)
        if state is not None and added:
            made = sqlite3.connect(":memory:", check_same_thread=False)
            with _driver_connection(db) as connection:
                connection.backup(made)
            with _lock:
                _imported.setdefault((state, files), (made, added))
        return added

    return import_shipped
