"""Where things live: shipped resources (kernels/, db/) and per-user data and cache folders."""

from __future__ import annotations

import functools
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # autotune/, above core/


@functools.cache  # found once per process: the launch path's first call asks a dozen times
def _resource(name: str) -> Path:
    # An installed wheel carries kernels/ and db/ inside the package; a source checkout has them
    # beside the package at the top level.
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"autotune resource folder {name!r} is missing from this installation")


def kernels_dir() -> Path:
    return _resource("kernels")


def db_dir() -> Path:
    return _resource("db")


def data_home() -> Path:
    """Per-user data folder (XDG): the default SQLite database lives here."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "autotune"


def cache_home() -> Path:
    """Per-user cache folder (XDG): compiled kernels live here; AUTOTUNE_CACHE_DIR overrides it."""
    override = os.environ.get("AUTOTUNE_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotune"
