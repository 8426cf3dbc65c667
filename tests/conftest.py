"""Shared test setup: GPU tests (marker `gpu`) skip cleanly where there is no GPU or no PyCUDA."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.store import Store, open_store


@functools.cache
def gpu_available() -> str | None:
    """None when a CUDA GPU is usable through PyCUDA, else why not."""
    try:
        import pycuda.driver as cuda

        cuda.init()
        if cuda.Device.count() == 0:
            return "no CUDA GPU"
    except Exception as exc:  # ImportError, missing libcuda, driver errors
        return f"no usable GPU ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tune.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """An empty SQLite store of the test's own (shipped records not imported)."""
    with open_store(str(db_path), import_shipped=False) as opened:
        yield opened


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _no_shipped_records(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stores start empty: the records shipped in db/records are imported only where a test asks
    for them with the `shipped_records` marker."""
    if request.node.get_closest_marker("shipped_records"):
        return
    resources = tmp_path_factory.mktemp("resources")
    (resources / "records").mkdir()
    (resources / "migrations").symlink_to(Path(__file__).resolve().parents[1] / "db" / "migrations")
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: resources)


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never touch the real per-user database; the kernel cache is shared across tests only."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    cache = Path(tmp_path_factory.getbasetemp()) / "kernel-cache"
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(cache))
