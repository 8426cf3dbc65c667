"""The queue a fleet shares: claims with leases, takeover of a dead machine's claim, asked-for counts,
and claiming sweeps in several processes into SQLite and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from subprocess import PIPE

import pytest

from autotune.core.asked import Asked
from autotune.core.errors import AutotuneError, AutotuneWarning
from autotune.core.problem import Problem
from autotune.store import Store, open_store
from autotune.store.models import QUEUE, utcnow
from autotune.tune import fleet
from tests import postgres
from tests.fakes import run_cli
from tests.fleet_sweeper import PROBLEMS

GPU = "Fleet GPU"
A, B, C = (Problem("gemv", "float16", 1024 * i, 4096) for i in (1, 2, 3))
LONG = timedelta(minutes=5)
SWEEPER = Path(__file__).with_name("fleet_sweeper.py")


def _states(store: Store) -> dict[Problem, str]:
    return {row.problem: row.state for row in store.queue_rows(GPU)}


def test_enqueue_is_idempotent_and_keeps_the_order_given(store: Store) -> None:
    first = store.enqueue(GPU, [B, A])
    assert store.enqueue(GPU, [A, B, C])[:2] == [first[1], first[0]]
    assert _states(store) == {A: QUEUE.PENDING, B: QUEUE.PENDING, C: QUEUE.PENDING}
    among = store.enqueue(GPU, [C, A, B])
    claimed = [store.claim_next(GPU, LONG, among=among).claim for _ in range(3)]
    assert [c.problem for c in claimed if c] == [C, A, B]


def test_a_live_claim_of_another_process_is_left_to_it(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as one, open_store(str(db_path), import_shipped=False) as two:
        among = one.enqueue(GPU, [A])
        assert one.claim_next(GPU, LONG, among=among).claim is not None
        look = two.claim_next(GPU, LONG, among=among)
        assert look.claim is None and look.held_by_others == 1


def test_a_claim_whose_lease_ran_out_is_taken_over(db_path: Path) -> None:
    with open_store(str(db_path), import_shipped=False) as one, open_store(str(db_path), import_shipped=False) as two:
        among = one.enqueue(GPU, [A])
        mine = one.claim_next(GPU, timedelta(milliseconds=50), among=among).claim
        assert mine is not None
        time.sleep(0.1)
        theirs = two.claim_next(GPU, LONG, among=among).claim
        assert theirs is not None and theirs.problem == A
        # The first machine learns it lost the claim, and its release leaves the row to the second.
        assert not one.renew_claim(mine, LONG)
        assert not one.release_claim(mine, done=True)
        assert [(r.state, r.claims) for r in two.queue_rows(GPU)] == [(QUEUE.CLAIMED, 2)]
        assert two.release_claim(theirs, done=True)
        assert _states(two) == {A: QUEUE.DONE}


def test_the_claim_of_a_closed_store_is_taken_over_at_once(db_path: Path) -> None:
    one = open_store(str(db_path), import_shipped=False)
    among = one.enqueue(GPU, [A])
    assert one.claim_next(GPU, LONG, among=among).claim is not None
    one.close()  # on this host a gone owner is provably gone: no need to wait for its lease
    with open_store(str(db_path), import_shipped=False) as two:
        assert two.claim_next(GPU, LONG, among=among).claim is not None


def test_a_killed_process_not_yet_reaped_is_gone() -> None:
    """A SIGKILLed process whose parent has not waited for it yet is a zombie: its claims are free
    at once (a GPU process of `sweep --devices` stays one until the others end)."""
    from autotune.store import owner as owners

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = owners.Owner(owners.this_process().host, child.pid, owners._start_time(child.pid) or "-", "t")
        assert not owners.gone_here(alive.text())
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (owners._stat_fields(child.pid) or ["Z"])[0] != "Z":  # not reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert owners.gone_here(alive.text())
    finally:
        child.kill()
        child.wait()


def test_an_interrupted_problem_goes_back_to_pending(store: Store) -> None:
    among = store.enqueue(GPU, [A])
    claim = store.claim_next(GPU, LONG, among=among).claim
    assert claim is not None
    with pytest.raises(KeyboardInterrupt), fleet.holding(store, claim, LONG):
        raise KeyboardInterrupt
    assert _states(store) == {A: QUEUE.PENDING}


def test_the_heartbeat_keeps_a_claim_past_its_first_lease(db_path: Path) -> None:
    lease = timedelta(milliseconds=300)
    with open_store(str(db_path), import_shipped=False) as one, open_store(str(db_path), import_shipped=False) as two:
        among = one.enqueue(GPU, [A])
        claim = one.claim_next(GPU, lease, among=among).claim
        assert claim is not None
        with fleet.holding(one, claim, lease) as beat:
            time.sleep(1.0)  # three leases long
            assert two.claim_next(GPU, LONG, among=among).claim is None
        assert not beat.lost
        assert _states(two) == {A: QUEUE.DONE}


def test_a_list_sweep_skips_what_another_machine_finished_meanwhile(store: Store, db_path: Path) -> None:
    among = store.enqueue(GPU, [A, B])
    since = utcnow()
    with open_store(str(db_path), import_shipped=False) as other:
        claim = other.claim_next(GPU, LONG, among=among).claim
        assert claim is not None and claim.problem == A
        other.release_claim(claim, done=True)
    # B is next; A was done by the other machine during this sweep and is not tuned again.
    assert [c.problem for c in _all_claims(store, among, since)] == [B]
    # A later sweep claims both again: its budget, counting stored trials, decides what is left.
    assert [c.problem for c in _all_claims(store, among, utcnow())] == [A, B]


def _all_claims(store: Store, among: list[int], since: object) -> list[object]:
    found = []
    while (claim := store.claim_next(GPU, LONG, among=among, since=since).claim) is not None:  # type: ignore[arg-type]
        store.release_claim(claim, done=True)
        found.append(claim)
    return found


def test_asked_counts_add_up_and_order_the_pending_queue(store: Store) -> None:
    now = utcnow()
    store.note_asked(GPU, {A: Asked(2, now, now), B: Asked(5, now, now)})
    store.note_asked(GPU, {A: Asked(4, now - timedelta(hours=1), now + timedelta(seconds=1))})
    rows = {row.problem: row for row in store.queue_rows(GPU)}
    assert rows[A].asked == 6 and rows[B].asked == 5
    first = store.claim_next(GPU, LONG).claim
    assert first is not None and first.problem == A
    store.release_claim(first, done=True)
    # Asked for again after it was tuned: its tuning does not answer it, so it is pending again.
    store.note_asked(GPU, {A: Asked(1, now, now)})
    assert _states(store)[A] == QUEUE.PENDING


def test_a_damaged_queue_row_is_passed_over_and_the_others_listed_and_claimed(store: Store, db_path: Path) -> None:
    """SQLite keeps any text in a date column: such a row is listed with its date unknown and claimed in
    its turn; one naming no problem a records file could hold is passed over with a warning, since it
    is never claimed. Before, the listing and every claim failed on them."""
    import sqlite3

    now = utcnow()
    store.note_asked(GPU, {A: Asked(1, now, now), B: Asked(2, now, now), C: Asked(3, now, now)})
    with sqlite3.connect(db_path) as connection:
        connection.execute(
            "UPDATE queue SET queued_at = 'not a date', first_asked = 'nope' WHERE problem_id = "
            "(SELECT id FROM problems WHERE m = ?)",
            (B.m,),
        )
        connection.execute(
            "UPDATE queue SET lease_until = 'garbage' WHERE problem_id = (SELECT id FROM problems WHERE m = ?)", (A.m,)
        )
        connection.execute("UPDATE problems SET op = 'zzgemv' WHERE m = ?", (C.m,))
    connection.close()
    with pytest.warns(AutotuneWarning, match="1 queue row name no problem a records file could hold"):
        rows = {row.problem: row for row in store.queue_rows(GPU)}
    assert set(rows) == {A, B} and rows[B].queued_at is None and rows[A].lease_until is None
    claimed = [store.claim_next(GPU, LONG).claim for _ in range(3)]
    assert [c.problem if c else None for c in claimed] == [B, A, None]  # the most asked first


def test_lease_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fleet.LEASE_ENV, "7.5")
    assert fleet.lease() == timedelta(seconds=7.5)
    assert fleet.lease(3) == timedelta(seconds=3)
    assert fleet.lease(fleet.MIN_LEASE_S) == timedelta(seconds=1)
    assert fleet.lease(fleet.MAX_LEASE_S) == timedelta(days=7)
    monkeypatch.delenv(fleet.LEASE_ENV)
    assert fleet.lease() == timedelta(seconds=fleet.DEFAULT_LEASE_S)


# Under a second the heartbeat cannot renew in time (1e-9 s was timedelta(0): every machine tuned
# every problem); inf and 1e20 overflowed timedelta in a traceback.
BAD_LEASES = ["1e-9", "0", "-1", "nan", "inf", "1e20", "abc"]


@pytest.mark.parametrize("text", BAD_LEASES)
def test_a_lease_out_of_range_is_refused_in_one_line(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fleet.LEASE_ENV, text)
    with pytest.raises(AutotuneError, match=r"from 1 to 604800 \(a week\), got AUTOTUNE_LEASE_S=") as caught:
        fleet.lease()
    assert "\n" not in str(caught.value)
    if text != "abc":
        with pytest.raises(AutotuneError, match=r"from 1 to 604800 \(a week\), got --lease "):
            fleet.lease(float(text))
    with pytest.raises(AutotuneError, match="from 1 to 604800"):
        fleet.lease(text)  # type: ignore[arg-type]  # the API given a string


@pytest.mark.parametrize("text", BAD_LEASES)
@pytest.mark.parametrize("where", ["--lease", "AUTOTUNE_LEASE_S", "--devices"])
def test_the_cli_refuses_a_bad_lease_in_one_line(
    text: str, where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sweep", "--op", "hgemv", "--m", "64", "--n", "64"]
    if where == "AUTOTUNE_LEASE_S":
        monkeypatch.setenv(fleet.LEASE_ENV, text)
    else:
        args += ["--lease", text] + (["--devices", "all"] if where == "--devices" else [])
    code, _, err = run_cli(monkeypatch, capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "lease" in lines[0]  # not PyCUDA's absence, nor the GPUs': the lease is refused first


# --- a fleet of processes ------------------------------------------------------------------------

TRIALS = 10
# A dead machine's claim is taken over at once (same host), so a longer lease costs the test no time
# and keeps a heartbeat delayed on a busy two-core machine from losing a live claim.
LEASE_S = 6.0


# Each machine in a pid namespace of its own, as containers with host networking: one host name,
# pids that mean nothing to the others. Killing `unshare` kills the sweep inside with it.
OWN_PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _can_unshare_pid() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*OWN_PID_NAMESPACE, "true"], capture_output=True, check=False).returncode == 0


def _start(url: str, journal: Path, mode: str, namespaces: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SWEEPER.parents[1])}
    command = [sys.executable, str(SWEEPER), url, str(journal), str(LEASE_S), str(TRIALS), mode]
    if namespaces:
        command = [*OWN_PID_NAMESPACE, *command]
    return subprocess.Popen(command, env=env, stderr=journal.with_suffix(".err").open("wb"))


def _run_fleet(url: str, folder: Path, mode: str, namespaces: bool = False) -> tuple[list[str], int]:
    """Three claiming sweeps; one is killed once it has finished a few trials. Returns every
    journal line of all three and the victim's exit code."""
    journals = [folder / f"machine{i}.log" for i in range(3)]
    for journal in journals:
        journal.touch()
    machines = [_start(url, journal, mode, namespaces) for journal in journals]
    deadline = time.monotonic() + 60
    while len(journals[0].read_text().splitlines()) < 3:
        assert time.monotonic() < deadline, "the first machine never measured"
        assert machines[0].poll() is None, journals[0].with_suffix(".err").read_text()
        time.sleep(0.02)
    machines[0].send_signal(signal.SIGKILL)
    for machine, journal in zip(machines[1:], journals[1:], strict=True):
        assert machine.wait(timeout=120) == 0, journal.with_suffix(".err").read_text()
    victim = machines[0].wait()
    return [line for journal in journals for line in journal.read_text().splitlines()], victim


