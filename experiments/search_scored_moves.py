"""Does TPE pick better local moves than a coin does? `tpe-local` (autotune/tune/valid_tpe.py) moves the
best config one step, at random, on 30% of its asks. Here no ask is a coin's: every ask scores TPE's
own candidates together with the valid new one-step moves of the best --top finished configs by TPE's
acquisition (l(x)/g(x)), and proposes the highest. Trials still running count, through constant liar,
as bad, so the moves next to what is pending score lower and the 16 pending spread out. Replayed as
scripts/bench_search_replay.py replays the product's Study (CPU only), 16 trials pending; prints one
row per space (as JSON). Findings in docs/findings.md ("Search on spaces never seen").

    python experiments/search_scored_moves.py gemm_rtx3090=RTX_3090.json.gz conv_a4000=A4000.json.gz [--top 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_search_replay import run_all
from optuna.trial import TrialState

from autotune.tune import valid_tpe

SETTINGS = {"top": 3}
_SCORE = valid_tpe.ValidTPESampler._compute_acquisition_func


def scored(self: valid_tpe.ValidTPESampler, samples: dict[str, np.ndarray], below: Any, above: Any) -> np.ndarray:
    """TPE's candidates and the leaders' one-step moves, scored alike (invalid or taken: -inf)."""
    study = self._scoring_study
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    leaders = sorted(finished, key=lambda t: float("inf") if t.value is None else t.value)[: int(SETTINGS["top"])]
    names = list(samples)
    moves = [move for leader in leaders for move in self._moves(leader)]
    if moves and len(finished) >= valid_tpe.LOCAL_AFTER:
        for name in names:  # in place: TPE's _compare picks from this same dict
            extra = np.array([self._choices[name].index(move[name]) for move in moves], dtype=samples[name].dtype)
            samples[name] = np.concatenate([samples[name], extra])
    return _SCORE(self, samples, below, above)


def sample_relative(self: valid_tpe.ValidTPESampler, study: Any, trial: Any, search_space: Any) -> Any:
    self._scoring_study = study  # the acquisition hook sees only the estimators
    return _SAMPLE(self, study, trial, search_space)


_SAMPLE = valid_tpe.ValidTPESampler.sample_relative


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--top", type=int, default=3, help="the one-step moves of this many best configs")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    SETTINGS.update(top=args.top)
    valid_tpe.ValidTPESampler._compute_acquisition_func = scored  # type: ignore[method-assign]
    valid_tpe.ValidTPESampler.sample_relative = sample_relative  # type: ignore[method-assign]
    spaces = {name: Path(path) for name, path in (entry.split("=", 1) for entry in args.spaces)}
    # tpe-valid: the sampler without coin-flipped moves; every ask goes through the scoring above.
    run_all(spaces, ["tpe-valid"], args.seeds, 200, 2, args.workers)  # prints a row per space


if __name__ == "__main__":
    main()
