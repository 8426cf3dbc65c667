"""Real nvcc compiles for the CPU tests (no GPU needed), each done once per test run.

A test that compiles names what it compiles with the `nvcc` marker: `@pytest.mark.nvcc(jobs=jobs)`, where
`jobs()` returns CompileJobs (built into the run's kernel cache, as the tuner builds them) and
NvccRuns (other nvcc command lines, whose output is kept). Once the tests are collected, conftest.py
hands every marked test's jobs to a background process that compiles them on every core at low
priority while the tests without nvcc run (they run first); the marked tests then wait for it and
check its results: cubins come from the cache, NvccRun results from their files. A job the
background did not do, or did not finish, is simply done again in the test itself, so a test that
calls compile_all() or run_nvcc() without the marker is correct, only slower.

The background is a process of its own, so tests that patch autotune.build.compiler or put a fake
nvcc on PATH cannot reach it.

Under pytest-xdist every worker collects the same tests and shares the run's kernel cache: one worker
starts the background, which holds an exclusive lock on `background.lock` in the cache until it ends;
the others wait for that lock instead of compiling everything a second time.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from autotune.build.compiler import CompileJob, CompilePool, CompileResult, compile_kernel, cubin_cache_dir
from autotune.core.problem import Problem
from autotune.core.space import Config

_REPO = Path(__file__).resolve().parents[1]
_NICE = 10  # the background yields to the test being run (some of them time things)
_WAIT_S = 1200  # most a marked test waits for the background; after that it compiles itself


@dataclass(frozen=True)
class NvccRun:
    """One nvcc command line, the compiler and the output file left out: `nvcc *args -o <file>`, or,
    given a `source`, `nvcc *args <file holding source> -o <file>`."""

    args: tuple[str, ...]
    source: str = ""
    suffix: str = ".o"  # of the output file

    @property
    def key(self) -> str:
        return hashlib.sha256("\0".join((*self.args, self.source, self.suffix)).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class NvccDone:
    returncode: int
    output: str  # stderr, then stdout
    file: Path  # what -o named


Job = CompileJob | NvccRun
JobsOf = Callable[[], Iterable[Job]]


class _Background:
    """The run's background compile process, started by conftest.py (one at a time)."""

    process: subprocess.Popen[bytes] | None = None  # where this process started it
    runs: Path | None = None  # where NvccRun results are kept, shared with the background
    lock: Path | None = None  # held by the background while it runs, whichever process started it


def _runs_dir() -> Path:
    if _Background.runs is None:
        # No background in this run (the module used outside conftest.py): keep them in the cache.
        _Background.runs = cubin_cache_dir().parent / "nvcc-runs"
    return _Background.runs


def start_background(jobs: Sequence[Job], cubins: Path, runs: Path, *, start: bool = True) -> None:
    """Start compiling `jobs` into `cubins` (CompileJobs) and `runs` (NvccRuns) in the background; with
    `start` false, only wait for the one another process (an xdist worker) starts with the same folders."""
    stop_background()
    _Background.runs = runs
    _Background.lock = runs / "background.lock"
    if not start or not jobs or shutil.which("nvcc") is None:
        return
    runs.mkdir(parents=True, exist_ok=True)
    plan = runs / "background.json"
    plan.write_text(
        json.dumps(
            {
                "cubins": str(cubins),
                "runs": str(runs),
                "compile": [[j.name, j.source, j.arch, j.depends_hash] for j in jobs if isinstance(j, CompileJob)],
                "nvcc": [[list(j.args), j.source, j.suffix] for j in jobs if isinstance(j, NvccRun)],
            }
        )
    )
    path = os.pathsep.join(filter(None, (str(_REPO), os.environ.get("PYTHONPATH"))))
    # The lock is taken before it has its name, so that a waiter never finds it unlocked before the
    # background ends; the background inherits it (pass_fds) and the OS drops it when that process ends.
    staged = runs / f"background.lock.{os.getpid()}"
    with staged.open("wb") as lock, (runs / "background.log").open("wb") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.replace(staged, _Background.lock)
        _Background.process = subprocess.Popen(
            [sys.executable, "-m", "tests.nvcc", str(plan)],
            cwd=_REPO,
            env=dict(os.environ, PYTHONPATH=path),  # the autotune and tests of this checkout
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(lock.fileno(),),
            start_new_session=True,  # a Ctrl-C reaches the tests, and stop_background() ends it
        )


def stop_background() -> None:
    process, _Background.process = _Background.process, None
    if process is not None and process.poll() is None:
        process.kill()  # its nvcc process groups end with it (autotune.build.procgroup)
        process.wait()


