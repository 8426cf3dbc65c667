"""Do proposals chosen by the additive model beat TPE's? The rescored pool (experiments/search_rescored_pool.py)
lets a main-effects model of log time pick which pending candidate is measured next, but the candidates
themselves still come from TPE (with one-step moves of the best), and TPE's constant liar steers them
away from the leaders while their moves are pending. Here, after AFTER results, a share of the asks is
answered by the same model instead: among RANDOM uniformly drawn valid new configs and every valid new
one-step move of the TOP best configs so far, the one it predicts fastest (pending configs count as
taken, so a batch of asks spreads over the model's best guesses). The rest of the asks stay TPE's.
Replayed as scripts/bench_search_replay.py replays the product's Study, 16 pending, with the rescored
pool's additive model ordering what is measured.

    python experiments/search_model_proposals.py gemm_rtx3090=RTX_3090.json.gz conv_a4000=A4000.json.gz \
        [--share 0.5] [--random 256] [--top 3] [--model additive|pairwise] [--seeds 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_rescored_pool as pool
from optuna.trial import TrialState

from autotune.core.space import Config, Space
from autotune.tune import search
from autotune.tune.valid_tpe import LOCAL_SHARE, ValidTPESampler

SETTINGS: dict[str, Any] = {"share": 0.5, "random": 256, "top": 3, "after": 10}


class ModelSampler(ValidTPESampler):
    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        owner = pool.RescoredPending.study
        results = getattr(owner, "_replay_results", [])
        if (
            "fixed_params" in trial.system_attrs
            or not search_space
            or len(results) < SETTINGS["after"]
            or self._rng_valid.random() >= SETTINGS["share"]
        ):
            return super().sample_relative(study, trial, search_space)
        self._taken = self._keys(study)
        config = self._model_pick(study, owner, results)
        if config is None:
            return super().sample_relative(study, trial, search_space)
        self._given[trial.number] = config
        return {name: value for name, value in config.items() if name in search_space}

    def _model_pick(self, study: Any, owner: Any, results: list[Any]) -> Config | None:
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        leaders = sorted((t for t in finished if t.value is not None), key=lambda t: t.value)[: SETTINGS["top"]]
        candidates = [move for leader in leaders for move in self._moves(leader)]
        for _ in range(SETTINGS["random"]):
            drawn = self._random_new()
            if drawn is None:
                break
            candidates.append(drawn)
        if not candidates:
            return None
        return min(candidates, key=lambda c: pool.predicted(owner, c, results))


def make_sampler(name: str, space: Space, seed: int | None) -> Any:
    if name == "tpe-model":
        return ModelSampler(space, seed, local=LOCAL_SHARE)
    return original(name, space, seed)


original = search.make_sampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--share", type=float, default=0.5, help="of the asks, answered by the model")
    parser.add_argument("--random", type=int, default=256, help="uniform valid new configs among the candidates")
    parser.add_argument("--top", type=int, default=3, help="leaders whose one-step moves are candidates")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=16, help="the compile pool: proposals kept pending")
    parser.add_argument(
        "--model", choices=["additive", "pairwise"], default="additive", help="proposes and orders the measurements"
    )
    args = parser.parse_args()
    SETTINGS.update(share=args.share, random=args.random, top=args.top)
    pool.SETTINGS.update(model=args.model)
    pool.install()
    search.make_sampler = make_sampler  # type: ignore[assignment]
    replay_lib = sys.modules["search_replay"]
    replay_lib.STRATEGIES["tpe-model"] = lambda replay, seed, cap, workers, timed: replay_lib.run_study(
        replay, seed, cap, "tpe-model", workers, timed
    )
    spaces = {name: Path(path) for name, path in (entry.split("=", 1) for entry in args.spaces)}
    pool.run_all(spaces, ["tpe-model"], args.seeds, 200, 2, args.workers)  # prints a row per space


if __name__ == "__main__":
    main()
