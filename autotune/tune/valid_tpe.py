"""TPE that proposes only valid, new configs of a space.

Optuna's TPE knows each parameter's choices, not the constraint that ties them: on GEMM-like spaces
most of its proposals break the constraint, and a trial told as failed teaches its model nothing, so
it keeps proposing them (and configs already measured). Here TPE draws its usual candidates from the
density of the good trials, but a candidate that is invalid or already in the study scores nothing,
so the proposal is the best candidate the study can actually use. Startup trials, and the rare ask
where no candidate is usable, take a uniformly drawn valid config that is new to the study.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from autotune.core.space import Config, Space, config_key

# TPE's default is 24 candidates; with most of them invalid or taken, more are drawn to leave about as many usable.
CANDIDATES = 256
LOCAL_SHARE = 0.3  # of the proposals, for the "tpe-local" and "tpe-ranked" samplers
FRESH_LOCAL_SHARE = 0.5  # for "tpe-fresh" (autotune/tune/search.py), where 0.3 took more measurements
LOCAL_AFTER = 15  # finished trials before the first local move: a best worth climbing from
_RANDOM_DRAWS = 2000  # uniform draws for a new valid config before giving up (Study's kick then steps in)


class ValidTPESampler(TPESampler):
    def __init__(
        self,
        space: Space,
        seed: int | None = None,
        candidates: int = CANDIDATES,
        local: float = 0.0,
        constant_liar: bool = True,
    ) -> None:
        super().__init__(seed=seed, multivariate=True, constant_liar=constant_liar, n_ei_candidates=candidates)
        self._local = local
        self._space = space
        self._choices = space.choices()
        # Optuna leaves parameters of a single choice out of TPE's model: their value is that choice.
        self._fixed = {name: values[0] for name, values in self._choices.items() if len(values) == 1}
        self._rng_valid = random.Random(seed)
        self._taken: set[str] = set()  # keys of the configs in the study, for the ask under way
        self._given: dict[int, Config] = {}  # trial number -> the config it was handed

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if "fixed_params" in trial.system_attrs:
            return {}  # an enqueued config (warm start, a kick, a retry): Optuna fills it in
        self._taken = self._keys(study)
        config = self._local_move(study) if search_space and self._local > 0 else None
        if config is None:
            proposal = super().sample_relative(study, trial, search_space) if search_space else {}
            config = {**self._fixed, **{name: int(value) for name, value in proposal.items()}}
        if config.keys() != self._choices.keys() or not self._usable(config):
            config = self._random_new() or config
        if config.keys() == self._choices.keys():
            self._given[trial.number] = config
        return {name: value for name, value in config.items() if name in search_space}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        config = self._given.get(trial.number)
        if config is not None and param_name in config:
            return config[param_name]
        return super().sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: Study, trial: FrozenTrial, state: Any, values: Any) -> None:
        self._given.pop(trial.number, None)
        super().after_trial(study, trial, state, values)

    # A private hook of Optuna's TPESampler (there in 5.0): where a version lacks it, proposals stay valid and
    # new all the same (an unusable one is replaced by a uniform draw), only less guided.
    def _compute_acquisition_func(
        self, samples: dict[str, np.ndarray], mpe_below: _ParzenEstimator, mpe_above: _ParzenEstimator
    ) -> np.ndarray:
        scores = super()._compute_acquisition_func(samples, mpe_below, mpe_above)
        names = list(samples)
        for i in range(scores.size):
            config = {**self._fixed, **{name: self._choices[name][int(samples[name][i])] for name in names}}
            if not self._usable(config):
                scores[i] = -np.inf
        return scores

    def _local_move(self, study: Study) -> Config | None:
        """A valid new config one step from the best finished trial, on `local` of the asks."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(finished) < LOCAL_AFTER or self._rng_valid.random() >= self._local:
            return None
        best = min(finished, key=lambda t: float("inf") if t.value is None else t.value)
        moves = self._moves(best)
        return self._rng_valid.choice(moves) if moves else None

    def _moves(self, trial: FrozenTrial) -> list[Config]:
        """The valid configs new to the study one step from `trial`'s: one parameter moved to a
        neighbouring choice."""
        base = {**self._fixed, **{name: int(value) for name, value in trial.params.items()}}
        moves = []
        for name, choices in self._choices.items():
            at = choices.index(base[name])
            for step in (at - 1, at + 1):
                if 0 <= step < len(choices) and self._usable(moved := {**base, name: choices[step]}):
                    moves.append(moved)
        return moves

    def _usable(self, config: Mapping[str, int]) -> bool:
        return config_key(config) not in self._taken and self._space.check(config) is None

    def _random_new(self) -> Config | None:
        for _ in range(_RANDOM_DRAWS):
            config = {name: self._rng_valid.choice(values) for name, values in self._choices.items()}
            if self._usable(config):
                return config
        return None

    @staticmethod
    def _keys(study: Study) -> set[str]:
        keys = set()
        for trial in study.get_trials(deepcopy=False):
            params = trial.system_attrs.get("fixed_params") or trial.params
            if params:
                keys.add(config_key({name: int(value) for name, value in params.items()}))
        return keys
