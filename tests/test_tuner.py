"""The tuner with test doubles for the GPU worker and nvcc: what reaches the store, resume, quarantine, kills."""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from autotune.core.fingerprint import GpuInfo, toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.measure.worker.client import SetupLost
from autotune.ops import gemv, source_hash
from autotune.store import Provenance, Store, TrialRow, open_store
from autotune.tune.search import Budget
from autotune.tune.tuner import ProblemReport, Tuner, stale_problems
from tests.fakes import InstantPool, modelled_time_us

REPO = Path(__file__).resolve().parents[1]
H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
NEARBY = Problem("gemv", "float16", 4096, 4096)
# Planted failures by lanes: 1 kills the worker, 4 hangs, 8 computes garbage, 16 fails to launch.
PLANTED = {1: Status.CRASHED, 4: Status.TIMEOUT, 8: Status.WRONG_RESULT, 16: Status.LAUNCH_ERROR}


@pytest.fixture(autouse=True)
def no_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The orchestration tests count and order trials; GEMV's fixed seed configs are tested alone."""
    monkeypatch.setattr(gemv.OP, "seed_configs", lambda problem: [])


class FakeWorker:
    """The Worker's interface: OK at the modelled time, or the failure planted for the config's lanes."""

    def __init__(self, planted: dict[int, Status] | None = None) -> None:
        self.planted = planted or {}
        self.measured: list[Config] = []
        self.returned: Counter[Status] = Counter()
        self.setups: list[Problem] = []
        self.fresh_setups = 0  # setups asked to allocate new buffers before freeing the old
        # Set where a subclass plants a crash after which the fresh worker fails its setup: ready() and
        # a measure() that starts with it raise SetupLost, as the real Worker's do.
        self.dead = False

    def setup(self, problem: Problem, seed: int, fresh_memory: bool = False) -> dict[str, object]:
        self.setups.append(problem)
        self.fresh_setups += fresh_memory
        return {}

    def ready(self) -> None:
        if self.dead:
            raise SetupLost("planted: the fresh worker died in setup")

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        assert cubin is not None and kernel.startswith("gemv_")
        self.measured.append(dict(config))
        status = self.planted.get(config["lanes"], Status.OK)
        self.returned[status] += 1
        if status is Status.OK:
            return Outcome(Status.OK, time_us=modelled_time_us(config), times_us=[modelled_time_us(config)])
        return Outcome(status, f"planted {status.value}")


def tune(
    store: Store,
    worker: FakeWorker,
    trials: int,
    problem: Problem = SHAPE,
    *,
    seed: int | None = 1,
    pool: InstantPool | None = None,
    sampler: str = "random",
    confirm: bool = False,
    first: Sequence[Config] = (),
) -> ProblemReport:
    tuner = Tuner(
        store,
        worker,
        pool or InstantPool(),
        H200,  # type: ignore[arg-type]
        sampler=sampler,
        budget=Budget(trials),
        seed=seed,
        confirm=confirm,  # most tests count measurements: confirmation rounds are tested on their own
    )
    return tuner.tune(problem, first=first)


def rows(store: Store, problem: Problem = SHAPE) -> list[TrialRow]:
    pid = store.problem_id(problem, H200.name, create=False)
    return [] if pid is None else store.trials(pid)


def by_status(trials: list[TrialRow]) -> Counter[Status]:
    return Counter(t.status for t in trials)


def final(trials: list[TrialRow]) -> list[TrialRow]:
    """The trials that count towards a budget: finished and not ruled out before compiling."""
    return [t for t in trials if t.status not in (Status.RUNNING, Status.INVALID)]


def test_every_trial_is_stored_with_its_status(store: Store) -> None:
    worker = FakeWorker(PLANTED)
    report = tune(store, worker, 60)
    stored = rows(store)
    counts = by_status(stored)
    assert counts[Status.RUNNING] == 0
    assert 60 == len(final(stored)) == report.result.measured
    # A config that killed or hung the worker is tried once more, then never again: one row each,
    # and the budget counts the row, not the attempts.
    times_measured = Counter(config_key(c) for c in worker.measured)
    for trial in final(stored):
        retried = trial.status in (Status.CRASHED, Status.TIMEOUT)
        assert times_measured[trial.config_key] == (2 if retried else 1)
    assert len(times_measured) == 60
    for status in (Status.OK, Status.WRONG_RESULT, Status.LAUNCH_ERROR):
        assert counts[status] == worker.returned[status] == report.result.statuses.get(status.value, 0)
    assert counts[Status.OK] > 0 and counts[Status.CRASHED] > 0  # the seed plants both kinds
    for trial in stored:
        if trial.status in PLANTED.values():
            assert PLANTED[trial.config["lanes"]] is trial.status and trial.message == f"planted {trial.status.value}"
        if trial.status is Status.INVALID:
            assert gemv.OP.space(SHAPE).check(trial.config) == trial.message
    assert len({t.config_key for t in stored}) == len(stored)
    assert {t.source_hash for t in stored} == {source_hash(SHAPE)}
    assert worker.setups == [SHAPE]