def _check_every_problem_tuned_once(url: str, lines: list[str]) -> None:
    finished = Counter(line for line in lines if not line.startswith("done "))
    assert finished and max(finished.values()) == 1, "a config was measured twice"
    with open_store(url, import_shipped=False) as store:
        rows = store.queue_rows(GPU)
        assert {row.problem for row in rows} == set(PROBLEMS)
        assert all(row.state == QUEUE.DONE for row in rows)
        assert any(row.claims >= 2 for row in rows), "the killed machine's claim was never taken over"
        for summary in store.problems(GPU):
            assert summary.trials == TRIALS, f"{summary.problem}: {summary.trials} trials"
    done = Counter(line for line in lines if line.startswith("done "))
    # Every problem finished by one surviving machine (the victim may have finished some before).
    assert len(done) == len(PROBLEMS) and max(done.values()) == 1


@pytest.mark.stress
@pytest.mark.parametrize("mode", ["list", "pending"])
def test_three_sqlite_sweeps_one_killed_tune_every_problem_once(tmp_path: Path, mode: str) -> None:
    url = str(tmp_path / "fleet.db")
    with open_store(url, import_shipped=False) as store:
        if mode == "pending":
            now = utcnow()
            store.note_asked(GPU, {p: Asked(i + 1, now, now) for i, p in enumerate(PROBLEMS)})
    lines, victim = _run_fleet(url, tmp_path, mode)
    assert victim == -signal.SIGKILL
    _check_every_problem_tuned_once(url, lines)


