"""Shared test setup: GPU tests (marker `gpu`) skip cleanly where there is no GPU or no PyCUDA (those
marked `gpu(driver=True)` need the CUDA driver only, as the launch path does); one kernel cache serves
the whole run (all its workers under pytest-xdist), what the tests marked `nvcc` compile is built once,
in the background, while the other tests run (tests/nvcc.py), and the shipped records are imported
once into each kind of new database, then copied (tests/shipped_copies.py)."""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autotune.core.fingerprint import nvcc_version
from autotune.store import Store, open_store, records
from tests import nvcc, shipped_copies

# Where the run's kernel cache is kept on its config (made in pytest_configure, removed in pytest_unconfigure).
_KERNELS = pytest.StashKey[Path]()
# The key of the kernel cache's path in the workerinput pytest-xdist's controller hands each worker.
_WORKER_KERNELS = "autotune_test_kernels"


def pytest_configure(config: pytest.Config) -> None:
    """The run's kernel cache (AUTOTUNE_CACHE_DIR of every test): cubins/ and nvcc-runs/. Made here, not
    at import, so that nothing is made by importing this module and the folder removed is the one made.
    Under pytest-xdist the controller makes it and its workers share it (pytest_configure_node): each
    kernel the tests need is then compiled once per run, not once per worker."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.stash[_KERNELS] = Path(workerinput[_WORKER_KERNELS])
    else:
        config.stash[_KERNELS] = Path(tempfile.mkdtemp(prefix="autotune-test-kernels-"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller, for each worker it starts: the run's kernel cache."""
    node.workerinput[_WORKER_KERNELS] = str(node.config.stash[_KERNELS])


@pytest.fixture(scope="session")
def kernel_cache(pytestconfig: pytest.Config) -> Path:
    """The run's kernel cache, for a module-scoped fixture that runs before _isolated_user_dirs sets it."""
    return pytestconfig.stash[_KERNELS]


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


@functools.cache
def driver_gpu_available() -> str | None:
    """None when a CUDA GPU is usable through the driver API (the launch path's, no PyCUDA), else why not."""
    try:
        from autotune.gpu import driver

        if driver.device_count() == 0:
            return "no CUDA GPU"
    except Exception as exc:  # AutotuneError: no libcuda, driver errors
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
    for item in items:
        marker = item.get_closest_marker("gpu")
        if marker is not None:
            reason = driver_gpu_available() if marker.kwargs.get("driver") else gpu_available()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    # Tests that compile run last, by when the background has compiled what they check.
    items.sort(key=lambda item: item.get_closest_marker("nvcc") is not None)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's reports the collection: see nvcc._wait_for_lock
def pytest_collection_finish(session: pytest.Session) -> None:
    """Start compiling, in the background, what the selected tests marked `nvcc` will compile."""
    makers: dict[nvcc.JobsOf, None] = {}
    for item in session.items:
        marker = item.get_closest_marker("nvcc")
        if marker is not None and not item.get_closest_marker("skip"):
            makers[marker.kwargs["jobs"]] = None
    jobs: dict[nvcc.Job, None] = {}
    for make in makers:
        with contextlib.suppress(Exception):  # the test itself reports it
            jobs.update(dict.fromkeys(make()))
    # The real nvcc's version is part of every cache key: take it before a test puts a fake nvcc on PATH.
    nvcc_version()
    kernels = session.config.stash[_KERNELS]
    # xdist's workers all collect the same tests: the first compiles for all, the others wait for it.
    workerinput = getattr(session.config, "workerinput", None)
    first = workerinput is None or workerinput["workerid"] == "gw0"
    nvcc.start_background(list(jobs), kernels / "cubins", kernels / "nvcc-runs", start=first)


def pytest_unconfigure(config: pytest.Config) -> None:
    nvcc.stop_background()
    kernels = config.stash.get(_KERNELS, None)
    if kernels is not None and not hasattr(config, "workerinput"):  # the controller's, removed once all are done
        shutil.rmtree(kernels, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _shipped_records_copied() -> Iterator[None]:
    """The shipped records imported once per run into each kind of new database, then copied
    (tests/shipped_copies.py): dozens of tests import them, about a second each."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records, "import_shipped", shipped_copies.wrap(records.import_shipped))
        yield


@pytest.fixture(scope="session", autouse=True)
def _cli_built_once() -> Iterator[None]:
    """typer builds an app's click command from its command functions' signatures on every call of the
    app (30 ms for `autotune`'s), and the CLI tests call `autotune` hundreds of times in one process:
    each app's command is built once per process, as a process running `autotune` once builds it."""
    import typer.main

    build = typer.main.get_command
    built: dict[int, tuple[Any, Any]] = {}  # id(app) -> (app, its command): the app kept, its id not reused

    def get_command(app: Any) -> Any:
        if id(app) not in built:
            built[id(app)] = (app, build(app))
        return built[id(app)][1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.main, "get_command", get_command)
        yield


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
    (resources / "gpus.json").symlink_to(Path(__file__).resolve().parents[1] / "db" / "gpus.json")
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: resources)


@pytest.fixture(autouse=True)
def _our_kernels_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """cuBLASLt stays out of sweeps and selection (the launch path's tests test our kernels) except
    in tests marked `vendor`."""
    if not request.node.get_closest_marker("vendor"):
        monkeypatch.setenv("AUTOTUNE_VENDOR", "0")


@pytest.fixture(autouse=True)
def _isolated_user_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, kernel_cache: Path
) -> None:
    """Tests never touch the real per-user database; the kernel cache is shared across tests only."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(kernel_cache))
