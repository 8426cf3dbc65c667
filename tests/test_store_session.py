"""The store session (autotune/store_session.py): each database opened once, what a new session
forgets, and tests that start sessions instead of clearing the API's state by hand."""

from __future__ import annotations

import importlib
import re
import threading
from pathlib import Path

from autotune import api
from autotune.core.fingerprint import GpuInfo
from autotune.ops import gemv, make_problem
from autotune.store_session import Session
from tests.fakes import ok, record

TESTS = Path(__file__).resolve().parent
H200 = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 << 20, 141 << 30, "580.159.04", "13.0")
PROBLEM = make_problem("gemv", "float16", 4096, 8192)
CONFIG = dict(gemv.DEFAULT_CONFIG)


def test_a_session_opens_each_database_once_across_threads(tmp_path: Path) -> None:
    session = Session()
    url = str(tmp_path / "one.db")
    opened: list[object] = []
    threads = [threading.Thread(target=lambda: opened.append(session.store(url))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(store) for store in opened}) == 1
    assert session.opened(url) and not session.opened(None) and not session.default_store_opened()


def test_a_new_session_reads_what_another_process_wrote(tmp_path: Path) -> None:
    url = str(tmp_path / "shared.db")
    first = api.new_session()
    assert first.selector(url).choose(PROBLEM, H200.name).source != "measured"
    with Session().store(url) as other:  # another process writes a measurement
        record(other, PROBLEM, dict(CONFIG), ok(10.0), H200)
    second = api.new_session()
    assert second is api.session() and second is not first
    choice = api.best("gemv", 4096, 8192, dtype="float16", gpu=H200.name, db=url)
    assert choice.source == "measured" and choice.time_us == 10.0


def test_without_shipped_holds_for_its_session_only(tmp_path: Path) -> None:
    url = str(tmp_path / "bare.db")
    session = api.new_session()
    api.without_shipped(url)
    assert session.store(url).gpu_names() == []
    api.new_session()
    assert not api.session().opened(url)


def test_forget_choices_keeps_the_stores_open(tmp_path: Path) -> None:
    session = Session()
    url = str(tmp_path / "kept.db")
    store, selector = session.store(url), session.selector(url)
    session.forget_choices()
    assert session.store(url) is store and session.selector(url) is not selector


def test_no_test_clears_the_apis_state_by_hand() -> None:
    """Tests start a session (api.new_session) where a later process is meant; none reaches into
    the API's caches or flags."""
    by_hand = re.compile(r"api\._\w+\.cache_clear\(|api\._default_opened|api\._open\b|api\._selector\b")
    offenders = [
        path.name
        for path in TESTS.glob("*.py")
        if path.name not in ("test_store_session.py", "test_scripts_public_names.py")
        and by_hand.search(path.read_text())
    ]
    assert offenders == []


def test_the_store_package_exports_each_name_from_its_module_at_first_use() -> None:
    """autotune.store imports SQLAlchemy only when a name that needs it is asked for (the launch path
    reads the selection table, a module of the same package)."""
    package = importlib.import_module("autotune.store")  # `autotune.store` the attribute is api.store

    assert sorted(package.__all__) == sorted(package._EXPORTS)
    for name in package.__all__:
        assert getattr(package, name).__name__ == name
    try:
        package.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("an unknown name was found")