# Failures that end a trial at once (no retry), so every measurement is one stored row.
FINAL_FAILURES = {8: Status.WRONG_RESULT, 16: Status.LAUNCH_ERROR}


def test_a_larger_budget_measures_only_the_difference(store: Store) -> None:
    first = FakeWorker(FINAL_FAILURES)
    assert tune(store, first, 20).result.measured == 20
    before = {t.config_key for t in final(rows(store))}
    second = FakeWorker(FINAL_FAILURES)
    report = tune(store, second, 35, seed=2)
    assert (report.result.reused, report.result.measured) == (20, 15)
    assert len(second.measured) == 15
    assert not {config_key(c) for c in second.measured} & before
    assert len(final(rows(store))) == 35
    third = FakeWorker(FINAL_FAILURES)
    again = tune(store, third, 35, seed=3)
    assert third.measured == [] and third.setups == [] and again.result.stopped == "already tuned"


def test_crashing_configs_are_never_measured_a_third_time(db_path: Path) -> None:
    measured: Counter[str] = Counter()
    for run, trials in enumerate((20, 40, 60, 60)):
        worker = FakeWorker({1: Status.CRASHED})
        with open_store(str(db_path), import_shipped=False) as store:
            tune(store, worker, trials, seed=run)
        measured.update(config_key(c) for c in worker.measured)
    crashing = {key: n for key, n in measured.items() if '"lanes":1,' in key}
    assert crashing, "the seeds never tried a crashing config"
    assert max(crashing.values()) <= 2
    with open_store(str(db_path), import_shipped=False) as store:
        assert by_status(rows(store))[Status.RUNNING] == 0


def test_twice_crashed_config_is_quarantined(store: Store) -> None:
    tune(store, FakeWorker(), 15, NEARBY)
    best = store.best(H200.name, NEARBY, source_hash(SHAPE))
    assert best is not None and gemv.OP.space(SHAPE).check(best.config) is None
    # The warm start would measure it first; two earlier worker deaths on this problem forbid it.
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    for _ in range(2):
        store.note_crash(pid, config_key(best.config), source_hash(SHAPE))
    for trials in (10, 20):
        worker = FakeWorker()
        report = tune(store, worker, trials, seed=trials)
        assert config_key(best.config) not in {config_key(c) for c in worker.measured}
        assert len(worker.measured) == report.result.measured == 10
        assert report.result.statuses.get("quarantined") == 1


class FlakyWorker(FakeWorker):
    """Kills itself on the first measurement of one config only: a transient crash."""

    def __init__(self, flaky: Config, crashed: set[str]) -> None:
        super().__init__()
        self._flaky, self._crashed = config_key(flaky), crashed

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        if config_key(config) == self._flaky and self._flaky not in self._crashed:
            self._crashed.add(self._flaky)
            self.measured.append(dict(config))
            return Outcome(Status.CRASHED, "worker died (exit -11)")
        return super().measure(cubin, kernel, config, timeout)


class ReplayFailsWorker(FakeWorker):
    """One config kills the worker; the fresh one cannot be given the problem again (as the real
    Worker, measure on such a worker raises SetupLost too)."""

    def __init__(self) -> None:
        super().__init__({1: Status.CRASHED})

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        self.ready()
        outcome = super().measure(cubin, kernel, config, timeout)
        self.dead = outcome.status is Status.CRASHED
        return outcome


