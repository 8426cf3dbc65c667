"""One sweep on one GPU against the same sweep over every GPU of the machine (`--devices all`), on a
machine with several GPUs: wall time from the command's start to its end, each run into a fresh
database and a fresh kernel cache, so both compile and measure the same work.

    python scripts/bench_devices.py --out results   # writes results/devices_<gpu>.json

Each run is the CLI a user types (`python -m autotune sweep ...`), with no early stop (--patience 0),
so both spend the same trials per problem.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from autotune.bench.harness import report_path, write_json
from autotune.core.fingerprint import local_gpus
from autotune.store import models as orm
from autotune.store import open_store

STANDARD_SHAPES = Path(__file__).resolve().parents[1] / "autotune" / "ops" / "gemv" / "shapes.txt"


def timed_sweep(devices: str | None, shapes: Path, op: str, trials: int, folder: Path) -> dict[str, Any]:
    """Run one sweep (on GPU 0 alone where `devices` is None) and say how long it took and which GPU
    measured how many trials of how many problems."""
    db = folder / "sweep.db"
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(folder / "cache")}
    command = [sys.executable, "-m", "autotune", "sweep", "--op", op, "--shapes", str(shapes)]
    command += ["--trials", str(trials), "--patience", "0", "--db", str(db)]
    command += ["--devices", devices] if devices else []
    begin = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    # The database also holds the shipped records, under stand-in GPUs: count this machine's alone.
    here = {gpu.uuid for gpu in local_gpus()}
    with open_store(str(db), import_shipped=False) as store, store.db.session_scope() as session:
        uuids = {row.id: row.uuid for row in session.execute(select(orm.Gpu.id, orm.Gpu.uuid)) if row.uuid in here}
        trials = [g for g in session.scalars(select(orm.Trial.gpu_id)) if g in uuids]
        pairs = session.execute(select(orm.Trial.gpu_id, orm.Trial.problem_id).distinct())
        trials_by_gpu = Counter(uuids[g] for g in trials)
        problems_by_gpu = Counter(uuids[row.gpu_id] for row in pairs if row.gpu_id in uuids)
    return {
        "devices": devices or "0",
        "wall_s": wall,
        "trials_by_gpu": dict(trials_by_gpu),
        "problems_by_gpu": {uuid: count for uuid, count in problems_by_gpu.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="folder for devices_<gpu>.json")
    parser.add_argument("--op", default="hgemv")
    parser.add_argument("--shapes", type=Path, default=STANDARD_SHAPES, help="'M N' lines")
    parser.add_argument("--trials", type=int, default=32)
    args = parser.parse_args()
    gpus = local_gpus()
    if len(gpus) < 2:
        sys.exit(f"this machine has {len(gpus)} GPU(s): the comparison needs two or more")
    runs = []
    for devices in (None, "all"):
        with tempfile.TemporaryDirectory() as folder:
            run = timed_sweep(devices, args.shapes, args.op, args.trials, Path(folder))
        runs.append(run)
        print(f"--devices {run['devices']:>4}: {run['wall_s']:7.1f} s  problems per GPU {run['problems_by_gpu']}")
    shapes = [line for line in args.shapes.read_text().splitlines() if line.split() and not line.startswith("#")]
    report = {
        "gpu": gpus[0].name,
        "gpus": [g.name for g in gpus],
        "op": args.op,
        "problems": len(shapes),
        "trials_per_problem": args.trials,
        "runs": runs,
        "speedup": runs[0]["wall_s"] / runs[1]["wall_s"],
    }
    print(f"{len(gpus)} GPUs against one: {report['speedup']:.2f}x faster")
    path = write_json(report_path(args.out, "devices", gpus[0].name), report)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
