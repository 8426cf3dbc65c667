"""Alembic environment: migrates the connection autotune.store.database hands over (no alembic.ini)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from autotune.store.database import make_engine, resolve_url
from autotune.store.models import Base

config = context.config


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite can only ALTER a table by copying it, which batch mode does for us.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # Run by hand (`alembic -x ...` with a config naming no connection): use autotune's own database.
    engine = make_engine(config.get_main_option("sqlalchemy.url") or resolve_url())
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("autotune migrations run online only: autotune.store.open_store() applies them")
run_migrations_online()
