"""Opening the database: URL resolution, read-only files, migrations at open, and the session helper."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune.core import paths
from autotune.core.errors import AutotuneError
from autotune.core.redact import mask_url, scrub
from autotune.store import sqlite
from autotune.store.sqlite import NoWritablePlace

ENV_VAR = "AUTOTUNE_DB"
# An execution option read by the SQLite "begin" hook: write transactions take the write lock up front.
_IMMEDIATE = "autotune_immediate"
# The PostgreSQL advisory lock a write transaction holds until it ends (any constant: ours alone).
_WRITER_LOCK = 0x6175746F74756E65  # "autotune"


# A value that begins like a URL whose "://" is mistyped: a scheme name, then ":" or "//".
_URL_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(:|//)")


def _as_url(db: str) -> str:
    """A URL (it holds "://") as given; any other value is a SQLite file path, except one that
    begins like a URL (a scheme name, then ":" or "//"): taken as a path, a mistyped server URL
    would become a new file named after the password, and the error would print it."""
    if "://" in db:
        return db
    if _URL_LIKE.match(db):
        raise AutotuneError(
            f"database {mask_url(db)} looks like a URL without its '://': write scheme://user@host/name "
            "(for a file whose name begins like that, start it with ./)"
        )
    # A plain path: only the default location gets its folder created, never a user-given one.
    return str(URL.create("sqlite", database=str(Path(db).expanduser().absolute())))


def resolve_url(db: str | None = None) -> str:
    """The database URL: the argument, else $AUTOTUNE_DB, else a SQLite file in the user's data folder."""
    if db:
        return _as_url(db)
    env = os.environ.get(ENV_VAR)
    if env:
        return _as_url(env)
    home = paths.data_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home folder can be found at all
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NoWritablePlace(f"cannot create the database folder {home}: {reason}") from None
    return _as_url(str(home / "autotune.db"))


def sqlite_file(url: URL) -> Path | None:
    """The SQLite file a URL names; None for a server database, one in memory, and a file opened
    read-only (a "file:" URI)."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database.startswith("file:"):
        return None
    return Path(url.database)


def refuse_writing_over(path: Path, db: str | None, what: str) -> None:
    """Refuse an output `path` that is the SQLite database `db` names, or its -wal, -shm or -journal
    file: `export -o` or `report -o` written over it would leave no database (a one-line error, before
    anything is read or written)."""
    try:
        database = sqlite_file(_parse(resolve_url(db)))
    except NoWritablePlace:  # no default place: the in-memory fallback answers, no file to write over
        return
    if database is None:
        return
    for part in (database, *(database.with_name(database.name + end) for end in ("-wal", "-shm", "-journal"))):
        try:
            same = os.path.samefile(path, part)
        except OSError:  # either is missing: not the same file
            continue
        if same:
            raise AutotuneError(f"cannot write {what} {path}: it is the database this command reads; give another path")


def _parse(url: str) -> URL:
    """The parsed URL, or a one-line error naming what is wrong with it (never its password)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise AutotuneError(f"cannot open database {mask_url(url)}: it is not a database URL") from None
    except ValueError:  # SQLAlchemy converts the port with int()
        raise AutotuneError(f"cannot open database {mask_url(url)}: its port is not a number") from None
    if parsed.host and "@" in parsed.host:
        raise AutotuneError(
            f"cannot open database {mask_url(url)}: its password holds an '@' that is not percent-encoded "
            "(write it as %40)"
        )
    return parsed


POSTGRES_HINT = "pip install 'autotune-kernels[postgres]'"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cause(exc: BaseException) -> str:
    """The cause of a failure in words, without SQL, parameters or SQLAlchemy's background links."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return _one_line(str(exc.orig)) or type(exc.orig).__name__
    if isinstance(exc, NoSuchModuleError):
        return f"unknown database driver ({_one_line(str(exc))})"
    if isinstance(exc, ImportError):
        # psycopg, the PostgreSQL driver, comes with the package's `postgres` extra.
        install = f": {POSTGRES_HINT}" if "psycopg" in str(exc) else ""
        return f"the database driver is not installed ({exc}){install}"
    first = str(exc).strip().splitlines()
    return _one_line(first[0]) if first else type(exc).__name__


def _first(exc: BaseException) -> BaseException:
    """The database error that started it: a failed write inside a savepoint surfaces as the
    savepoint's failed release ("no such savepoint"), with the real cause (a full disk) before it."""
    while isinstance(exc.__context__, SQLAlchemyError):
        exc = exc.__context__
    return exc


