"""Does a larger share of local moves make up for trials pending? `tpe-local`
(autotune/tune/valid_tpe.py) moves the best config one step on 30% of its asks; here the share rises
with the trials running, 1 - 0.7 * min(1, K / running) (0.3 with up to K running, 0.91 with 15), and
the config moved is the best or, with --top 3, one of the best three. Replayed as
scripts/bench_search_replay.py replays the product's Study (CPU only), 16 trials pending; prints one
row per space (as JSON). Findings in docs/findings.md ("Search on spaces never seen").

    python experiments/search_pending_local.py gemm_rtx3090=RTX_3090.json.gz conv_a4000=A4000.json.gz [--top 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_search_replay import run_all
from optuna.study import Study
from optuna.trial import TrialState

from autotune.core.space import Config
from autotune.tune import valid_tpe

SETTINGS = {"k": 2.0, "top": 1}


def local_move(self: valid_tpe.ValidTPESampler, study: Study) -> Config | None:
    """ValidTPESampler._local_move with the share of moves rising with the trials running."""
    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(finished) < valid_tpe.LOCAL_AFTER:
        return None
    running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))) - 1  # not the one asking
    share = 1 - (1 - self._local) * min(1.0, SETTINGS["k"] / max(running, 1))
    if self._rng_valid.random() >= share:
        return None
    leaders = sorted(finished, key=lambda t: float("inf") if t.value is None else t.value)[: int(SETTINGS["top"])]
    self._rng_valid.shuffle(leaders)
    for leader in leaders:
        moves = self._moves(leader)
        if moves:
            return self._rng_valid.choice(moves)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--k", type=float, default=2.0, help="trials running up to which the share stays 0.3")
    parser.add_argument("--top", type=int, default=1, help="move one of this many best configs")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument(
        "--no-liar", action="store_true", help="TPE without constant liar (pending trials not counted as bad)"
    )
    args = parser.parse_args()
    SETTINGS.update(k=args.k, top=args.top)
    valid_tpe.ValidTPESampler._local_move = local_move  # type: ignore[method-assign]
    if args.no_liar:
        made = valid_tpe.ValidTPESampler.__init__

        def without_liar(self: valid_tpe.ValidTPESampler, *args: Any, **kwargs: Any) -> None:
            made(self, *args, **kwargs)
            self._constant_liar = False  # TPESampler's own flag (Optuna 5.0)

        valid_tpe.ValidTPESampler.__init__ = without_liar  # type: ignore[method-assign]
    spaces = {name: Path(path) for name, path in (entry.split("=", 1) for entry in args.spaces)}
    run_all(spaces, ["tpe-local"], args.seeds, 200, 2, 16)  # prints a row per space


if __name__ == "__main__":
    main()
