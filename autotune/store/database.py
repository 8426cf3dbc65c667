"""Opening the database: URL resolution, SQLite pragmas, migrations at open, and the session helper."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from autotune import paths
from autotune.errors import AutotuneError

ENV_VAR = "AUTOTUNE_DB"
# An execution option read by the SQLite "begin" hook: write transactions take the write lock up front.
_IMMEDIATE = "autotune_immediate"


def _as_url(db: str) -> str:
    if "://" in db:
        return db
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
    home.mkdir(parents=True, exist_ok=True)
    return _as_url(str(home / "autotune.db"))


def _mask(url: str) -> str:
    """A URL fit to print: the password hidden, even when SQLAlchemy cannot parse the URL."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cause(exc: BaseException) -> str:
    """The cause of a failure in words, without SQL, parameters or SQLAlchemy's background links."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return _one_line(str(exc.orig)) or type(exc.orig).__name__
    if isinstance(exc, NoSuchModuleError):
        return f"unknown database driver ({_one_line(str(exc))})"
    if isinstance(exc, ImportError):
        return f"the database driver is not installed ({exc})"
    first = str(exc).strip().splitlines()
    return _one_line(first[0]) if first else type(exc).__name__


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite's own transaction handling skips BEGIN before DDL, so a failed migration would leave
    # tables behind; taking over BEGIN (in _on_sqlite_begin) makes DDL transactional.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another process may hold for a moment.
        cursor.execute("PRAGMA busy_timeout=30000")
        # WAL lets readers (`autotune best` during a sweep) read while the sweep writes.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL survives a killed process; only a power cut may lose the last commits.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _on_sqlite_begin(connection: Connection) -> None:
    # IMMEDIATE for writers: a deferred transaction that reads and then writes fails at once with
    # "database is locked" when another process wrote in between; IMMEDIATE waits for busy_timeout.
    immediate = connection.get_execution_options().get(_IMMEDIATE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def make_engine(url: str) -> Engine:
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _on_sqlite_connect)
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


def _migrate(engine: Engine, masked: str) -> None:
    """Upgrade to head in one transaction: a failure leaves the database exactly as it was."""
    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    # Look first without the write lock, so that opening a current database never waits on a sweep.
    with engine.connect() as connection, connection.begin():
        if _is_current(connection, script, masked):
            return
    with engine.execution_options(**{_IMMEDIATE: True}).connect() as connection:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            # SQLite alters a table by copying it and dropping the old one, which a row referring
            # to it (a trial to its problem) forbids while foreign keys are enforced; the switch
            # only takes effect outside a transaction. Every reference is checked before commit.
            _foreign_keys(connection, on=False)
        try:
            with connection.begin():
                if _is_current(connection, script, masked):
                    return  # another process migrated it meanwhile
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise AutotuneError(
                            f"cannot upgrade database {masked}: {len(broken)} rows refer to rows that do not exist"
                        )
        finally:
            if sqlite:
                _foreign_keys(connection, on=True)


def _foreign_keys(connection: Connection, *, on: bool) -> None:
    # On the driver's connection: SQLAlchemy would open a transaction around the statement.
    raw = connection.connection.driver_connection
    assert raw is not None
    raw.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


class Database:
    """An open, migrated database: the engine plus the one session helper."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url  # password masked: fit for messages
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        writer = engine.execution_options(**{_IMMEDIATE: True})
        self._write = sessionmaker(bind=writer, expire_on_commit=False)

    @contextmanager
    def session_scope(self, *, write: bool = False) -> Iterator[Session]:
        """A session that commits when the block ends and rolls back when it raises."""
        session = (self._write if write else self._read)()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def close(self) -> None:
        self.engine.dispose()


def check_url(db: str | None = None) -> str:
    """Resolve and parse the URL and load its driver, touching no database; returns the masked URL.

    Lets a sweep reject a bad --db in one line before it spends minutes on the GPU."""
    engine = _engine(resolve_url(db))
    engine.dispose()
    return engine.url.render_as_string(hide_password=True)


def _engine(url: str) -> Engine:
    try:
        return make_engine(url)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise AutotuneError(f"cannot open database {_mask(url)}: {_cause(exc)}") from None


def open_database(db: str | None = None) -> Database:
    """Connect and migrate to head; every failure is an AutotuneError of one line naming the URL."""
    engine = _engine(resolve_url(db))
    masked = engine.url.render_as_string(hide_password=True)
    try:
        _migrate(engine, masked)
    except AutotuneError:
        engine.dispose()
        raise
    except (SQLAlchemyError, CommandError, ImportError, OSError) as exc:
        engine.dispose()
        raise AutotuneError(f"cannot open database {masked}: {_cause(exc)}") from None
    return Database(engine, masked)
