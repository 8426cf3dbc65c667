"""Our own GEMV spaces replayed warm-started, as a sweep of a shape nobody tuned starts on a GPU with shipped
records: the best configs of the 3 nearest tuned shapes of the same dtype (the shape itself and its other
dtypes left out, as for a new shape) and the op's seed tilings, each fitted into the replayed space,
measured first; then the sampler. Compiles take their recorded times on 16 slots
(scripts/search_replay.py's ReplayPool), so the seconds to 2% of the optimum are a sweep's on the GPU
machine that brute-forced the space (scripts/bench_tuning.py --spaces-only).

    PYTHONPATH=.:scripts python experiments/search_warm_replay.py results/space_gemv_*_nvidia-h200.json.gz \\
        --samplers tpe tpe-fresh --seeds 50

Prints, per space and sampler, the warm-start configs found, the median seconds and evaluations to 2%, and
the share of runs within 2% under the default 64/32 stop and within 200 evaluations.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import search_replay as replay_lib

from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops import gemv, source_hash
from autotune.select.choose import nearest
from autotune.store import open_store
from autotune.tune.search import Budget, Study

GPU = "NVIDIA H200"
NEIGHBOURS = 3  # autotune/tune/tuner.py's WARM_START_NEIGHBOURS


def problem_of(path: Path) -> Problem:
    """The problem a space file of bench_tuning.py was brute-forced for ("gemv float16 4096x8192")."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    op, dtype, shape = data["kernel_name"].split()
    m, n = (int(v) for v in shape.split("x"))
    return Problem(op, dtype, m, n)


def warm_configs(problem: Problem, replay: replay_lib.Replay) -> list[Config]:
    """The nearest tuned shapes' best and the seed tilings, fitted into the replayed space."""
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{folder}/shipped.db")
        tuned = store.tuned(GPU, problem.op, problem.dtype, source_hash(problem))
        found = [dict(row.config) for row in nearest(tuned, problem.shape)[:NEIGHBOURS]]
    configs: list[Config] = []
    for config in [*found, *gemv.OP.seed_configs(problem)]:
        fitted = replay.space.fit(config)
        if fitted is not None and config_key(fitted) not in {config_key(c) for c in configs}:
            configs.append(fitted)
    return configs


def one_run(task: tuple[str, str, int, list[Config]]) -> tuple[str, str, replay_lib.Run]:
    path, sampler, seed, warm = task
    replay = replay_lib.load(Path(path))
    pool = replay_lib.ReplayPool(replay, replay_lib.DEFAULT_WORKERS, compile_times=True)
    measurer = replay_lib.ReplayMeasurer(replay, pool)
    study = Study(replay.space, measurer, pool, sampler=sampler, seed=seed)  # type: ignore[arg-type]
    study.warm_start(warm)
    study.run(Budget(trials=200))
    return path, sampler, measurer.run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", type=Path)
    parser.add_argument("--samplers", nargs="+", default=["tpe", "tpe-fresh"])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    tasks: list[tuple[str, str, int, list[Config]]] = []
    for path in args.spaces:
        replay = replay_lib.load(path)
        warm = warm_configs(problem_of(path), replay)
        values = [replay.value(c) for c in warm]
        best = min(v for v in values if v is not None) / replay.optimum
        print(f"{path.name}: {len(warm)} warm-start configs, the best {best:.3f}x the optimum", flush=True)
        tasks += [(str(path), s, seed, warm) for s in args.samplers for seed in range(args.seeds)]
    with Pool(args.processes) as pool:
        runs = pool.map(one_run, tasks)
    for path in args.spaces:
        optimum = replay_lib.load(path).optimum
        for sampler in args.samplers:
            chosen = [r for p, s, r in runs if (p, s) == (str(path), sampler)]
            to = [replay_lib.evaluations_to(r.values, optimum, 0.02) for r in chosen]
            seconds = replay_lib.median_seconds_to(chosen, optimum, 0.02)
            evals = statistics.median(float("inf") if t is None else t for t in to)
            default = sum(
                t is not None and t <= replay_lib.sweep_stop(r.values, 64, 32) for t, r in zip(to, chosen, strict=True)
            )
            within = sum(t is not None for t in to)
            row: dict[str, Any] = {
                "space": path.name,
                "sampler": sampler,
                "median_seconds_to_2pct": seconds,
                "median_to_2pct": evals,
                "reach_64_32": default / len(chosen),
                "reach_200": within / len(chosen),
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
