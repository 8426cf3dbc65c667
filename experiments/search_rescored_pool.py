"""Does measuring the most promising compiled candidate first make up for trials pending? A sweep keeps
as many proposals pending as the compile pool has workers (16 on the GPU machine) and measures them in
the order they were asked, so most measured configs were chosen knowing little of the latest results.
Here the Study measures instead, among the compiled candidates, the one a nearest-neighbour model of
the results so far predicts fastest (k nearest measured configs in the space's index coordinates, their
mean time; a failed config counts as twice the slowest), and drops a candidate passed over AGE times
(its compile wasted, its slot asked again); `--model additive` predicts instead from one effect per
parameter value on log time (main effects, backfitted), `--model blend` from the geometric mean of
both, `--model pairwise` from the main effects plus one shrunk effect per pair of parameter values.
Replayed as scripts/bench_search_replay.py replays the product's Study (CPU only), 16 pending, tpe-local;
prints one row per space (as JSON) and the compiles made per measurement. Findings in docs/findings.md
("Search on spaces never seen").

    python experiments/search_rescored_pool.py gemm_rtx3090=RTX_3090.json.gz conv_a4000=A4000.json.gz \
        [--model knn|additive|blend|pairwise] [--workers 16] [--seeds 50]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_search_replay import run_all
from optuna.trial import TrialState

from autotune.core.space import Config
from autotune.tune import search

SETTINGS: dict[str, Any] = {
    "k": 3,
    "age": 32,
    "after": 10,
    "fail": 2.0,
    "weighted": False,
    "model": "knn",
    "shrink": 2.0,
}
COUNTS = {"dropped": 0, "measured": 0}
TALLY = Path("/tmp/search_rescored_pool.counts")  # each run's (dropped, measured), from the pool's processes


class RescoredPending(deque):  # type: ignore[type-arg]
    """The Study's pending proposals; popleft() gives the one predicted fastest (FIFO until `after`
    results) and drops those passed over `age` times."""

    study: Any = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ages: dict[int, int] = {}
        self.owner = RescoredPending.study

    def popleft(self) -> Any:
        owner = self.owner
        results = getattr(owner, "_replay_results", [])
        if owner is None or len(results) < SETTINGS["after"] or len(self) == 1:
            return super().popleft()
        index = min(range(len(self)), key=lambda i: predicted(owner, self[i][1], results))
        chosen = self[index]
        del self[index]
        for entry in list(self):
            key = id(entry[0])
            self.ages[key] = self.ages.get(key, 0) + 1
            if self.ages[key] > SETTINGS["age"]:
                self.remove(entry)
                owner._study.tell(entry[0], state=TrialState.FAIL)
                COUNTS["dropped"] += 1
        COUNTS["measured"] += 1
        return chosen


def coordinates(study: Any, config: Config) -> list[float]:
    choices = study.space.choices()
    return [choices[name].index(config[name]) / max(len(choices[name]) - 1, 1) for name in sorted(choices)]


def predicted(study: Any, config: Config, results: list[tuple[list[float], float | None]]) -> float:
    if SETTINGS["model"] == "additive":
        return additive(study, config, results)
    if SETTINGS["model"] == "pairwise":
        return pairwise(study, config, results)
    if SETTINGS["model"] == "blend":  # the geometric mean of both predictions
        return math.sqrt(additive(study, config, results) * nearest(study, config, results))
    return nearest(study, config, results)


def nearest(study: Any, config: Config, results: list[tuple[list[float], float | None]]) -> float:
    here = coordinates(study, config)
    worst = max((v for _, v in results if v is not None), default=1.0)

    def distance(result: tuple[list[float], float | None]) -> float:
        return sum(abs(a - b) for a, b in zip(result[0], here, strict=True))

    near = sorted(results, key=distance)[: SETTINGS["k"]]
    weights = [1.0 / (distance(r) + 0.05) if SETTINGS["weighted"] else 1.0 for r in near]
    values = [v if v is not None else SETTINGS["fail"] * worst for _, v in near]
    return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)


_FITTED: dict[tuple[int, int], tuple[float, list[dict[float, float]]]] = {}


def additive(study: Any, config: Config, results: list[tuple[list[float], float | None]]) -> float:
    """log time as a sum of one effect per parameter value (main effects, three rounds of backfitting
    over the results so far, fitted once per result; a value never measured adds nothing), a failed
    config at `fail` x the slowest: how each parameter alone moves the time, blind to distances."""
    key = (id(results), len(results))
    if key not in _FITTED:
        _FITTED.clear()
        _FITTED[key] = _fit(results)
    mean, effects = _FITTED[key]
    here = coordinates(study, config)
    return math.exp(mean + sum(effect.get(value, 0.0) for effect, value in zip(effects, here, strict=True)))


def _fit(results: list[tuple[list[float], float | None]]) -> tuple[float, list[dict[float, float]]]:
    worst = max((v for _, v in results if v is not None), default=1.0)
    rows = [(point, math.log(v if v is not None else SETTINGS["fail"] * worst)) for point, v in results]
    mean = sum(y for _, y in rows) / len(rows)
    dims = len(rows[0][0])
    effects: list[dict[float, float]] = [{} for _ in range(dims)]
    fitted = [0.0] * len(rows)  # each row's sum of effects
    for _ in range(3):
        for d in range(dims):
            sums: dict[float, list[float]] = {}
            for (point, y), total in zip(rows, fitted, strict=True):
                rest = total - effects[d].get(point[d], 0.0)
                sums.setdefault(point[d], []).append(y - mean - rest)
            new = {value: sum(r) / len(r) for value, r in sums.items()}
            fitted = [t - effects[d].get(pt[d], 0.0) + new[pt[d]] for (pt, _), t in zip(rows, fitted, strict=True)]
            effects[d] = new
    return mean, effects


_PAIRS: dict[tuple[int, int], Any] = {}


def pairwise(study: Any, config: Config, results: list[tuple[list[float], float | None]]) -> float:
    """The additive model plus one effect per pair of parameter values (every pair of parameters), each
    shrunk toward 0 by `shrink` pseudo-results (a pair seen once moves the prediction little): main
    effects and interactions backfitted together over the results so far."""
    key = (id(results), len(results))
    if key not in _PAIRS:
        _PAIRS.clear()
        _PAIRS[key] = _fit_pairwise(results)
    mean, effects, pairs = _PAIRS[key]
    here = coordinates(study, config)
    total = mean + sum(effect.get(value, 0.0) for effect, value in zip(effects, here, strict=True))
    for (i, j), cells in pairs.items():
        total += cells.get((here[i], here[j]), 0.0)
    return math.exp(total)


def _fit_pairwise(results: list[tuple[list[float], float | None]]) -> Any:
    mean, effects = _fit(results)
    worst = max((v for _, v in results if v is not None), default=1.0)
    rows = [(point, math.log(v if v is not None else SETTINGS["fail"] * worst)) for point, v in results]
    dims = len(rows[0][0])
    shrink = SETTINGS["shrink"]
    # Only parameters that take more than one value in the results can interact.
    varied = [d for d in range(dims) if len({p[d] for p, _ in rows}) > 1]
    pairs: dict[tuple[int, int], dict[tuple[float, float], float]] = {
        (i, j): {} for a, i in enumerate(varied) for j in varied[a + 1 :]
    }
    fitted = [sum(effects[d].get(p[d], 0.0) for d in range(dims)) for p, _ in rows]
    for _ in range(2):
        for (i, j), cells in pairs.items():
            sums: dict[tuple[float, float], list[float]] = {}
            for (point, y), total in zip(rows, fitted, strict=True):
                cell = (point[i], point[j])
                sums.setdefault(cell, []).append(y - mean - (total - cells.get(cell, 0.0)))
            new = {cell: sum(r) / (len(r) + shrink) for cell, r in sums.items()}
            fitted = [
                t - cells.get((p[i], p[j]), 0.0) + new[(p[i], p[j])] for (p, _), t in zip(rows, fitted, strict=True)
            ]
            pairs[(i, j)] = new
    return mean, effects, pairs


def install() -> None:
    made = search.Study.__init__
    finish = search.Study._finish
    run = search.Study.run

    def counted_run(self: Any, budget: Any) -> Any:
        COUNTS.update(dropped=0, measured=0)
        result = run(self, budget)
        with TALLY.open("a") as tally:
            tally.write(f"{COUNTS['dropped']} {result.measured}\n")
        return result

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self._replay_results = []
        RescoredPending.study = self

    def finished(self: Any, config: Config, compiled: Any) -> Any:
        outcome = finish(self, config, compiled)
        self._replay_results.append((coordinates(self, config), outcome.time_us))
        return outcome

    search.Study.__init__ = init  # type: ignore[method-assign]
    search.Study.run = counted_run  # type: ignore[method-assign]
    search.Study._finish = finished  # type: ignore[method-assign]
    search.deque = RescoredPending  # type: ignore[attr-defined]  # run()'s pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spaces", nargs="+", help="NAME=PATH of a Kernel Tuner cache file")
    parser.add_argument("--k", type=int, default=3, help="nearest measured configs averaged")
    parser.add_argument("--age", type=int, default=32, help="measurements a candidate may be passed over")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--fail", type=float, default=2.0, help="a failed neighbour counts as this times the slowest")
    parser.add_argument("--weighted", action="store_true", help="neighbours weighted by 1 / (distance + 0.05)")
    parser.add_argument(
        "--model",
        choices=["knn", "additive", "blend", "pairwise"],
        default="knn",
        help="how a candidate's time is predicted",
    )
    parser.add_argument("--shrink", type=float, default=2.0, help="pairwise: pseudo-results a pair effect is shrunk by")
    parser.add_argument("--strategy", default="tpe-local")
    parser.add_argument("--workers", type=int, default=16, help="the compile pool: proposals kept pending")
    args = parser.parse_args()
    SETTINGS.update(
        k=args.k, age=args.age, fail=args.fail, weighted=args.weighted, model=args.model, shrink=args.shrink
    )
    install()
    TALLY.unlink(missing_ok=True)
    spaces = {name: Path(path) for name, path in (entry.split("=", 1) for entry in args.spaces)}
    run_all(spaces, [args.strategy], args.seeds, 200, 2, args.workers)  # prints a row per space
    pairs = [tuple(map(int, line.split())) for line in TALLY.read_text().splitlines()]
    dropped, measured = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    print({"compiles_per_measurement": round(1 + dropped / max(measured, 1), 3)})


if __name__ == "__main__":
    main()
