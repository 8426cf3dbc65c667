"""The default sampler (tpe-fresh) with another share of local moves, replayed with each config's recorded
compile and measurement times on 16 compile slots (scripts/search_replay.py): does climbing from the
leader more often make up for proposals asked 16 results before they are measured?

    python experiments/search_local_share.py 0.8 --seeds 50 conv=A4000.json.gz gemm=RTX_3090.json.gz

Prints, per space: median evaluations to 2% of the optimum, the share of runs within 2% under the
unseen budget's stop (128 trials, patience 64), within 200, and the median simulated seconds to 2%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import search_replay as replay_lib

from autotune.tune import search


def _one(task: tuple[str, int, float, int]) -> replay_lib.Run:
    path, seed, share, workers = task
    search.FRESH_LOCAL_SHARE = share  # what Study hands tpe-fresh's sampler
    return replay_lib.run_study(replay_lib.load(Path(path)), seed, 200, "tpe-fresh", workers, True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("share", type=float, help="the share of asks answered by a one-step move of the leader")
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    for spec in args.spaces:
        name, path = spec.split("=", 1)
        with multiprocessing.Pool(args.processes) as pool:
            runs = pool.map(_one, [(path, seed, args.share, args.workers) for seed in range(args.seeds)])
        optimum = replay_lib.load(Path(path)).optimum
        row = replay_lib.summarise([run.values for run in runs], optimum)
        print(
            f"{name} share {args.share}: median evaluations to 2% {row['median_to_2pct']}, "
            f"within 128/64 {row['reach_2pct_default_budget']:.2f}, within 200 {row['reach_2pct_at_200']:.2f}, "
            f"median seconds {replay_lib.median_seconds_to(runs, optimum, 0.02)}"
        )


if __name__ == "__main__":
    main()
