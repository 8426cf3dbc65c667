"""Replays of the public brute-forced spaces (scripts/search_replay.py) where compiling takes time: a
config the study submits is compiled DELAY measurements later, in the order submitted, or at once
when the study blocks on it (time passes until it is ready). Without --compile-times,
scripts/bench_search_replay.py compiles every config instantly, which favours a study that measures the
candidates it asked last (`tpe-fresh` ranks only the FRESH compiled candidates asked last): with a delay,
those may still be compiling. bench_search_replay.py --compile-times replaces this fixed delay with each
config's recorded compile time on a pool of compile slots.

    PYTHONPATH=.:scripts python experiments/search_compile_delay.py \\
        gemm=/tmp/hub/gemm_3090.json.gz conv=/tmp/hub/conv_a4000.json.gz --delays 0 4 8 --seeds 20

Prints, for each space, strategy and delay, the median evaluations to 2% of the optimum and the share
of runs that reach 2% under the 64/32 and 128/64 stops.
"""

from __future__ import annotations

import argparse
import statistics
from collections import deque
from concurrent.futures import Future
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import search_replay as replay_lib

from autotune.build.compiler import CompileJob, CompileResult
from autotune.tune import search


class DelayedFuture(Future):  # type: ignore[type-arg]
    """A compile that completes when the pool says so, or as soon as someone waits for its result."""

    def __init__(self, job: CompileJob) -> None:
        super().__init__()
        self.job = job

    def finish(self) -> None:
        if not self.done():
            self.set_result(CompileResult(self.job, Path("replay.cubin"), "", 0.0, False))

    def result(self, timeout: float | None = None) -> Any:
        self.finish()  # the study waits for it: time passes until it is compiled
        return super().result(timeout)


class DelayedPool:
    """CompilePool's interface: each job compiles `delay` measurements after it was submitted, in order."""

    def __init__(self, workers: int, delay: int) -> None:
        self.workers, self.delay = workers, delay
        self.queue: deque[list[Any]] = deque()

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        future = DelayedFuture(job)
        if self.delay == 0:
            future.finish()
        else:
            self.queue.append([self.delay, future])
        return future

    def measured(self) -> None:
        """One measurement has passed."""
        for entry in self.queue:
            entry[0] -= 1
        while self.queue and (self.queue[0][0] <= 0 or self.queue[0][1].done()):
            _, future = self.queue.popleft()
            future.finish()

    def wait_any(self, futures: Any) -> None:
        """The study waits for any compile: the oldest outstanding one completes."""
        while self.queue:
            _, future = self.queue.popleft()
            if not future.done():
                future.finish()
                return


_POOL: DelayedPool | None = None


def one_run(task: tuple[str, str, int, int, int]) -> tuple[str, str, int, list[float | None]]:
    global _POOL
    path, strategy, delay, seed, cap = task
    replay = replay_lib.load(Path(path))
    measurer = replay_lib.ReplayMeasurer(replay)
    _POOL = DelayedPool(replay_lib.DEFAULT_WORKERS, delay)
    plain = measurer.measure

    def measure(config: Any, compiled: Any) -> Any:
        outcome = plain(config, compiled)
        assert _POOL is not None
        _POOL.measured()
        return outcome

    measurer.measure = measure  # type: ignore[method-assign]
    study = search.Study(replay.space, measurer, _POOL, sampler=strategy, seed=seed)  # type: ignore[arg-type]
    study.run(search.Budget(trials=cap))
    return path, strategy, delay, measurer.trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=FILE (a Kernel Tuner cache, .json or .json.gz)")
    parser.add_argument("--strategies", nargs="+", default=["tpe-ranked", "tpe-fresh"])
    parser.add_argument("--delays", nargs="+", type=int, default=[0, 4])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cap", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    spaces = dict(item.split("=", 1) for item in args.spaces)
    tasks = [
        (path, strategy, delay, seed, args.cap)
        for path in spaces.values()
        for strategy in args.strategies
        for delay in args.delays
        for seed in range(args.seeds)
    ]
    with Pool(args.processes) as pool:
        runs = pool.map(one_run, tasks)
    for name, path in spaces.items():
        optimum = replay_lib.load(Path(path)).optimum
        for strategy in args.strategies:
            for delay in args.delays:
                traces = [t for p, s, d, t in runs if (p, s, d) == (path, strategy, delay)]
                summary = replay_lib.summarise(traces, optimum)
                reach = summary["reach_2pct_budgets"]
                to_2pct = [replay_lib.evaluations_to(t, optimum, 0.02) for t in traces]
                median = statistics.median(n if n is not None else float("inf") for n in to_2pct)
                print(
                    f"{name:6} {strategy:11} delay {delay:2}: median to 2% {median:6.1f}, "
                    f"reach 64/32 {reach['64/32']:.2f}, 128/64 {reach['128/64']:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
