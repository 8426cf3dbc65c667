"""The default sampler (tpe-fresh) choosing what to compile with the pair model, replayed with each config's
recorded compile and measurement times on 16 compile slots (scripts/search_replay.py). Where compiling
dominates, only the config that just compiled is ready, so ranking the compiled candidates (what tpe-fresh
does) has nothing to choose from; here the pair model (autotune/tune/ranking.py), refitted after every
result, chooses before the compile instead:

  --screen-top K   of TPE's K best candidates by its acquisition, the one the model predicts fastest;
  --screen-local   a local move is the leader's one-step move the model predicts fastest, not a random one.

    python experiments/search_screened_asks.py --screen-top 4 --seeds 50 conv=A4000.json.gz

Prints, per space: median evaluations to 2% of the optimum, the share of runs within 2% under the unseen
budget's stop (128 trials, patience 64), within 200, and the median simulated seconds to 2%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import search_replay as replay_lib

from autotune.core.space import Config, Space
from autotune.tune import ranking, search, valid_tpe


class ScreenedSampler(valid_tpe.ValidTPESampler):
    """tpe-fresh's sampler whose choices the pair model `screen` (set by the study) breaks."""

    def __init__(self, space: Space, seed: int | None, top: int, local: bool) -> None:
        super().__init__(space, seed, local=valid_tpe.FRESH_LOCAL_SHARE, constant_liar=False)
        self.top, self.greedy_local = top, local
        self.screen: Callable[[Config], float] | None = None

    def _compute_acquisition_func(self, samples: Any, mpe_below: Any, mpe_above: Any) -> np.ndarray:
        scores = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        if self.screen is None or self.top < 2:
            return scores
        names = list(samples)
        best = [i for i in np.argsort(-scores)[: self.top] if np.isfinite(scores[i])]
        if len(best) > 1:

            def config(i: int) -> Config:
                return {**self._fixed, **{n: self._choices[n][int(samples[n][i])] for n in names}}

            scores[min(best, key=lambda i: self.screen(config(i)))] = np.inf  # type: ignore[misc]
        return scores

    def _local_move(self, study: Any) -> Config | None:
        if not self.greedy_local or self.screen is None:
            return super()._local_move(study)
        finished = study.get_trials(deepcopy=False, states=(valid_tpe.TrialState.COMPLETE,))
        if len(finished) < valid_tpe.LOCAL_AFTER or self._rng_valid.random() >= self._local:
            return None
        leader = min(finished, key=lambda t: float("inf") if t.value is None else t.value)
        moves = self._moves(leader)
        return min(moves, key=self.screen) if moves else None


def _one(task: tuple[str, int, int, bool, int]) -> replay_lib.Run:
    path, seed, top, local, workers = task
    made = search.make_sampler

    def make(name: str, space: Space, seed: int | None) -> Any:
        return ScreenedSampler(space, seed, top, local) if name == "tpe-fresh" else made(name, space, seed)

    finish = search.Study._finish

    def finish_and_refit(self: search.Study, config: Config, compiled: Any) -> Any:
        outcome = finish(self, config, compiled)
        sampler = self._study.sampler
        if isinstance(sampler, ScreenedSampler) and len(self._results) >= ranking.RANK_AFTER:
            sampler.screen = ranking.PairModel(self.space, self._results).predict
        return outcome

    search.make_sampler = make  # type: ignore[assignment]
    search.Study._finish = finish_and_refit  # type: ignore[method-assign]
    return replay_lib.run_study(replay_lib.load(Path(path)), seed, 200, "tpe-fresh", workers, True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--screen-top", type=int, default=0)
    parser.add_argument("--screen-local", action="store_true")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    for spec in args.spaces:
        name, path = spec.split("=", 1)
        tasks = [(path, seed, args.screen_top, args.screen_local, args.workers) for seed in range(args.seeds)]
        with multiprocessing.Pool(args.processes) as pool:
            runs = pool.map(_one, tasks)
        optimum = replay_lib.load(Path(path)).optimum
        row = replay_lib.summarise([run.values for run in runs], optimum)
        print(
            f"{name} top {args.screen_top} local {args.screen_local}: median evaluations to 2% "
            f"{row['median_to_2pct']}, within 128/64 {row['reach_2pct_default_budget']:.2f}, "
            f"within 200 {row['reach_2pct_at_200']:.2f}, "
            f"median seconds {replay_lib.median_seconds_to(runs, optimum, 0.02)}"
        )


if __name__ == "__main__":
    main()
