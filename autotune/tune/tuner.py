"""A sweep: for each problem, a study whose trials are compiled in the pool, measured by the worker
and written to the store. The orchestrator is the only writer to the database."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from autotune import ops
from autotune.build.compiler import CompileJob, CompilePool, CompileResult, failure_reason
from autotune.core.errors import PYCUDA_HINT, AutotuneError
from autotune.core.fingerprint import GpuInfo, toolchain
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Space, config_key
from autotune.core.target import targeting
from autotune.measure.worker.client import SetupLost, Worker, WorkerLost
from autotune.ops import source_hash
from autotune.ops.base import Op
from autotune.select import choose as select
from autotune.store.models import QUEUE
from autotune.store.rows import Provenance, TrialRow
from autotune.store.store import Store
from autotune.tune import fleet, libraries
from autotune.tune.confirm import confirm_leaders
from autotune.tune.search import DEFAULT_SAMPLER, SAMPLERS, Budget, Measurer, Study, StudyResult

WARM_START_NEIGHBOURS = 3
# Configs of other shapes and dtypes (_neighbour_configs) measured before the op's own seed tilings, at
# most: with 3 of this dtype's neighbours, 2 other dtypes' picks and their 2 nearest leaders, 7 or fewer
# reach it; a 40-trial sweep keeps the rest (with the seed tilings) for what the sampler proposes.
NEIGHBOUR_SEEDS = 8
# Best configs of this very problem under an earlier kernel source, measured again first.
EARLIER_BEST = 3
# Leaders (of this source, else earlier ones, else another GPU's) whose variants the op names
# (`leader_variants`: GEMV's other prefetch choices) are measured before the neighbours and seeds.
VARIED_LEADERS = 3


log = logging.getLogger(__name__)


class Progress(Protocol):
    def problem_started(self, problem: Problem, index: int, total: int, trials: int) -> None: ...
    def trial_done(self, problem: Problem, outcome: Outcome, result: StudyResult) -> None: ...
    def problem_done(self, problem: Problem, result: StudyResult, seconds: float) -> None: ...


# Called after every trial of a sweep with (problem, config, outcome): the Python API's on_trial.
TrialHook = Callable[[Problem, Config, Outcome], None]


class QuietProgress:
    def problem_started(self, problem: Problem, index: int, total: int, trials: int) -> None:
        pass

    def trial_done(self, problem: Problem, outcome: Outcome, result: StudyResult) -> None:
        pass

    def problem_done(self, problem: Problem, result: StudyResult, seconds: float) -> None:
        pass


@dataclass
class ProblemReport:
    problem: Problem
    result: StudyResult
    seconds: float


@dataclass
class SweepReport:
    gpu: GpuInfo
    db_url: str
    problems: list[ProblemReport] = field(default_factory=list)


class StoreMeasurer(Measurer):
    """Wires a study to the store, the compiler and the worker for one problem."""

    def __init__(
        self, store: Store, worker: Worker, gpu: GpuInfo, gpu_id: int, problem: Problem, problem_id: int
    ) -> None:
        self._store, self._worker, self._gpu, self._gpu_id = store, worker, gpu, gpu_id
        self._problem, self._problem_id = problem, problem_id
        self._source_hash = source_hash(problem)
        self._where = Provenance(problem_id, gpu_id, self._source_hash, toolchain(), gpu.driver, gpu.cuda)

    def compile_job(self, config: Config) -> CompileJob:
        return ops.compile_job(self._problem, config, self._gpu.arch)

    def crashes(self, config: Config) -> int:
        return int(self._store.crash_count(self._problem_id, config_key(config), self._source_hash))

    def _record(self, config: Config, outcome: Outcome) -> None:
        self._store.record_trial(self._where, config, outcome)

    def record_invalid(self, config: Config, reason: str) -> None:
        self._record(config, Outcome(Status.INVALID, reason))

    # -- confirmation (autotune/tune/confirm.py) --------------------------------------------------------
    def leaders(self, top: int) -> list[TrialRow]:
        return list(self._store.leaders(self._problem_id, self._source_hash, top))

    def fresh_buffers(self) -> None:
        """New buffers, allocated while the old ones are held, filled with new random data."""
        self._worker.setup(self._problem, seed=_fresh_seed(), fresh_memory=True)

    def remeasure(self, trial: TrialRow, cubin: Path, kernel: str) -> Outcome:
        """Measure a stored OK trial again and add the outcome to it as one more round."""
        self._worker.ready()  # a fresh worker that cannot be set up raises here, charged to no trial
        outcome = self._worker.measure(cubin, kernel, trial.config)
        if outcome.status in (Status.CRASHED, Status.TIMEOUT):
            self._store.note_crash(self._problem_id, trial.config_key, self._source_hash)
        self._store.add_round(trial.id, outcome)
        return outcome

    # -- trials of the study -----------------------------------------------------------------------
    def measure(self, config: Config, compiled: CompileResult) -> Outcome:
        if compiled.cubin is None:
            outcome = Outcome(Status.COMPILE_ERROR, compiled.message)
            self._record(config, outcome)
            return outcome
        # A fresh worker that cannot be given the problem raises SetupLost here, before any row is
        # written: no config ran, so none is charged with a crash or counted towards a quarantine.
        self._worker.ready()
        # Written as running before dispatch: a sweep killed now leaves a row the next run redoes.
        trial_id = self._store.start_trial(self._where, config)
        outcome = self._worker.measure(compiled.cubin, compiled.job.name, config)
        if outcome.status in (Status.CRASHED, Status.TIMEOUT):
            self._store.note_crash(self._problem_id, config_key(config), self._source_hash)
        self._store.finish_trial(trial_id, outcome)
        return outcome


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def _stored_outcome(row: Any) -> Outcome:
    return Outcome(row.status, row.message, row.time_us, [], row.gbs, row.rel_error)


def _same_bytes_per_load(config: Config, from_dtype: str, to_dtype: str) -> Config:
    """A config of another dtype with its vector width rescaled so each load moves the same bytes."""
    if "vec" not in config:
        return dict(config)
    vec = max(1, config["vec"] * ITEMSIZE[from_dtype] // ITEMSIZE[to_dtype])
    return {**config, "vec": vec}


def _neighbour_configs(store: Store, gpu: str, problem: Problem, current: str) -> list[Config]:
    """Warm start from other shapes and dtypes, each config fitted onto this problem's space (Space.fit)
    and listed once, NEIGHBOUR_SEEDS at most:
    1. the best configs of the nearest tuned shapes of this dtype;
    2. this very shape in each other dtype (and each other variant the op lends configs from:
       _siblings) as the selector answers it: its stored best, or where it is not tuned, the cost
       model's pick (the same memory traffic, so often the same answer: a 40-trial sweep of bfloat16
       152064x3584 on the H200 stopped at 272.9 us, where float16, never tuned there, runs 251.2 with
       another `order`);
    3. the best config of the nearest tuned shape in each of those."""
    space = ops.for_problem(problem).space(problem)
    tuned = _tuned(store, gpu, problem, current)
    configs = [dict(row.config) for row in select.nearest(tuned, problem.shape)[:WARM_START_NEIGHBOURS]]
    siblings = _siblings(problem)
    selector = select.Selector(store)
    for sibling in siblings:
        picked = selector.choose(sibling, gpu, vendor=False)
        if picked.source != select.DEFAULT:  # the safe default says nothing of this shape
            configs.append(_in_dtype(problem, picked.config, sibling.dtype))
    for sibling in siblings:
        for row in select.nearest(_tuned(store, gpu, sibling, source_hash(sibling)), problem.shape)[:1]:
            configs.append(_in_dtype(problem, row.config, sibling.dtype))
    fitted: dict[str, Config] = {}
    for config in configs:
        moved = space.fit(config)
        if moved is not None:
            fitted.setdefault(config_key(moved), moved)
    return list(fitted.values())[:NEIGHBOUR_SEEDS]


def _tuned(store: Store, gpu: str, problem: Problem, source: str) -> Any:
    """The stored best rows of the problem's op, dtype, layout, inputs and variant (kernel `source`)."""
    return store.tuned(
        gpu, problem.op, problem.dtype, source, trans=problem.trans, inputs=problem.inputs, variant=problem.variant
    )


