"""Running trials have owners: a live sweep's rows are never dropped, ids never reused, rows never mixed."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, Toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.store import Provenance, Store, open_store
from autotune.store import owner as owners
from autotune.store.models import utcnow

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
TOOLS = Toolchain(nvcc="13.0.88", pycuda="2025.1", autotune="0.1.0")
SHAPE = Problem("gemv", "float16", 4096, 4096)


def where(store: Store) -> Provenance:
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    return Provenance(pid, store.upsert_gpu(H200), "src", TOOLS, H200.driver, H200.cuda)


def rows(db_path: Path) -> dict[int, tuple[str, str, float | None]]:
    with sqlite3.connect(db_path) as connection:
        found = connection.execute("SELECT id, config_key, status, time_us FROM trials").fetchall()
    connection.close()
    return {i: (key, status, time_us) for i, key, status, time_us in found}


def set_owner(db_path: Path, trial_id: int, owner: str | None, age: timedelta = timedelta(0)) -> None:
    with sqlite3.connect(db_path) as connection:
        started = (utcnow() - age).replace(tzinfo=None).isoformat(sep=" ")
        connection.execute("UPDATE trials SET owner = ?, created_at = ? WHERE id = ?", (owner, started, trial_id))
    connection.close()


def test_a_second_sweep_neither_drops_nor_steals_a_live_sweeps_row(db_path: Path) -> None:
    # The minimal example: b dropped a's running row, got its id and a's time went to Y.
    a, b = open_store(str(db_path), import_shipped=False), open_store(str(db_path), import_shipped=False)
    wa, wb = where(a), where(b)
    ta = a.start_trial(wa, {"cfg": 1})
    assert b.drop_unfinished(wa.problem_id) == 0
    tb = b.start_trial(wb, {"cfg": 2})
    assert tb != ta
    b.finish_trial(tb, Outcome(Status.OK, time_us=20.0))
    a.finish_trial(ta, Outcome(Status.OK, time_us=5.0))
    assert rows(db_path) == {ta: ('{"cfg":1}', "ok", 5.0), tb: ('{"cfg":2}', "ok", 20.0)}
    a.close()
    b.close()


def test_ids_are_never_reused(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as first:
        dropped = first.start_trial(where(first), {"cfg": 1})
    with open_store(str(db_path), import_shipped=False) as second:
        assert second.drop_unfinished() == 1  # its store closed: the row is abandoned
        assert second.start_trial(where(second), {"cfg": 2}) > dropped


def test_finish_refuses_a_trial_this_store_did_not_start(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as a, open_store(str(db_path), import_shipped=False) as b:
        trial = a.start_trial(where(a), {"cfg": 1})
        with pytest.raises(AutotuneError, match="not started by this store"):
            b.finish_trial(trial, Outcome(Status.OK, time_us=1.0))
    assert rows(db_path)[trial][1] == "running"


def test_finish_refuses_a_row_that_holds_another_config(store: Store, db_path: Path) -> None:
    trial = store.start_trial(where(store), {"cfg": 1})
    with sqlite3.connect(db_path) as connection:
        connection.execute("UPDATE trials SET config_key = '{\"cfg\":9}' WHERE id = ?", (trial,))
    connection.close()
    with pytest.raises(AutotuneError, match=r"holds config \{\"cfg\":9\}") as caught:
        store.finish_trial(trial, Outcome(Status.OK, time_us=1.0))
    assert "\n" not in str(caught.value)


def test_finish_refuses_a_dropped_row(store: Store, db_path: Path) -> None:
    trial = store.start_trial(where(store), {"cfg": 1})
    assert store.drop_unfinished() == 1
    with pytest.raises(AutotuneError, match="dropped as unfinished"):
        store.finish_trial(trial, Outcome(Status.OK, time_us=1.0))


def test_two_sweeps_measuring_one_config_keep_the_first_outcome(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as a, open_store(str(db_path), import_shipped=False) as b:
        ta = a.start_trial(where(a), {"cfg": 1})
        tb = b.start_trial(where(b), {"cfg": 1})
        assert ta == tb
        b.finish_trial(tb, Outcome(Status.OK, time_us=4.0))
        a.finish_trial(ta, Outcome(Status.OK, time_us=4.5))
    assert rows(db_path) == {ta: ('{"cfg":1}', "ok", 4.0)}


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A process of this host that stays alive through the test."""
    sleeper = subprocess.Popen(["sleep", "60"])
    yield sleeper.pid
    sleeper.kill()
    sleeper.wait()


