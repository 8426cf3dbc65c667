"""The default sampler (tpe-fresh) telling TPE what the pending trials are expected to give: each config
still compiling counts as measured at the pair model's prediction (autotune/tune/ranking.py), a
"believer" in batch Bayesian optimisation's terms, instead of not at all (tpe-fresh) or as bad (constant
liar). Replayed with each config's recorded compile and measurement times on 16 compile slots
(scripts/search_replay.py), where every measured config was asked about 16 results earlier.

    python experiments/search_believer.py --seeds 50 conv=A4000.json.gz gemm=RTX_3090.json.gz

Prints, per space and policy: median evaluations to 2% of the optimum, the share of runs within 2% under
the unseen budget's stop (128 trials, patience 64), within 200, and the median simulated seconds to 2%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import optuna
import search_replay as replay_lib
from optuna.distributions import BaseDistribution
from optuna.samplers._tpe import sampler as tpe_module
from optuna.trial import FrozenTrial, TrialState

from autotune.core.space import Space
from autotune.tune import ranking, search
from autotune.tune.valid_tpe import FRESH_LOCAL_SHARE, ValidTPESampler

POLICIES = ("fresh", "believer", "believer-floor", "believer-mean", "median")


class BelieverTPE(ValidTPESampler):
    """tpe-fresh's sampler, with the pending trials told to TPE at a predicted value."""

    def __init__(self, space: Space, seed: int | None, policy: str) -> None:
        super().__init__(space, seed, local=FRESH_LOCAL_SHARE, constant_liar=False)
        self._policy = policy

    def _sample(self, study: Any, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        done = study._get_trials(deepcopy=False, states=[TrialState.COMPLETE, TrialState.PRUNED], use_cache=True)
        running = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != trial.number and set(search_space) <= set(t.params)
        ]
        trials = list(done)
        if running and len(done) >= ranking.RANK_AFTER:
            # Failed trials left out: duplicates and dropped candidates are told as failed too.
            results = [(self._config(t), t.value) for t in done]
            model = ranking.PairModel(self._space, results)
            values = sorted(t.value for t in done if t.value is not None)
            for t in running:
                guess = model.predict(self._config(t))
                if self._policy == "believer-floor":  # never believed better than the best measured
                    guess = max(guess, values[0])
                elif self._policy == "believer-mean":  # between the prediction and the median
                    guess = (guess * values[len(values) // 2]) ** 0.5
                elif self._policy == "median":  # a constant liar that lies with the median, no model
                    guess = values[len(values) // 2]
                trials.append(
                    optuna.trial.create_trial(params=dict(t.params), distributions=dict(t.distributions), value=guess)
                )
        if self._gamma is None:
            self._gamma = tpe_module.default_gamma
        below, above = tpe_module._split_trials(study, trials, self._gamma(len(trials)))
        mpe_below = self._build_parzen_estimator(study, search_space, below, handle_below=True)
        mpe_above = self._build_parzen_estimator(study, search_space, above, handle_below=False)
        samples = mpe_below.sample(self._rng.rng, self._n_ei_candidates)
        scores = self._compute_acquisition_func(samples, mpe_below, mpe_above)
        chosen = tpe_module.TPESampler._compare(samples, scores)
        for name, dist in search_space.items():
            chosen[name] = dist.to_external_repr(chosen[name])
        return chosen

    def _config(self, t: FrozenTrial) -> dict[str, int]:
        return {**self._fixed, **{name: int(value) for name, value in t.params.items()}}


def _one(task: tuple[str, int, str, int, bool]) -> replay_lib.Run:
    path, seed, policy, workers, compile_times = task
    if policy != "fresh":
        plain = search.make_sampler

        def make(name: str, space: Space, seed: int | None) -> optuna.samplers.BaseSampler:
            return BelieverTPE(space, seed, policy) if name == "tpe-fresh" else plain(name, space, seed)

        search.make_sampler = make
    return replay_lib.run_study(replay_lib.load(Path(path)), seed, 200, "tpe-fresh", workers, compile_times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--instant", action="store_true", help="compile at once instead of in the recorded times")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    for spec in args.spaces:
        name, path = spec.split("=", 1)
        optimum = replay_lib.load(Path(path)).optimum
        for policy in args.policies.split(","):
            with multiprocessing.Pool(args.processes) as pool:
                runs = pool.map(
                    _one,
                    [
                        (path, seed, policy, args.workers, not args.instant)
                        for seed in range(args.first_seed, args.first_seed + args.seeds)
                    ],
                )
            row = replay_lib.summarise([run.values for run in runs], optimum)
            print(
                f"{name} {policy}: median evaluations to 2% {row['median_to_2pct']}, "
                f"within 128/64 {row['reach_2pct_default_budget']:.2f}, within 200 {row['reach_2pct_at_200']:.2f}, "
                f"median seconds {replay_lib.median_seconds_to(runs, optimum, 0.02)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