def test_a_setup_that_fails_on_a_fresh_worker_is_charged_to_no_config(store: Store) -> None:
    killer = gemv.OP.space(SHAPE).fit(dict(gemv.DEFAULT_CONFIG, lanes=1), pinned={"lanes": 1})
    assert killer is not None
    worker = ReplayFailsWorker()
    report = tune(store, worker, 20, first=[killer])
    assert report.result.stopped.startswith("setup failed") and worker.measured == [killer]
    # The killer has its crash; the configs that were next never ran: no row, no crash noted.
    assert [(t.config, t.status) for t in final(rows(store))] == [(killer, Status.CRASHED)]
    assert by_status(rows(store))[Status.RUNNING] == 0
    problem_id = store.problem_id(SHAPE, H200.name, create=False)
    assert problem_id is not None
    assert store.crash_count(problem_id, config_key(killer), source_hash(SHAPE)) == 1
    assert sum(store.crash_count(problem_id, t.config_key, source_hash(SHAPE)) for t in rows(store)) == 1


def test_a_config_that_crashed_once_is_retried_once(store: Store) -> None:
    tune(store, FakeWorker(), 15, NEARBY)
    best = store.best(H200.name, NEARBY, source_hash(SHAPE))
    assert best is not None
    crashed: set[str] = set()
    first = FlakyWorker(best.config, crashed)
    tune(store, first, 5)
    # Warm start measures it first; it dies, gets its second chance in the same run, and is fine.
    assert first.measured[0] == best.config and first.measured.count(best.config) == 2 and crashed
    [row] = [t for t in rows(store) if t.config == best.config]
    assert row.status is Status.OK


def test_a_crash_left_without_its_retry_is_retried_next_run(store: Store) -> None:
    tune(store, FakeWorker(), 15, NEARBY)
    best = store.best(H200.name, NEARBY, source_hash(SHAPE))
    assert best is not None
    # A sweep killed right after this config killed its worker: one crash stored, no retry yet.
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    gpu_id = store.upsert_gpu(H200)
    store.note_crash(pid, config_key(best.config), source_hash(SHAPE))
    store.record_trial(
        Provenance(pid, gpu_id, source_hash(SHAPE), toolchain(), H200.driver, H200.cuda),
        best.config,
        Outcome(Status.CRASHED, "worker died (exit -9)"),
    )
    crashed = {config_key(best.config)}  # the flaky worker will not crash on it again
    second = FlakyWorker(best.config, crashed)
    tune(store, second, 3, seed=2)
    assert second.measured[0] == best.config
    [row] = [t for t in rows(store) if t.config == best.config]
    assert row.status is Status.OK


def broken_kernels(problem: Problem, policy: int) -> frozenset[str]:
    """The kernel names of every compiled-parameter combination with this cache policy."""
    space = gemv.OP.space(problem)
    choices = space.choices()
    compiled = [p.name for p in space.params if p.compiled and p.name != "policy"]
    names = set()
    for values in itertools.product(*(choices[name] for name in compiled)):
        names.add(gemv.OP.kernel_name(problem, {**dict(zip(compiled, values, strict=True)), "policy": policy}))
    return frozenset(names)


def test_compile_errors_are_stored_with_the_nvcc_message(store: Store) -> None:
    worker = FakeWorker()
    pool = InstantPool(broken=broken_kernels(SHAPE, policy=2))
    report = tune(store, worker, 40, pool=pool)
    stored = rows(store)
    errors = [t for t in stored if t.status is Status.COMPILE_ERROR]
    assert errors and all(t.config["policy"] == 2 and t.message == "nvcc: error" for t in errors)
    assert all(c["policy"] != 2 for c in worker.measured)
    assert len(errors) + len(worker.measured) == 40 == len(final(stored))
    assert report.result.statuses["compile_error"] == len(errors)


def test_the_reported_best_is_the_fastest_ok_row(store: Store) -> None:
    for trials, seed in ((25, 1), (50, 2)):
        report = tune(store, FakeWorker(PLANTED), trials, seed=seed)
        fastest = min((t for t in rows(store) if t.status is Status.OK), key=lambda t: t.time_us or 0.0)
        assert (report.result.best_us, report.result.best_config) == (fastest.time_us, fastest.config)
        best = store.best(H200.name, SHAPE, source_hash(SHAPE))
        assert best is not None and (best.config, best.time_us) == (fastest.config, fastest.time_us)