def _on_sqlite_begin(connection: Connection) -> None:
    # IMMEDIATE for writers: a deferred transaction that reads and then writes fails at once with
    # "database is locked" when another process wrote in between; IMMEDIATE waits for busy_timeout.
    immediate = connection.get_execution_options().get(_IMMEDIATE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _lenient_json(text: str) -> Any:
    """A JSON column's value, or None where the stored text is not JSON (a byte changed in the file,
    a row written straight in): SQLite keeps JSON as text and checks nothing. None is no config and
    no list of times, so the row checks (rows.usable) skip the row instead of the whole command
    failing on it; on PostgreSQL the server checks JSON, so this never happens there."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    engine = create_engine(url, json_deserializer=_lenient_json)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", lambda connection, _record: sqlite.on_connect(connection, read_only=read_only))
        event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(paths.db_dir() / "migrations"))
    return config


def _is_current(connection: Connection, script: ScriptDirectory, masked: str) -> bool:
    """Whether the schema is at our head; a revision we do not know means a newer autotune wrote it."""
    known = {revision.revision for revision in script.walk_revisions()}
    current = set(MigrationContext.configure(connection).get_current_heads())
    unknown = sorted(current - known)
    if unknown:
        raise AutotuneError(
            f"database {masked} has schema revision {', '.join(unknown)}, newer than this autotune knows; "
            "upgrade autotune"
        )
    return current == set(script.get_heads())


def _migrate(engine: Engine, masked: str, *, read_only: bool = False) -> None:
    """Upgrade to head in one transaction: a failure leaves the database exactly as it was."""
    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    # Look first without the write lock, so that opening a current database never waits on a sweep.
    with engine.connect() as connection, connection.begin():
        if engine.dialect.name == "sqlite":
            sqlite.check_ours(connection, masked)
        if _is_current(connection, script, masked):
            return
    if read_only:
        raise AutotuneError(
            f"database {masked} is read-only and needs a schema upgrade: open it once where it can be written"
        )
    with engine.execution_options(**{_IMMEDIATE: True}).connect() as connection:
        is_sqlite = engine.dialect.name == "sqlite"
        if is_sqlite:
            # SQLite alters a table by copying it and dropping the old one, which a row referring
            # to it (a trial to its problem) forbids while foreign keys are enforced; the switch
            # only takes effect outside a transaction. Every reference is checked before commit.
            _foreign_keys(connection, on=False)
        try:
            with connection.begin():
                if _is_current(connection, script, masked):
                    return  # another process migrated it meanwhile
                tables = _tables(connection) if is_sqlite else []
                if is_sqlite and "gpus" in tables and not MigrationContext.configure(connection).get_current_heads():
                    # Our tables without a schema revision (alembic_version emptied or dropped): no migration
                    # can tell what they hold, and running the first would fail on "table gpus already exists".
                    raise AutotuneError(
                        f"cannot open database {masked}: it holds autotune's tables but no schema revision "
                        "(alembic_version is empty or gone): the file is damaged"
                    )
                if is_sqlite and not tables:
                    # A new file: the schema every migration leaves, in one go (about 0.2 s less a file).
                    location = Path(config.get_main_option("script_location") or "").resolve()
                    for statement, parameters in head_schema(str(location)):
                        connection.exec_driver_sql(statement, parameters)
                else:
                    config.attributes["connection"] = connection
                    command.upgrade(config, "head")
                if is_sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise AutotuneError(
                            f"cannot upgrade database {masked}: {len(broken)} rows refer to rows that do not exist"
                        )
        finally:
            if is_sqlite:
                _foreign_keys(connection, on=True)


def _tables(connection: Connection) -> list[str]:
    """The SQLite file's tables (its own sqlite_ ones aside): none in a file just made."""
    found = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars()
    return [name for name in found if not name.startswith("sqlite_")]


@functools.cache
def head_schema(script_location: str) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """What a new SQLite file at the head revision holds, as statements that write it: the
    migrations in `script_location` are run once per process on a database in memory, and its
    tables, indexes and triggers (sqlite_master's own SQL, in the order they were made) and rows
    (alembic_version's, the change counter's) are read back. Running each migration on every new
    file took about 0.2 s a file: SQLite alters a table by copying it, several times over."""
    engine = create_engine("sqlite://")
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", script_location)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            rows = connection.exec_driver_sql(
                "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
            ).all()
            # SQLite's own tables (AUTOINCREMENT's counters) come with the tables that need them.
            statements: list[tuple[str, tuple[Any, ...]]] = [
                (sql, ()) for _, name, sql in rows if not name.startswith("sqlite_")
            ]
            for kind, name, _ in rows:
                if kind == "table" and not name.startswith("sqlite_"):
                    for row in connection.exec_driver_sql(f'SELECT * FROM "{name}"').all():
                        marks = ", ".join("?" * len(row))
                        statements.append((f'INSERT INTO "{name}" VALUES ({marks})', tuple(row)))
            return tuple(statements)
    finally:
        engine.dispose()