@pytest.mark.stress
@pytest.mark.skipif(not _can_unshare_pid(), reason="no permission to make a pid namespace (unshare -p)")
def test_three_sweeps_in_their_own_pid_namespaces_tune_every_problem_once(tmp_path: Path) -> None:
    # Judged by pids of another namespace, each sweep took the others for dead: all tuned everything.
    url = str(tmp_path / "fleet.db")
    open_store(url, import_shipped=False).close()
    began = time.monotonic()
    lines, victim = _run_fleet(url, tmp_path, "list", namespaces=True)
    assert victim == -signal.SIGKILL
    _check_every_problem_tuned_once(url, lines)
    # No one here can see the killed sweep's pid: its claim was taken over when its lease ran out.
    assert time.monotonic() - began > LEASE_S


@pytest.fixture(scope="module")
def pg() -> Iterator[postgres.Server]:
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    try:
        with postgres.server(folder) as server:
            yield server
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.stress
def test_three_postgresql_sweeps_one_killed_tune_every_problem_once(pg: postgres.Server, tmp_path: Path) -> None:
    url = pg.new_database()
    open_store(url, import_shipped=False).close()  # migrations on the real server
    lines, victim = _run_fleet(url, tmp_path, "list")
    assert victim == -signal.SIGKILL
    _check_every_problem_tuned_once(url, lines)