def _siblings(problem: Problem) -> list[Problem]:
    """The same shape in the op's other dtypes, its inputs those that dtype implies (an int4 weight's
    scales follow the activations: bfloat16's problem reads bfloat16 scales), then the problems whose
    configs the op says this one can take (Op.estimate_from: fp8 codes take int8's, an int4 weight's
    group of 128 with zeros takes the symmetric one's). Asked through another dtype alone, fp8's sibling
    answered with fp8's own best where fp8 was tuned, so a sweep of it never met int8's newer pick:
    float16 fp8 4096x14336 stayed at 16.02 us on the H200 where int8's runs it in 15.34."""
    op = ops.get(problem.op)
    found = []
    for dtype in op.dtypes:
        if dtype != problem.dtype:
            inputs = tuple(dtype if d == problem.dtype else d for d in problem.inputs)
            found.append(replace(problem, dtype=dtype, inputs=inputs))
    for other in op.estimate_from(problem):
        if other != problem and other not in found:
            found.append(other)
    return found


def _in_dtype(problem: Problem, config: Mapping[str, int], dtype: str) -> Config:
    """A config of `dtype`'s problem as this problem's space names it (one op's dtypes may build from
    different files: the int4 op's CUDA-core GEMV serves float16 alone), its loads the same bytes."""
    carried = ops.get(problem.op).carried_over(problem, config)
    return _same_bytes_per_load(carried, dtype, problem.dtype)