def test_rows_of_other_live_processes_stay_and_dead_ones_go(store: Store, db_path: Path, live_pid: int) -> None:
    host = owners.this_process().host
    start = owners._start_time(live_pid) or "-"
    cases = {
        "live": (f"{host} {live_pid} {start} t1", timedelta(0), False),
        "reused pid": (f"{host} {live_pid} 1 t2", timedelta(0), True),
        "legacy": (None, timedelta(0), True),
        "other host, fresh": ("elsewhere 1 5 t3", timedelta(minutes=5), False),
        "other host, old": ("elsewhere 1 5 t4", owners.LEASE + timedelta(minutes=1), True),
    }
    ids = {}
    for number, (name, (owner, age, _)) in enumerate(cases.items()):
        ids[name] = store.start_trial(where(store), {"cfg": number})
        set_owner(db_path, ids[name], owner, age)
    with open_store(str(db_path), import_shipped=False) as other:
        assert other.drop_unfinished() == sum(gone for _, _, gone in cases.values())
    left = rows(db_path)
    for name, (_, _, gone) in cases.items():
        assert (ids[name] not in left) is gone, name


def test_a_live_owners_row_is_not_reset_by_another_start(db_path: Path, live_pid: int) -> None:
    with open_store(str(db_path), import_shipped=False) as store:
        trial = store.start_trial(where(store), {"cfg": 1})
        owner = f"{owners.this_process().host} {live_pid} {owners._start_time(live_pid) or '-'} t"
        set_owner(db_path, trial, owner)
        assert store.start_trial(where(store), {"cfg": 1}) == trial
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("SELECT owner FROM trials").fetchall() == [(owner,)]
    connection.close()


def test_a_final_row_measured_again_keeps_its_outcome_until_replaced(db_path: Path) -> None:
    # Resetting it to running lost a finished measurement whenever the second sweep was killed.
    with open_store(str(db_path), import_shipped=False) as a:
        first = a.start_trial(where(a), {"cfg": 1})
        a.finish_trial(first, Outcome(Status.OK, time_us=4.0))
    with open_store(str(db_path), import_shipped=False) as b:
        assert b.start_trial(where(b), {"cfg": 1}) == first
        assert rows(db_path)[first] == ('{"cfg":1}', "ok", 4.0)  # measured again; killed before its end
    with open_store(str(db_path), import_shipped=False) as c:
        assert c.drop_unfinished() == 0
        again = c.start_trial(where(c), {"cfg": 1})
        c.finish_trial(again, Outcome(Status.OK, time_us=4.2))
    assert rows(db_path) == {first: ('{"cfg":1}', "ok", 4.2)}


# --- pid spaces: containers with host networking share the host name, not their pids ------------


def test_an_owner_of_another_pid_namespace_or_boot_falls_under_the_lease(live_pid: int) -> None:
    me = owners.this_process()
    hostname, here = me.hostname, owners.this_space()
    assert me.host == here
    if os.path.exists("/proc/self/ns/pid"):  # Linux: the owner names its pid namespace
        assert here.endswith("/" + os.readlink("/proc/self/ns/pid")[len("pid:[") : -1])
    start = owners._start_time(live_pid) or "-"
    now = utcnow()
    for space in (
        owners.pid_space(hostname, "another-boot", "4026531836"),
        owners.pid_space(hostname, here.split("/")[1] if "/" in here else "-", "4026599999"),
        hostname,  # written before the boot and namespace were recorded: nothing to compare
    ):
        if space == here:
            continue  # a platform that tells neither: the bare host name is this space
        # A dead pid of that space, and a live pid of ours that may be another program there.
        for pid in (live_pid, 2**22 + 1):
            owner = f"{space} {pid} {start} t"
            assert not owners.gone_here(owner), owner
            assert not owners.is_gone(owner, now - timedelta(minutes=5), now), owner
            assert owners.is_gone(owner, now - owners.LEASE - timedelta(minutes=1), now), owner
    assert owners.gone_here(f"{here} {2**22 + 1} {start} t")  # no such pid here: gone at once


def _can_unshare_pid() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True, check=False)
    return probe.returncode == 0


# Starts one trial in the database given, says so, and finishes it once its stdin closes.
_TRIAL_IN_ANOTHER_NAMESPACE = """
import sys
from autotune.core.outcome import Outcome, Status
from autotune.store import open_store
from tests.test_store_owner import where
with open_store(sys.argv[1], import_shipped=False) as store:
    trial = store.start_trial(where(store), {"cfg": 1})
    print(trial, flush=True)
    sys.stdin.read()
    store.finish_trial(trial, Outcome(Status.OK, time_us=3.0))
"""


@pytest.mark.skipif(not _can_unshare_pid(), reason="no permission to make a pid namespace (unshare -p)")
def test_a_live_trial_in_another_pid_namespace_is_not_dropped(db_path: Path) -> None:
    open_store(str(db_path), import_shipped=False).close()
    root = Path(__file__).parents[1]
    command = ["unshare", "-p", "-f", "--mount-proc", sys.executable, "-c", _TRIAL_IN_ANOTHER_NAMESPACE, str(db_path)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=root)
    assert child.stdin is not None and child.stdout is not None
    try:
        trial = int(child.stdout.readline())
        with open_store(str(db_path), import_shipped=False) as other:
            assert other.drop_unfinished() == 0  # its pid means nothing here: only the lease could
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
    assert rows(db_path)[trial] == ('{"cfg":1}', "ok", 3.0)
