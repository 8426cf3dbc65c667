"""The storage layer: tuning results in SQLite or a server database, behind one Store class.

Its names are imported at first use (PEP 562), not with the package: the selection table
(selection_table.py) and its rows (selection_rows.py) live here too, and the launch path that reads
them must not pay for SQLAlchemy, which the Store and the database modules import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.core.space import config_key
    from autotune.store.database import Database, check_url, open_database, resolve_url
    from autotune.store.rows import BestRow, GpuRow, ProblemSummary, Provenance, TrialRow
    from autotune.store.store import Store, open_store

# Each exported name and the module that defines it.
_EXPORTS = {
    "BestRow": "autotune.store.rows",
    "Database": "autotune.store.database",
    "GpuRow": "autotune.store.rows",
    "ProblemSummary": "autotune.store.rows",
    "Provenance": "autotune.store.rows",
    "Store": "autotune.store.store",
    "TrialRow": "autotune.store.rows",
    "check_url": "autotune.store.database",
    "config_key": "autotune.core.space",
    "open_database": "autotune.store.database",
    "open_store": "autotune.store.store",
    "resolve_url": "autotune.store.database",
}

__all__ = [
    "BestRow",
    "Database",
    "GpuRow",
    "ProblemSummary",
    "Provenance",
    "Store",
    "TrialRow",
    "check_url",
    "config_key",
    "open_database",
    "open_store",
    "resolve_url",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune.store' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