def test_warm_start_measures_the_nearest_best_first(store: Store) -> None:
    tune(store, FakeWorker(), 20, seed=2)  # a random search whose best NEARBY also allows (seed 1's has split=16)
    best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert best is not None and gemv.OP.space(NEARBY).check(best.config) is None
    worker = FakeWorker()
    tune(store, worker, 5, NEARBY, seed=7)
    assert worker.measured[0] == best.config
    assert worker.setups == [NEARBY]


def test_a_shape_nothing_stored_seeds_gets_the_unseen_budget_and_a_seeded_one_the_default(store: Store) -> None:
    budget = Budget(6, unseen=Budget(10))

    def run(problem: Problem) -> int:
        worker = FakeWorker()
        Tuner(store, worker, InstantPool(), H200, sampler="random", budget=budget, seed=3, confirm=False).tune(problem)  # type: ignore[arg-type]
        return len(worker.measured)

    assert run(SHAPE) == 10  # an empty store: a blind search, the larger budget
    assert run(NEARBY) == 6  # SHAPE's best seeds it now
    assert Budget(6).for_problem(seeded=False).trials == 6  # no unseen budget given: one budget for all


# --- a sweep killed with SIGKILL resumes without losing or repeating a trial ----------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    from autotune.core.fingerprint import GpuInfo
    from autotune.core.outcome import Outcome, Status
    from autotune.core.problem import Problem
    from autotune.tune.search import Budget
    from autotune.store import open_store
    from autotune.tune.tuner import Tuner
    from tests.fakes import InstantPool, modelled_time_us

    class SlowWorker:
        def setup(self, problem, seed, fresh_memory=False):
            return {}

        def ready(self):
            pass

        def measure(self, cubin, kernel, config, timeout=60.0):
            time.sleep(0.05)
            return Outcome(Status.OK, time_us=modelled_time_us(config))

    store = open_store(sys.argv[1], import_shipped=False)
    gpu = GpuInfo(*GPU_FIELDS)
    tuner = Tuner(store, SlowWorker(), InstantPool(), gpu, sampler="random", budget=Budget(TRIALS))
    tuner.tune(Problem("gemv", "float16", 4096, 8192))
    store.close()
    """
)
KILL_TRIALS = 40


def ok_rows(db_path: Path) -> dict[int, tuple[str, float]]:
    """id -> (config key, time) of the OK trials, read with plain sqlite3 (no autotune code)."""
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as connection:
            found = connection.execute("SELECT id, config_key, time_us FROM trials WHERE status = 'ok'").fetchall()
        connection.close()
    except sqlite3.OperationalError:  # not created or not migrated yet
        return {}
    return {trial_id: (key, time_us) for trial_id, key, time_us in found}


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, f"the child ended early: {process.communicate()}"
        assert time.monotonic() < deadline, "the child made no progress"
        time.sleep(0.01)


@pytest.mark.stress  # a child process killed mid-sweep and run again: seconds, so with the other kills
def test_a_killed_sweep_resumes_without_loss_or_repeats(tmp_path: Path, db_path: Path) -> None:
    script = tmp_path / "child.py"
    code = CHILD.replace("GPU_FIELDS", repr(tuple(H200.to_dict().values()))).replace("TRIALS", str(KILL_TRIALS))
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(script), str(db_path)]
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(ok_rows(db_path)) >= 8, child, 60)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == -signal.SIGKILL
    before = ok_rows(db_path)
    assert 8 <= len(before) < KILL_TRIALS
    with open_store(str(db_path), import_shipped=False) as store:
        stored = rows(store)
        assert {t.id: (t.config_key, t.time_us) for t in stored if t.status is Status.OK} == before
        assert by_status(stored)[Status.RUNNING] <= 1

    rerun = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    with open_store(str(db_path), import_shipped=False) as store:
        stored = rows(store)
    assert by_status(stored)[Status.RUNNING] == 0
    assert len(final(stored)) == KILL_TRIALS and by_status(stored)[Status.OK] == KILL_TRIALS
    assert len({t.config_key for t in stored}) == len(stored)
    after = {t.id: (t.config_key, t.time_us) for t in stored if t.status is Status.OK}
    assert {trial_id: after.get(trial_id) for trial_id in before} == before


def test_stale_problems_are_those_without_a_fresh_measurement(store: Store) -> None:
    tune(store, FakeWorker(), 6, SHAPE)
    tune(store, FakeWorker(), 6, NEARBY)
    assert stale_problems(store, H200, None, None) == []
    new_driver = dataclasses.replace(H200, driver="999.1")
    assert sorted(stale_problems(store, new_driver, None, None)) == sorted([SHAPE, NEARBY])
    assert stale_problems(store, new_driver, "gemv", "float32") == []


def test_retuning_under_a_new_driver_remeasures_instead_of_reusing(store: Store) -> None:
    tune(store, FakeWorker(), 6, SHAPE)
    new_driver = dataclasses.replace(H200, driver="999.1")
    worker = FakeWorker()
    tuner = Tuner(
        store,
        worker,
        InstantPool(),
        new_driver,
        sampler="random",  # type: ignore[arg-type]
        budget=Budget(6),
        seed=1,
        fresh_only=True,
    )
    report = tuner.tune(SHAPE)
    assert report.result.reused == 0 and report.result.measured == 6
    assert stale_problems(store, new_driver, None, None) == []
    best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert best is not None and best.driver == "999.1"


def test_seed_configs_are_measured_before_the_sampler_picks(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the GEMV seeds back
    seeds = gemv.OP.seed_configs(SHAPE)
    assert len(seeds) >= 4
    worker = FakeWorker()
    tune(store, worker, len(seeds) + 2)
    assert worker.measured[: len(seeds)] == seeds


def test_a_re_sweep_after_a_kernel_edit_measures_the_earlier_best_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    tune(store, FakeWorker(), 12, SHAPE)
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    first, second = [t.config for t in store.trials(pid) if t.status is Status.OK][:2]
    # Under an older kernel the best config lacked one of today's parameters (one at its default value
    # in that config) and had a parameter since dropped.
    default = gemv.OP.default_config(SHAPE)
    added = next(name for name, value in first.items() if value == default[name])
    old = {**first, "retired": 3}
    del old[added]
    store.record_trial(
        Provenance(pid, store.upsert_gpu(H200), "0ld50urce", toolchain(), H200.driver, H200.cuda),
        old,
        Outcome(Status.OK, time_us=0.5, times_us=[0.5]),
    )
    monkeypatch.setattr("autotune.tune.tuner.source_hash", lambda problem: "n3w50urce")  # the kernel changes
    worker = FakeWorker()
    tune(store, worker, 3, SHAPE)
    # The old best restated (the added parameter at its default, `retired` gone), then the next best.
    assert worker.measured[:2] == [first, second]


def test_cublaslt_trials_are_not_an_earlier_kernel_source(store: Store) -> None:
    """A sweep stores cuBLASLt's algorithms under the library's version: a re-sweep after a kernel
    edit must not take them for the problem's earlier best (nor re-time ours against their times)."""
    from autotune.ops.cublas import FAMILY as CUBLAS
    from autotune.ops.cublas.mapping import SOURCE_PREFIX

    vendor_config = CUBLAS.config

    tune(store, FakeWorker(), 4, SHAPE)
    pid = store.problem_id(SHAPE, H200.name)
    assert pid is not None
    where = Provenance(pid, store.upsert_gpu(H200), f"{SOURCE_PREFIX}13.0.0", toolchain(), H200.driver, H200.cuda)
    store.record_trial(where, vendor_config(0), Outcome(Status.OK, time_us=0.5, times_us=[0.5]))
    earlier = store.earlier_best(pid, "n3w50urce", 8)
    assert earlier and not any(row.source_hash.startswith(SOURCE_PREFIX) for row in earlier)
    assert all("cublas_algo" not in row.config for row in earlier)