def wait_for_background() -> None:
    """Return once the background has done its jobs (or is ended, past _WAIT_S)."""
    process = _Background.process
    if process is not None:
        try:
            process.wait(timeout=_WAIT_S)
        except subprocess.TimeoutExpired:
            stop_background()
    elif _Background.lock is not None:
        _wait_for_lock(_Background.lock)


def _wait_for_lock(path: Path) -> None:
    """Wait, at most _WAIT_S, until the background another process started has ended. Without a lock
    file there is none: no worker runs a test before every worker has collected (xdist's scheduling),
    and the one that starts the background names its lock while collecting."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        deadline = time.monotonic() + _WAIT_S
        while time.monotonic() < deadline:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(0.2)


def compile_all(jobs: Sequence[CompileJob], cache_dir: Path | None = None) -> list[CompileResult]:
    """Compile every job in a pool (into the run's kernel cache unless `cache_dir` is given); assert
    each gave a cubin that holds its extern "C" kernel."""
    if cache_dir is None:
        wait_for_background()
    with CompilePool(cache_dir=cache_dir) as pool:
        results = [f.result() for f in [pool.submit(job) for job in jobs]]
    failures = [(r.job.name, r.message[-600:]) for r in results if not r.ok]
    assert not failures, failures[0]
    for result in results:
        assert result.cubin is not None and result.job.name.encode() in result.cubin.read_bytes()
    return results


def in_space_jobs(family: ModuleType, instances: Iterable[tuple[Problem, Config]]) -> list[CompileJob]:
    """Assert each (problem, config) is in the GEMM family's space; their jobs for sm_90."""
    jobs = []
    for problem, config in instances:
        reason = family.space(problem).check(config)
        assert reason is None, (problem, config, reason)
        jobs.append(
            CompileJob(family.kernel_name(problem, config), family.kernel_source(problem, config), "sm_90", "test")
        )
    return jobs


def compile_in_space(
    family: ModuleType, instances: Iterable[tuple[Problem, Config]], cache_dir: Path | None = None
) -> None:
    """Assert each (problem, config) is in the GEMM family's space, then compile them all for sm_90."""
    compile_all(in_space_jobs(family, instances), cache_dir)


def run_nvcc(runs: Sequence[NvccRun]) -> list[NvccDone]:
    """Each run's result: the background's, or, where it has none, that of running it now."""
    wait_for_background()
    folder = _runs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(lambda run: _kept(run, folder) or _run(run, folder), runs))


def _kept(run: NvccRun, folder: Path) -> NvccDone | None:
    try:
        kept = json.loads((folder / f"{run.key}.json").read_text())
    except (OSError, ValueError):
        return None
    return NvccDone(kept["returncode"], kept["output"], folder / f"{run.key}{run.suffix}")


def _run(run: NvccRun, folder: Path) -> NvccDone:
    from autotune.build.procgroup import GROUPS

    output = folder / f"{run.key}{run.suffix}"
    command = [shutil.which("nvcc") or "nvcc", *run.args]
    if run.source:
        source_file = folder / f"{run.key}.cu"
        source_file.write_text(run.source)
        command.append(str(source_file))
    command += ["-o", str(output)]
    try:
        done = GROUPS.run(command, 600)
        result = NvccDone(done.returncode, done.stderr + done.stdout, output)
    except (OSError, subprocess.TimeoutExpired) as exc:
        result = NvccDone(-1, f"{' '.join(command)}: {exc}", output)
    staged = folder / f"{run.key}.json.{os.getpid()}.tmp"
    staged.write_text(json.dumps({"returncode": result.returncode, "output": result.output}))
    os.replace(staged, folder / f"{run.key}.json")
    return result


def _background_main(plan_file: Path) -> None:
    os.nice(_NICE)  # nvcc and its children inherit it
    plan = json.loads(plan_file.read_text())
    cubins, folder = Path(plan["cubins"]), Path(plan["runs"])
    started = time.monotonic()
    # The longest first: command lines (whole benchmark programs) before single kernels.
    runs = [NvccRun(tuple(args), source, suffix) for args, source, suffix in plan["nvcc"]]
    compiles = [CompileJob(*job) for job in plan["compile"]]
    work: list[Callable[[], object]] = [functools.partial(_run, run, folder) for run in runs]
    work += [functools.partial(compile_kernel, job, cubins) for job in compiles]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for future in [pool.submit(step) for step in work]:
            future.result()
    print(f"{len(work)} nvcc jobs in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    _background_main(Path(sys.argv[1]))
