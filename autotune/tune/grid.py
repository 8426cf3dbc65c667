"""The grid sampler: every valid point of a space once, in a seeded scattered order, generated lazily."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from autotune.core.space import Config, Space, config_key

# Optuna's GridSampler is handed the whole cartesian product up front: for GEMV that is 10.6 million
# points (2.6 GB, over a second of CPU per proposal), most of which the constraint rules out. Here a
# point is an index into that product; a seeded bijection of [0, size) visits the indices in a
# scattered order (a study with a budget far below the grid's size samples all of it, as Optuna's
# shuffled grid did), and each index is decoded and checked only when the walk reaches it. Memory is
# a few integers whatever the space's size.
_MASK64 = 2**64 - 1
_ROUNDS = 4


def _mix(value: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash."""
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


class Permutation:
    """A seeded bijection of range(size): a balanced Feistel network over the next even power of
    two, walked again from any value that lands outside the range (at most 4x the size, so a few
    steps on average)."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        bits = max(2, (size - 1).bit_length())
        self._half = (bits + 1) // 2
        self._mask = (1 << self._half) - 1
        self._keys = [_mix((seed & _MASK64) ^ _mix(round_ + 1)) for round_ in range(_ROUNDS)]

    def _step(self, value: int) -> int:
        left, right = value >> self._half, value & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mix(right ^ key) & self._mask)
        return (left << self._half) | right

    def __call__(self, index: int) -> int:
        value = self._step(index)
        while value >= self.size:  # a bijection of the larger domain: this walk ends inside the range
            value = self._step(value)
        return value


class ValidGridSampler(BaseSampler):
    """Proposes each valid point of `space` once, skipping points the study already holds (stored
    history, warm-start configs); enqueued trials pass through untouched. The study asks
    is_exhausted() before each proposal: there is no stop from inside the sampler."""

    def __init__(self, space: Space, seed: int | None = None) -> None:
        self._space = space
        self._names = space.names
        self._choices: list[Sequence[int]] = [p.choices for p in space.params]
        self.size = math.prod(len(c) for c in self._choices)
        self._order = Permutation(self.size, int.from_bytes(os.urandom(8), "little") if seed is None else seed)
        self._cursor = 0  # positions of the walk before it are used, ruled out or already in the study
        self._ahead: Config | None = None  # the next valid point, found by is_exhausted()
        self._given: dict[int, Config] = {}  # trial number -> the point it was handed
        self._keys: dict[int, str] = {}  # finished trial number -> its config's key

    def _decode(self, index: int) -> Config:
        config: Config = {}
        for name, choices in zip(reversed(self._names), reversed(self._choices), strict=True):
            index, digit = divmod(index, len(choices))
            config[name] = choices[digit]
        return {name: config[name] for name in self._names}

    def _seen(self, study: Study) -> set[str]:
        """Keys of every config the study holds or has queued. A finished trial's key is kept by
        trial number: recomputing them all on every proposal made a long study quadratic."""
        seen = set()
        for trial in study.get_trials(deepcopy=False):
            key = self._keys.get(trial.number)
            if key is None:
                params = trial.system_attrs.get("fixed_params") or trial.params
                if not params:
                    continue
                key = config_key(params)
                if trial.state.is_finished():
                    self._keys[trial.number] = key
            seen.add(key)
        return seen

    def _find(self, study: Study) -> Config | None:
        """The next valid point not in the study, left in `_ahead` until a trial takes it."""
        seen = self._seen(study)
        if self._ahead is not None and config_key(self._ahead) not in seen:
            return self._ahead
        self._ahead = None
        while self._cursor < self.size:
            config = self._decode(self._order(self._cursor))
            self._cursor += 1
            if config_key(config) not in seen and self._space.constraint(config) is None:
                self._ahead = config
                break
        return self._ahead

    def is_exhausted(self, study: Study) -> bool:
        return self._find(study) is None

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        if "fixed_params" in trial.system_attrs:
            return  # an enqueued config (warm start, a retry): Optuna fills it in
        config = self._find(study)
        self._ahead = None
        if config is not None:
            self._given[trial.number] = config

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        config = self._given.get(trial.number)
        if config is not None and param_name in config:
            return config[param_name]
        # Asked past the end of the grid (the study checks is_exhausted() first, so only by a caller
        # that did not): a point already measured, which the study recognises and does not redo.
        assert isinstance(param_distribution, CategoricalDistribution)
        return param_distribution.choices[0]

    def after_trial(self, study: Study, trial: FrozenTrial, state: Any, values: Sequence[float] | None) -> None:
        self._given.pop(trial.number, None)