def _other_gpus_best(store: Store, gpu: str, problem: Problem, current: str) -> list[Config]:
    """Warm start: this very problem's best config on every other GPU the database holds. A new
    card's first guess is another card's answer: tuning on an H100, the shipped H200 records'
    pick is measured first. Tuned separately, the two cards chose the same GEMV config
    on 26 of 57 problems and the H200's pick was among the H100's three fastest on 37; the H100's
    first sgemm sweep missed the H200's tiling, which took 4096^3 from 0.89x to 0.94x cuBLAS."""
    configs = []
    for name in store.gpu_names():
        if name != gpu and (row := store.best(name, problem, current)) is not None:
            configs.append(dict(row.config))
    return configs


def _leader_variants(op: Op, problem: Problem, leaders: list[Config], fallback: list[Config]) -> list[Config]:
    """The op's variants (`leader_variants`) of the problem's first VARIED_LEADERS leaders, or of
    `fallback` configs where it has fewer; [] for an op without variants."""
    chosen: list[Config] = []
    for config in [*leaders, *fallback]:
        if config not in chosen and len(chosen) < VARIED_LEADERS:
            chosen.append(dict(config))
    return [variant for config in chosen for variant in op.leader_variants(problem, config)]


def _carried_forward(config: Config, space: Space, default: Config) -> Config:
    """A config measured under an earlier kernel source, restated in the current parameters: a
    parameter added since takes its default value, a parameter dropped since is left out."""
    return {name: config.get(name, default[name]) for name in space.names}