def test_a_re_sweep_measures_the_leaders_other_prefetch_choices_first(store: Store) -> None:
    before = FakeWorker()
    tune(store, before, 12, SHAPE, seed=2)
    best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert best is not None
    expected = [v for v in gemv.OP.leader_variants(SHAPE, best.config) if v not in before.measured]
    assert len(expected) >= 2
    worker = FakeWorker()
    tune(store, worker, 12 + len(expected), SHAPE, seed=3)
    assert worker.measured == expected


def test_warm_start_borrows_the_same_shape_in_another_dtype(store: Store) -> None:
    tune(store, FakeWorker(), 12, SHAPE)
    half = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert half is not None
    worker = FakeWorker()
    single = Problem("gemv", "float32", SHAPE.m, SHAPE.n)
    tune(store, worker, 3, single)
    expected = {**half.config, "vec": max(1, half.config["vec"] // 2)}  # the same 16-byte loads
    assert expected in worker.measured[:2]


def test_warm_start_borrows_another_dtypes_estimate_where_that_dtype_never_tuned_the_shape(store: Store) -> None:
    """float16 holds no best for SHAPE, only tuned shapes an octave either side: bfloat16's sweep of
    SHAPE measures first the selector's estimate for float16 SHAPE (the cost model's pick, B), then the
    nearest float16 shape's leader (A), both before the sampler's picks."""
    from autotune.select.choose import ESTIMATE, Selector
    from tests.fakes import record

    a = {**gemv.DEFAULT_CONFIG, "block": 128, "lanes": 128, "vec": 8, "rows": 2, "policy": 1}
    b = {**gemv.DEFAULT_CONFIG, "block": 256, "lanes": 64, "vec": 8, "rows": 2, "policy": 1}
    wide = Problem("gemv", "float16", SHAPE.m, 2 * SHAPE.n)
    # A leads at the nearest shape (NEARBY sorts first of the two), B gains more than it loses by the far one.
    for problem, times in ((NEARBY, {10.0: a, 10.2: b}), (wide, {21.0: a, 20.0: b})):
        for time_us, config in times.items():
            record(store, problem, config, Outcome(Status.OK, time_us=time_us, times_us=[time_us]), H200)
    assert store.best(H200.name, SHAPE, source_hash(SHAPE)) is None
    estimate = Selector(store).choose(SHAPE, H200.name, vendor=False)
    assert (estimate.source, estimate.config) == (ESTIMATE, b)
    worker = FakeWorker()
    tune(store, worker, 4, dataclasses.replace(SHAPE, dtype="bfloat16"))
    assert worker.measured[:2] == [b, a]  # 16-bit to 16-bit: the same vec


def test_an_int4_warm_start_borrows_the_other_activation_dtypes_best(store: Store) -> None:
    """bfloat16's int4 problem reads bfloat16 scales: its sibling is float16's with float16 scales."""
    from autotune import ops
    from autotune.tune.tuner import _neighbour_configs
    from tests.fakes import record

    half = ops.make_problem("qgemm", "float16", 1, 4096, 4096)
    config = ops.get("qgemm").seed_configs(half)[1]
    record(store, half, config, Outcome(Status.OK, time_us=8.0, times_us=[8.0]), H200)
    brain = ops.make_problem("qgemm", "bfloat16", 1, 4096, 4096)
    assert brain.inputs == ("bfloat16", "int4", "bfloat16", "uint8")
    carried = {k: v for k, v in config.items() if k not in ("rpw", "chain")}  # the CUDA-core GEMV's: float16 alone
    assert _neighbour_configs(store, H200.name, brain, source_hash(brain)) == [carried]


def test_an_fp8_warm_start_borrows_the_int8_best_of_the_same_shape(store: Store) -> None:
    """An fp8 weight's sweep starts from int8's stored best of the same shape (the same kernels on the
    same bytes), through the selector's answer for bfloat16's fp8 problem (q8gemm's estimate_from)."""
    from autotune import ops
    from autotune.tune.tuner import _neighbour_configs
    from tests.fakes import record

    int8 = ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="int8")
    config = ops.get("q8gemm").seed_configs(int8)[-1]
    record(store, int8, config, Outcome(Status.OK, time_us=7.0, times_us=[7.0]), H200)
    fp8 = ops.make_problem("q8gemm", "float16", 1, 4096, 4096, variant="fp8")
    assert _neighbour_configs(store, H200.name, fp8, source_hash(fp8)) == [config]


def test_a_tuned_fp8_problem_still_borrows_int8s_newer_best(store: Store) -> None:
    """fp8 tuned already, int8 later tuned to another config: a re-sweep of fp8 measures int8's best
    (through the other dtype alone it met only fp8's own best, the selector's answer for bfloat16's
    fp8 problem)."""
    from autotune import ops
    from autotune.tune.tuner import _neighbour_configs
    from tests.fakes import record

    q8 = ops.get("q8gemm")
    int8 = ops.make_problem("q8gemm", "float16", 1, 4096, 14336, variant="int8")
    fp8 = ops.make_problem("q8gemm", "float16", 1, 4096, 14336, variant="fp8")
    own, newer = q8.seed_configs(fp8)[-1], q8.seed_configs(int8)[0]
    assert own != newer
    record(store, fp8, own, Outcome(Status.OK, time_us=16.0, times_us=[16.0]), H200)
    record(store, int8, newer, Outcome(Status.OK, time_us=15.3, times_us=[15.3]), H200)
    assert newer in _neighbour_configs(store, H200.name, fp8, source_hash(fp8))


# --- confirmation: the leaders measured again on fresh buffers --------------------------------------

# The modelled optimum, one 2% slower (inside the confirmation window) and one 5% slower (outside).
LEADER: Config = {**gemv.DEFAULT_CONFIG, "block": 256, "lanes": 32, "vec": 8, "unroll": 2, "policy": 0}
RUNNER_UP: Config = {**LEADER, "policy": 1}
THIRD: Config = {**LEADER, "rows": 2}


class PlacementWorker(FakeWorker):
    """The leader is 5% slower (or, with `fails`, wrong) on every set of buffers after the first."""

    def __init__(self, fails: bool = False) -> None:
        super().__init__()
        self._fails = fails

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        if config_key(config) != config_key(LEADER) or not self.fresh_setups:
            return super().measure(cubin, kernel, config, timeout)
        self.measured.append(dict(config))
        if self._fails:
            return Outcome(Status.WRONG_RESULT, "row 7: got nan")
        return Outcome(Status.OK, time_us=10.5, times_us=[10.5])


def test_modelled_times_of_the_confirmation_configs() -> None:
    assert [modelled_time_us(c) for c in (LEADER, RUNNER_UP, THIRD)] == [10.0, 10.2, 10.5]
    assert all(gemv.OP.space(SHAPE).check(c) is None for c in (LEADER, RUNNER_UP, THIRD))


def test_leaders_are_confirmed_on_fresh_buffers_and_keep_their_slower_time(store: Store) -> None:
    worker = PlacementWorker()
    report = tune(store, worker, 3, first=[LEADER, RUNNER_UP, THIRD], confirm=True)
    # The leader and the runner-up are measured again on new buffers; the leader turns out 5% slower,
    # which brings the third within 3% of the new best, so it is confirmed in a second pass.
    assert worker.measured == [LEADER, RUNNER_UP, THIRD, LEADER, RUNNER_UP, THIRD]
    assert worker.setups == [SHAPE] * 3 and worker.fresh_setups == 2
    assert (report.result.best_config, report.result.best_us, report.result.confirmed) == (RUNNER_UP, 10.2, 3)
    stored = {t.config_key: t for t in rows(store)}
    leader = stored[config_key(LEADER)]
    assert (leader.time_us, leader.rounds, leader.times_us) == (10.5, 2, [10.0, 10.5])
    assert all(t.rounds == 2 for t in stored.values())
    best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert best is not None and best.config == RUNNER_UP
    # Confirmed once, never again: a second sweep of the problem measures nothing.
    again = PlacementWorker()
    assert tune(store, again, 3, confirm=True).result.confirmed == 0
    assert again.measured == [] and again.setups == []


def test_a_leader_wrong_on_fresh_buffers_is_recorded_failed_and_never_chosen(store: Store) -> None:
    worker = PlacementWorker(fails=True)
    report = tune(store, worker, 3, first=[LEADER, RUNNER_UP, THIRD], confirm=True)
    assert report.result.best_config == RUNNER_UP
    leader = next(t for t in rows(store) if t.config_key == config_key(LEADER))
    assert (leader.status, leader.time_us) == (Status.WRONG_RESULT, None)
    assert leader.message == "round 2, on fresh buffers: row 7: got nan"
    best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert best is not None and best.config == RUNNER_UP


def test_confirmation_reaches_problems_already_tuned(store: Store) -> None:
    tune(store, FakeWorker(), 3, first=[LEADER, RUNNER_UP, THIRD])  # tuned without confirmation
    worker = FakeWorker()
    report = tune(store, worker, 3, confirm=True)
    assert report.result.stopped == "already tuned"
    assert worker.measured == [LEADER, RUNNER_UP] and worker.fresh_setups == 1


def test_warm_start_measures_another_gpus_best_of_the_same_problem_first(store: Store) -> None:
    tune(store, FakeWorker(), 12, SHAPE)  # on the H200
    h200_best = store.best(H200.name, SHAPE, source_hash(SHAPE))
    assert h200_best is not None
    h100 = dataclasses.replace(H200, name="NVIDIA H100 80GB HBM3", uuid="GPU-2222")
    worker = FakeWorker()
    tuner = Tuner(store, worker, InstantPool(), h100, sampler="random", budget=Budget(3), seed=5, confirm=False)  # type: ignore[arg-type]
    tuner.tune(SHAPE)
    assert worker.measured[0] == h200_best.config
    h100_best = store.best(h100.name, SHAPE, source_hash(SHAPE))
    assert h100_best is not None and store.best(H200.name, SHAPE, source_hash(SHAPE)) == h200_best


class ConfirmReplayFailsWorker(PlacementWorker):
    """The leader kills the worker on fresh buffers, and the fresh worker cannot be set up again."""

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        self.ready()
        if self.fresh_setups and config_key(config) == config_key(LEADER):
            self.measured.append(dict(config))
            self.dead = True
            return Outcome(Status.CRASHED, "worker died (exit -11)")
        return super().measure(cubin, kernel, config, timeout)


def test_a_failed_setup_replay_during_confirmation_ends_it_and_charges_no_leader(store: Store) -> None:
    worker = ConfirmReplayFailsWorker()
    report = tune(store, worker, 3, first=[LEADER, RUNNER_UP, THIRD], confirm=True)
    assert worker.measured == [LEADER, RUNNER_UP, THIRD, LEADER]  # the runner-up's round never ran
    assert report.result.confirmed == 1
    problem_id = store.problem_id(SHAPE, H200.name, create=False)
    assert problem_id is not None
    assert store.crash_count(problem_id, config_key(RUNNER_UP), source_hash(SHAPE)) == 0
    runner_up = next(t for t in rows(store) if t.config_key == config_key(RUNNER_UP))
    assert (runner_up.status, runner_up.rounds) == (Status.OK, 1)


class SlowerWorker(FakeWorker):
    """Every config `factor` times its modelled time: the kernels after an edit that cost speed."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        super().measure(cubin, kernel, config, timeout)  # records the config
        t = modelled_time_us(config) * self.factor
        return Outcome(Status.OK, time_us=t, times_us=[t])


@pytest.mark.parametrize(("factor", "re_swept"), [(1.015, False), (1.05, True)])
def test_retime_re_sweeps_only_problems_whose_earlier_best_got_slower(
    store: Store, monkeypatch: pytest.MonkeyPatch, factor: float, re_swept: bool
) -> None:
    tune(store, FakeWorker(), 12, SHAPE)
    earlier = [t.config for t in rows(store) if t.status is Status.OK][:3]  # the three fastest
    monkeypatch.setattr("autotune.tune.tuner.source_hash", lambda problem: "n3w50urce")  # the kernel changes
    worker = SlowerWorker(factor)
    tuner = Tuner(
        store, worker, InstantPool(), H200, sampler="random", budget=Budget(12), seed=1, confirm=False, retime=0.02
    )  # type: ignore[arg-type]
    report = tuner.tune(SHAPE)
    assert worker.measured[:3] == earlier
    if re_swept:
        assert len(worker.measured) == 12 and report.result.stopped == "budget reached"
    else:
        assert len(worker.measured) == 3 and report.result.stopped.startswith("re-timed:")
        assert report.result.best_us == pytest.approx(modelled_time_us(earlier[0]) * factor)


def test_retime_sweeps_a_problem_with_no_earlier_measurement_in_full(store: Store) -> None:
    worker = FakeWorker()
    tuner = Tuner(
        store, worker, InstantPool(), H200, sampler="random", budget=Budget(6), seed=1, confirm=False, retime=0.02
    )  # type: ignore[arg-type]
    assert tuner.tune(SHAPE).result.stopped == "budget reached" and len(worker.measured) == 6


def test_the_default_sweep_budget_doubles_for_unseen_shapes_and_an_asked_for_one_holds_for_all() -> None:
    from autotune import api

    default = api.sweep_budget(api.DEFAULT_TRIALS, None, api.DEFAULT_PATIENCE)
    assert (default.trials, default.patience) == (64, 32)
    assert default.unseen is not None and (default.unseen.trials, default.unseen.patience) == (128, 64)
    assert api.sweep_budget(64, 30.0, 16).unseen is None and api.sweep_budget(100, None, 32).unseen is None
    assert default.for_problem(seeded=False).timeout_s is None
