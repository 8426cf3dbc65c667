"""The storage layer: tuning results in SQLite or a server database, behind one Store class."""

from autotune.core.space import config_key
from autotune.store.database import Database, check_url, open_database, resolve_url
from autotune.store.rows import BestRow, GpuRow, ProblemSummary, Provenance, TrialRow
from autotune.store.store import Store, open_store

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