class Tuner:
    def __init__(
        self,
        store: Store,
        worker: Worker,
        pool: CompilePool,
        gpu: GpuInfo,
        *,
        sampler: str = DEFAULT_SAMPLER,
        budget: Budget | None = None,
        seed: int | None = None,
        progress: Progress | None = None,
        fresh_only: bool = False,
        measurer: type[StoreMeasurer] = StoreMeasurer,
        confirm: bool = True,
        on_trial: TrialHook | None = None,
        retime: float | None = None,
        vendor: bool = True,
    ) -> None:
        if sampler not in SAMPLERS:
            raise AutotuneError(f"unknown sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
        self._store, self._worker, self._pool = store, worker, pool
        self._sampler, self._budget, self._seed = sampler, budget or Budget(), seed
        self._progress: Progress = progress or QuietProgress()
        self.gpu = gpu
        self._gpu_id = store.upsert_gpu(gpu)
        # Re-tuning stale problems: only trials measured under this driver and CUDA count as done.
        self._fresh_only = fresh_only
        self._measurer_type = measurer  # scripts/fault_drill.py plants its faults through a subclass
        self._confirm = confirm  # measure the leaders again on fresh buffers (autotune/tune/confirm.py)
        self._on_trial = on_trial
        # Re-time mode: after a kernel edit, a problem whose earlier best configs, measured again
        # under the new kernels, come within this fraction of their stored time is not re-swept.
        self._retime = retime
        self._vendor = vendor  # time the library families' candidates too (autotune/tune/libraries.py)

    def tune(self, problem: Problem, index: int = 0, total: int = 1, first: Sequence[Config] = ()) -> ProblemReport:
        """Tune one problem; `first` configs are measured before the sampler's own picks."""
        with targeting(self.gpu.compute_capability):  # the space and family of the GPU that measures
            return self._tune(problem, index, total, first)

    def _tune(self, problem: Problem, index: int, total: int, first: Sequence[Config]) -> ProblemReport:
        start = time.perf_counter()
        current = source_hash(problem)
        problem_id = self._store.problem_id(problem, self.gpu.name)
        self._store.drop_unfinished(problem_id)
        measurer = self._measurer_type(self._store, self._worker, self.gpu, self._gpu_id, problem, problem_id)
        op = ops.for_problem(problem)
        study = Study(
            op.space(problem),
            measurer,
            self._pool,
            sampler=self._sampler,
            seed=self._seed,
            on_trial=lambda config, outcome, result: self._trial_done(problem, config, outcome, result),
        )
        study.add_history(
            (row.config, _stored_outcome(row))
            for row in self._store.completed_trials(problem_id, current)
            if not self._fresh_only or is_fresh(row, self.gpu)
        )
        known = op.seed_configs(problem)
        default = op.default_config(problem)
        earlier_rows = self._store.earlier_best(problem_id, current, EARLIER_BEST)
        earlier = [_carried_forward(row.config, study.space, default) for row in earlier_rows]
        other_gpus = _other_gpus_best(self._store, self.gpu.name, problem, current)
        leaders = [dict(row.config) for row in measurer.leaders(VARIED_LEADERS)]
        variants = _leader_variants(op, problem, leaders, [*earlier, *other_gpus])
        neighbours = _neighbour_configs(self._store, self.gpu.name, problem, current)
        retimed, retime_count = self._retime is not None and bool(earlier_rows), 0
        if retimed:
            # Re-time mode: the earlier best alone first; the rest only where they fall behind.
            retime_count = study.warm_start(earlier)
        else:
            study.warm_start([*first, *earlier, *other_gpus, *variants, *neighbours, *known])
        # Seeded: something stored about this problem or its neighbours guides the search (the op's own
        # seed tilings are the same for every shape, so they do not count).
        seeded = bool(study.result.reused or earlier or other_gpus or variants or neighbours or first)
        budget = self._budget.for_problem(seeded)
        self._progress.problem_started(problem, index, total, budget.trials)
        log.info(
            "tuning %s on %s (%d of %d): %d trials stored",
            problem,
            self.gpu.name,
            index + 1,
            total,
            study.result.reused,
        )
        needs_vendor = self._vendor and libraries.untimed(self._store, problem, problem_id)
        if study.result.reused < budget.trials or needs_vendor:
            try:
                self._worker.setup(problem, seed=_fresh_seed())
            except (AutotuneError, WorkerLost) as exc:
                study.result.stopped = f"setup failed: {exc}"
                log.warning("%s: setup failed: %s", problem, exc)
            else:
                try:
                    if needs_vendor:
                        study.result.vendor_us = libraries.time_libraries(
                            self._store, self._worker, self.gpu, self._gpu_id, problem, problem_id
                        )
                    if study.result.reused >= budget.trials:
                        study.result.stopped = "already tuned"
                    elif not retimed or not self._kept_after_retime(problem, study, retime_count, earlier_rows):
                        if retimed:
                            study.warm_start([*first, *other_gpus, *variants, *neighbours, *known])
                        study.run(budget)
                except SetupLost as exc:
                    study.result.stopped = f"setup failed: {exc}"
        else:
            study.result.stopped = "already tuned"
        if self._confirm:
            self._confirm_leaders(study, measurer)
        seconds = time.perf_counter() - start
        best = f"{study.result.best_us:.2f} us" if study.result.best_us is not None else "nothing"
        log.info(
            "%s: best %s after %.1f s (%d measured, %s)",
            problem,
            best,
            seconds,
            study.result.measured,
            study.result.stopped or "budget spent",
        )
        self._progress.problem_done(problem, study.result, seconds)
        return ProblemReport(problem, study.result, seconds)

    def _kept_after_retime(self, problem: Problem, study: Study, count: int, earlier: list[TrialRow]) -> bool:
        """Measure the `count` earlier best configs queued; True where the fastest of them under the
        new kernels is within the re-time tolerance of the earlier kernels' best time."""
        assert self._retime is not None
        result = study.run(Budget(study.result.reused + study.result.measured + count, self._budget.timeout_s))
        before = min(row.time_us for row in earlier if row.time_us is not None)
        now = result.best_us
        if now is not None and now <= before * (1 + self._retime):
            result.stopped = f"re-timed: {now:.2f} us against {before:.2f} us before the kernel change"
            return True
        change = "failed" if now is None else f"{now / before - 1:+.1%}"
        log.info("%s: re-timed %s against %.2f us before the kernel change: re-swept", problem, change, before)
        return False

    def _trial_done(self, problem: Problem, config: Config, outcome: Outcome, result: StudyResult) -> None:
        took = f" {outcome.time_us:.2f} us" if outcome.time_us is not None else ""
        why = ""
        if outcome.message:  # a compile error's message starts with the nvcc command: its reason instead
            compiled = outcome.status is Status.COMPILE_ERROR
            why = f": {failure_reason(outcome.message) if compiled else outcome.message.splitlines()[0]}"
        log.debug("%s %s -> %s%s%s", problem, config, outcome.status.value, took, why)
        self._progress.trial_done(problem, outcome, result)
        if self._on_trial is not None:
            self._on_trial(problem, dict(config), outcome)

    def _confirm_leaders(self, study: Study, measurer: StoreMeasurer) -> None:
        """Measure the leaders again on fresh buffers; the study's best becomes the confirmed one."""
        study.result.confirmed = confirm_leaders(measurer, self._pool)
        if study.result.confirmed:
            leaders = measurer.leaders(1)
            study.result.best_config = dict(leaders[0].config) if leaders else None
            study.result.best_us = leaders[0].time_us if leaders else None


def is_fresh(row: Any, gpu: GpuInfo) -> bool:
    """Measured under this GPU's driver and CUDA (the source hash is filtered by the query)."""
    return bool(row.driver == gpu.driver and row.cuda == gpu.cuda)


def stale_problems(store: Store, gpu: GpuInfo, op: str | None, dtype: str | None) -> list[Problem]:
    """Stored problems of this GPU without an OK measurement of the current source, driver and CUDA,
    or without a timing of this machine's cuBLASLt (a sweep of such a problem times only that)."""
    stale = []
    for summary in store.problems(gpu.name, op, dtype):
        problem = summary.problem
        problem_id = store.problem_id(problem, gpu.name, create=False)
        if problem_id is None:  # gone since it was listed (another process pruned it): nothing to re-sweep
            continue
        rows = store.completed_trials(problem_id, source_hash(problem))
        fresh = any(row.status is Status.OK and is_fresh(row, gpu) for row in rows)
        if not fresh or libraries.untimed(store, problem, problem_id):  # cuBLASLt here never timed
            stale.append(problem)
    return stale


def check_toolchain() -> None:
    if shutil.which("nvcc") is None:
        # Named together: a machine set up to run shipped kernels only lacks both.
        also = "" if importlib.util.find_spec("pycuda") else f", then PyCUDA to measure them: {PYCUDA_HINT}"
        raise AutotuneError(
            f"nvcc not found: tuning compiles kernels, install the CUDA toolkit and put its bin/ on PATH{also}"
        )


def run_sweep(
    problems: Sequence[Problem] | tuple[str | None, str | None] | None,
    open_store: Callable[[], Any],
    *,
    sampler: str = DEFAULT_SAMPLER,
    budget: Budget | None = None,
    seed: int | None = None,
    device: int = 0,
    progress: Progress | None = None,
    on_trial: TrialHook | None = None,
    compile_workers: int | None = None,
    lease: timedelta | None = None,
    retime: float | None = None,
) -> SweepReport:
    """Tune every problem; given (op, dtype) filters instead, re-tune the stale stored problems;
    given None, the queue's pending problems of this GPU, most asked first. With `retime`, a problem
    whose earlier best configs come within that fraction of their stored time when measured again
    under the current kernels is not re-swept (after a kernel edit). Problems are claimed
    one at a time through the database (autotune/tune/fleet.py), so sweeps on several machines
    share the work. The store is opened only once the GPU answered, so a machine without one (or
    without PyCUDA) gets its one-line error with the database untouched."""
    check_toolchain()
    with Worker(device) as worker, CompilePool(compile_workers) as pool:
        gpu = worker.hello()
        store = open_store()
        stale = isinstance(problems, tuple)
        if isinstance(problems, tuple):
            problems = stale_problems(store, gpu, *problems)
        tuner = Tuner(
            store,
            worker,
            pool,
            gpu,
            sampler=sampler,
            budget=budget,
            seed=seed,
            progress=progress,
            fresh_only=stale,
            on_trial=on_trial,
            retime=retime,
        )
        return sweep_claimed(tuner, store, problems, lease or fleet.lease())


def sweep_claimed(tuner: Tuner, store: Store, problems: Sequence[Problem] | None, lease: timedelta) -> SweepReport:
    """Tune what this machine claims of `problems` (None: of the queue's pending problems)."""
    report = SweepReport(tuner.gpu, store.url)
    if problems is None:
        total = sum(1 for row in store.queue_rows(tuner.gpu.name) if row.state != QUEUE.DONE)
    else:
        total = len(problems)
    for index, claim in enumerate(fleet.claims(store, tuner.gpu.name, problems, lease)):
        with fleet.holding(store, claim, lease):
            report.problems.append(tuner.tune(claim.problem, index, max(total, index + 1)))
    return report
