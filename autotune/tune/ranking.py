"""Which compiled candidate to measure next: a model of log time over the results so far.

A sweep keeps as many proposals pending as the compile pool has workers, and most of them were asked
for knowing little of the latest results. Measured in the order asked, every one costs a measurement;
ranked, the compiled one the model predicts fastest goes first, and a compiled candidate passed over more
than `DROP_AFTER` times is dropped (its compile wasted, not a measurement). Replayed on public
brute-forced spaces (docs/findings.md, "Search on spaces never seen"), with 16 pending, this took the
measurements to 2% of the optimum from 129 to about 70 on CLBlast's GEMM and from 118 to about 85 on a
convolution.

The model (`PairModel`): each parameter's value adds one effect to the mean log time, and each pair of
values of two parameters one more, shrunk toward 0 by `PAIR_SHRINK` pseudo-results so that a pair seen
once or twice moves the prediction little (all fitted by backfitting over the results; a value or pair
never measured adds nothing); a failed config counts as `FAILED_AS` times the slowest. Main effects alone
(`AdditiveModel`) are blind to interactions, and the optimum of both replayed spaces lies in one: with
them GEMM took 82.5 measurements. Good at ranking a few candidates a sampler spread over the space, bad
at choosing where to look (the main-effects model proposing the configs took twice the measurements).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from autotune.core.space import Config, Space

RANK_AFTER = 10  # results before the model orders the pending candidates (first in, first out before)
DROP_AFTER = 32  # measurements a candidate may be passed over before it is dropped
FAILED_AS = 2.0  # a failed config's time, in multiples of the slowest measured
_ROUNDS = 3  # backfitting passes of the main effects
_PAIR_ROUNDS = 2  # backfitting passes of the pair effects, after the main effects
PAIR_SHRINK = 2.0  # pseudo-results of no effect each pair effect is averaged with
# "tpe-fresh" ranks only the FRESH compiled candidates asked last. Its TPE proposes without constant liar (the
# pending trials do not count as bad), so the latest proposal is what a study with one trial pending would
# measure next: it knows every result so far. With the liar, a ranked study's pending trials are mostly
# candidates the model passed over, and counting them as bad steered TPE away from where they lie. Replayed
# with 16 pending (docs/findings.md): see the numbers there.
FRESH = 2
# A fresh study passes over its older candidates for good, so they are dropped later: dropped, their slots
# are asked again all at once, from the same results, and all but the last FRESH of those go stale in turn.
FRESH_DROP_AFTER = 64


class AdditiveModel:
    """log time = mean + one effect per (parameter, value), fitted on (config, time or None) results."""

    def __init__(self, space: Space, results: Sequence[tuple[Mapping[str, int], float | None]]) -> None:
        self._names = sorted(space.choices())
        times = [t for _, t in results if t is not None]
        worst = max(times, default=1.0)
        rows = [(self._point(c), math.log(t if t is not None else FAILED_AS * worst)) for c, t in results]
        self._rows = rows
        self._mean = sum(y for _, y in rows) / len(rows) if rows else 0.0
        self._effects: list[dict[int, float]] = [{} for _ in self._names]
        fitted = [0.0] * len(rows)  # each row's sum of effects
        for _ in range(_ROUNDS):
            for d in range(len(self._names)):
                residuals: dict[int, list[float]] = {}
                for (point, y), total in zip(rows, fitted, strict=True):
                    rest = total - self._effects[d].get(point[d], 0.0)
                    residuals.setdefault(point[d], []).append(y - self._mean - rest)
                new = {value: sum(r) / len(r) for value, r in residuals.items()}
                fitted = [
                    t - self._effects[d].get(p[d], 0.0) + new[p[d]] for (p, _), t in zip(rows, fitted, strict=True)
                ]
                self._effects[d] = new
        self._fitted = fitted

    def _point(self, config: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(config[name] for name in self._names)

    def predict(self, config: Config) -> float:
        """The predicted time (the results' unit)."""
        return math.exp(self._log_time(self._point(config)))

    def _log_time(self, point: tuple[int, ...]) -> float:
        return self._mean + sum(e.get(v, 0.0) for e, v in zip(self._effects, point, strict=True))


class PairModel(AdditiveModel):
    """The main effects, then one effect per pair of values of two parameters (each pair of parameters
    that takes more than one value in the results), shrunk by PAIR_SHRINK and backfitted on what the
    main effects leave."""

    def __init__(self, space: Space, results: Sequence[tuple[Mapping[str, int], float | None]]) -> None:
        super().__init__(space, results)
        rows, fitted = self._rows, list(self._fitted)
        varied = [d for d in range(len(self._names)) if len({point[d] for point, _ in rows}) > 1]
        self._pairs: dict[tuple[int, int], dict[tuple[int, int], float]] = {
            (i, j): {} for n, i in enumerate(varied) for j in varied[n + 1 :]
        }
        for _ in range(_PAIR_ROUNDS):
            for (i, j), cells in self._pairs.items():
                residuals: dict[tuple[int, int], list[float]] = {}
                for (point, y), total in zip(rows, fitted, strict=True):
                    cell = (point[i], point[j])
                    residuals.setdefault(cell, []).append(y - self._mean - (total - cells.get(cell, 0.0)))
                new = {cell: sum(r) / (len(r) + PAIR_SHRINK) for cell, r in residuals.items()}
                fitted = [
                    t - cells.get((p[i], p[j]), 0.0) + new[(p[i], p[j])] for (p, _), t in zip(rows, fitted, strict=True)
                ]
                self._pairs[(i, j)] = new

    def _log_time(self, point: tuple[int, ...]) -> float:
        pairs = sum(cells.get((point[i], point[j]), 0.0) for (i, j), cells in self._pairs.items())
        return super()._log_time(point) + pairs