@pytest.mark.stress
def test_the_store_stress_check_passes_on_postgresql(pg: postgres.Server, tmp_path: Path) -> None:
    """scripts/stress_store.py on the real server: two sweeps on overlapping problems, a reader
    (through the store and the command line), an importer and a fleet of claiming sweeps, writers
    SIGKILLed: nothing lost, mixed or duplicated, nothing measured twice, and no process failed."""
    out = tmp_path / "stress.json"
    script = Path(__file__).parents[1] / "scripts" / "stress_store.py"
    command = [sys.executable, str(script), "--url", pg.new_database(), "--seconds", "8", "--writers", "2"]
    done = subprocess.run([*command, "--readers", "1", "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["database"] == "postgresql" and report["trials_written"] > 0 and report["kills"] >= 1
    assert {key: report[key] for key in ("lost", "mixed", "duplicates", "errors")} == dict.fromkeys(
        ("lost", "mixed", "duplicates", "errors"), 0
    )
    fleet_ = report["fleet"]  # the claiming sweepers beside them, one killed
    assert fleet_["killed"] == 1 and fleet_["problems_done"] == fleet_["problems"] == len(PROBLEMS)
    assert fleet_["measured_twice"] == fleet_["tuned_twice"] == fleet_["problems_short_of_trials"] == 0


@pytest.mark.stress
def test_the_password_reaches_no_output_no_log_and_no_report(pg: postgres.Server, tmp_path: Path) -> None:
    url = pg.new_database()
    password = url.split("@")[0].rsplit(":", 1)[1]
    with open_store(url) as store:  # the shipped records too, so every command has something to show
        now = utcnow()
        store.note_asked(GPU, {A: Asked(3, now, now)})
    page = tmp_path / "report.html"
    wrong = url.replace(password, "not-the-" + password)
    shape = ["--op", "hgemv", "--m", "4096", "--n", "8192"]
    runs = [
        ["-vv", "list", "--db", url],
        ["-vv", "best", *shape, "--gpu", "NVIDIA H200", "--db", url],
        ["-vv", "show", *shape, "--gpu", "NVIDIA H200", "--db", url],
        ["queue", "--db", url],
        ["gpus", "--db", url],
        ["doctor", "--db", url],
        ["-vv", "report", "-o", str(page), "--db", url],
    ]
    refused = [
        ["list", "--db", wrong],  # the server refuses the password
        ["list", "--db", url.replace(url.split("@")[1].split("/")[0], "127.0.0.1:1")],  # nothing listens
    ]
    # All at once: each is a fresh interpreter, and they wait on nothing but the server.
    started = [
        (args, subprocess.Popen([sys.executable, "-m", "autotune", *args], stdout=PIPE, stderr=PIPE, text=True))
        for args in runs + refused
    ]
    for args, process in started:
        out, err = process.communicate(timeout=120)
        done = subprocess.CompletedProcess(args, process.returncode, out, err)
        said = done.stdout + done.stderr
        assert "Traceback" not in said and password not in said, args
        if args in refused:  # one line naming the database, its password masked
            assert done.returncode != 0 and "autotune:***@127.0.0.1" in said and len(done.stderr.splitlines()) == 1
        else:
            assert done.returncode == 0, said
    assert password not in page.read_text() and "autotune:***@" in page.read_text()


# --- one sweep over several GPUs of a machine (autotune/tune/devices.py) ---------------------------


def test_devices_are_all_or_indices_of_this_machines_gpus() -> None:
    from autotune.core.errors import AutotuneError
    from autotune.tune.devices import parse_devices

    assert parse_devices("all", 2) == [0, 1] and parse_devices("1, 0", 2) == [1, 0]
    for text, count, words in (
        ("all", 0, "has none"),
        ("0,2", 2, "GPUs 0 to 1, not 2"),
        ("0,0", 2, "twice"),
        ("first", 2, "indices"),
        (",", 2, "no GPU"),
    ):
        with pytest.raises(AutotuneError, match=words):
            parse_devices(text, count)


def _device_lines(folder: Path) -> list[str]:
    return [line for path in sorted(folder.glob("gpu*.log")) for line in path.read_text().splitlines()]


@pytest.mark.stress
def test_a_killed_gpu_process_leaves_its_claim_to_the_other_gpu(tmp_path: Path) -> None:
    from autotune.tune.devices import run_on_devices
    from tests.fleet_sweeper import device_job

    url = str(tmp_path / "two.db")
    open_store(url, import_shipped=False).close()
    results = run_on_devices([0, 1], device_job, url=url, folder=str(tmp_path), models=[GPU, GPU], die_on=0)
    assert results[0].report is None and results[0].error == f"its process ended with code {-signal.SIGKILL}"
    assert results[1].error is None and results[1].report is not None
    _check_every_problem_tuned_once(url, _device_lines(tmp_path))


@pytest.mark.stress
def test_gpus_of_two_models_each_tune_every_problem_for_their_model(tmp_path: Path) -> None:
    from autotune.tune.devices import run_on_devices
    from tests.fleet_sweeper import device_job

    url = str(tmp_path / "two.db")
    models = ["Model A", "Model B"]
    open_store(url, import_shipped=False).close()
    results = run_on_devices([0, 1], device_job, url=url, folder=str(tmp_path), models=models, die_on=None)
    assert [r.error for r in results] == [None, None]
    assert [{item.problem for item in r.report.problems} for r in results] == [set(PROBLEMS)] * 2
    lines = _device_lines(tmp_path)
    finished = Counter(line for line in lines if not line.startswith("done "))
    assert max(finished.values()) == 1
    with open_store(url, import_shipped=False) as store:
        for model in models:
            assert {(r.problem, r.state) for r in store.queue_rows(model)} == {(p, QUEUE.DONE) for p in PROBLEMS}
