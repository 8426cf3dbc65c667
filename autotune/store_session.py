"""A store session: the databases a process has opened and the selectors that read them, in one object.

`autotune.api` keeps one default session for the process (its thin functions, `autotune.best` or the
launch path, go through it); `api.new_session()` starts another, which is what a later process sees: a
new session opens each database afresh (importing shipped records files that changed), selects from
what it reads then, and remembers no `without_shipped` request of the old one.

Opening a database costs SQLAlchemy's import and a migration check, so a session opens each URL once
and keeps it, and the launch path asks the selection table (autotune/store/selection_table.py) where it answers
for the default database, which the session then never opens.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from autotune.core import paths
from autotune.select.choose import Selector
from autotune.store import selection_table as table

if TYPE_CHECKING:
    from autotune.store import Store

# Where the selection table of the default database is looked for (the data folder, $AUTOTUNE_DB and
# db/, which decide which table answers): a session asks once per place.
TablePlace = tuple[str, str, str]


class Session:
    """The stores (by URL, None: the default database), a selector over each, and the selector over
    the default database's selection table. Safe to share between threads: each store is opened once."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._stores: dict[str | None, Store] = {}
        self._selectors: dict[str | None, Selector] = {}
        self._table_selectors: dict[TablePlace, Selector | None] = {}
        self._without_shipped: set[str | None] = set()
        # Set once this session opened the default database itself: from then on the launch path asks
        # the store, which sees what this process wrote (a table is only read at a signature's first call).
        self._default_opened = threading.Event()

    def store(self, url: str | None = None) -> Store:
        """The database at `url` (None: the default one), opened at the first ask (shipped records
        imported then, unless `without_shipped` asked otherwise)."""
        found = self._stores.get(url)
        if found is not None:
            return found
        with self._lock:
            if url not in self._stores:
                from autotune.store import open_store  # SQLAlchemy: not on a launch the table answers

                self._stores[url] = open_store(url, decline_shipped=url in self._without_shipped)
                if url is None:
                    self._default_opened.set()
            return self._stores[url]

    def opened(self, url: str | None = None) -> bool:
        """Whether this session has opened the database at `url`."""
        return url in self._stores

    def default_store_opened(self) -> bool:
        """Whether this session opened the default database: from then on the launch path selects from
        the store, before that from the selection table."""
        return self._default_opened.is_set()

    def without_shipped(self, url: str | None = None) -> None:
        """Open the database at `url`, when this session first opens it, as one that never takes the
        shipped records (--no-shipped). Not opened here: bad input found first creates nothing."""
        self._without_shipped.add(url)

    def selector(self, url: str | None = None) -> Selector:
        """The selector over the store at `url`; for the default database it first writes the
        selection table afresh, for the next process's launch path."""
        found = self._selectors.get(url)
        if found is not None:
            return found
        with self._lock:
            if url not in self._selectors:
                database = self.store(url)
                if url is None:
                    path = table.default_database()
                    if path is not None and database.sqlite_file == path:
                        table.refresh(database, path)
                self._selectors[url] = Selector(database)
            return self._selectors[url]

    def launch_selector(self, url: str | None = None) -> Selector:
        """The launch path's selector: over the selection table where no `url` is given and the table is
        current for the default database, which is then never opened; else over the store."""
        if url is None and not self._default_opened.is_set():
            try:
                place = (str(paths.data_home()), os.environ.get(table.DATABASE_VAR, ""), str(paths.db_dir()))
            except (FileNotFoundError, RuntimeError):  # no db/ resources, no home folder: the store says why
                place = None
            found = self._table_selector(place) if place is not None else None
            if found is not None:
                return found
        return self.selector(url)

    def _table_selector(self, place: TablePlace) -> Selector | None:
        if place not in self._table_selectors:
            with self._lock:
                if place not in self._table_selectors:
                    found = table.default_table()
                    self._table_selectors[place] = None if found is None else Selector(found)
        return self._table_selectors[place]

    def forget_choices(self) -> None:
        """New measurements were stored (by another process, or a sweep of this one): later questions
        select again, from a selection table or store read afresh. The stores stay open."""
        with self._lock:
            self._selectors.clear()
            self._table_selectors.clear()