def _foreign_keys(connection: Connection, *, on: bool) -> None:
    # On the driver's connection: SQLAlchemy would open a transaction around the statement.
    raw = connection.connection.driver_connection
    assert raw is not None
    raw.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


class Database:
    """An open, migrated database: the engine plus the one session helper."""

    def __init__(self, engine: Engine, url: str, *, read_only: bool = False) -> None:
        self.engine = engine
        self.url = url  # password masked: fit for messages
        self.read_only = read_only
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        writer = engine.execution_options(**{_IMMEDIATE: True})
        self._write = sessionmaker(bind=writer, expire_on_commit=False)

    @contextmanager
    def session_scope(self, *, write: bool = False, serialize: bool = True) -> Iterator[Session]:
        """A session that commits when the block ends and rolls back when it raises. Every database
        error (locked past the wait, damaged file, full disk) leaves as a one-line AutotuneError.

        Write transactions run one at a time, as SQLite runs them: most look a row up and insert it
        where it is missing (a GPU, a trial, an import), which two server transactions would both
        do. `serialize=False` is for writes that only update rows they lock (the queue's claims)."""
        if write and self.read_only:
            raise AutotuneError(f"database {self.url} is read-only (its file or folder is not writable)")
        session = (self._write if write else self._read)()
        try:
            if write and serialize and self.engine.dialect.name == "postgresql":
                session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _WRITER_LOCK})
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            with suppress(SQLAlchemyError):
                session.rollback()
            cause = scrub(_cause(_first(exc)), self.engine.url.render_as_string(hide_password=False))
            raise AutotuneError(sqlite.describe(cause, self.url)) from None
        except BaseException:
            with suppress(SQLAlchemyError):
                session.rollback()
            raise
        finally:
            with suppress(SQLAlchemyError):
                session.close()

    def close(self) -> None:
        self.engine.dispose()


def check_url(db: str | None = None) -> str:
    """Resolve and parse the URL and load its driver, touching no database; returns the masked URL.

    Lets a sweep reject a bad --db in one line before it spends minutes on the GPU."""
    url = resolve_url(db)
    _engine(url).dispose()
    return mask_url(url)


def _engine(url: str, *, read_only: bool = False) -> Engine:
    _parse(url)
    try:
        return make_engine(url, read_only=read_only)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise AutotuneError(f"cannot open database {mask_url(url)}: {scrub(_cause(exc), url)}") from None


def open_database(db: str | None = None) -> Database:
    """Connect and migrate to head; every failure is an AutotuneError of one line naming the URL.

    A SQLite file that exists but cannot be written (file or folder) is opened read-only, and
    nothing is written to it, not even its journal mode. NoWritablePlace: the default location
    (no `db`, no $AUTOTUNE_DB) can be neither created nor opened."""
    url = resolve_url(db)
    masked = mask_url(url)
    _parse(url)  # a URL SQLAlchemy cannot parse is one line here, before anything reads it
    path = sqlite.file_path(url)
    found = sqlite.Access()
    if path is not None:
        found = sqlite.access(path, masked, default=not (db or os.environ.get(ENV_VAR)))
        if found.read_only:
            url = sqlite.read_only_url(path, found)
    engine = _engine(url, read_only=found.read_only)
    try:
        _migrate(engine, masked, read_only=found.read_only)
    except AutotuneError:
        engine.dispose()
        raise
    except (SQLAlchemyError, CommandError, ImportError, OSError) as exc:
        engine.dispose()
        cause = sqlite.lock_hint(scrub(_cause(exc), url))
        raise AutotuneError(f"cannot open database {masked}: {cause}") from None
    return Database(engine, masked, read_only=found.read_only)
