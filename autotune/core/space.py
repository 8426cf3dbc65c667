"""Parameter spaces as plain data: choices per parameter plus one constraint, checked before compiling."""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

Config = dict[str, int]
# Returns why a config cannot run (one line), or None when it can.
Constraint = Callable[[Mapping[str, int]], "str | None"]


def config_key(config: Mapping[str, int]) -> str:
    """Canonical text of a config: equal configs have equal keys (database de-duplication)."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Param:
    name: str
    choices: tuple[int, ...]
    compiled: bool = True  # False: a launch parameter that shares one compiled kernel
    # True: the values name kinds, not sizes or counts (GEMV's prefetch): Space.fit counts any
    # change of it as one step, where a size moves by octaves.
    categorical: bool = False


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    constraint: Constraint

    # Cached: check() and __iter__ run once per point, and spaces run to millions of points.
    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @functools.cached_property
    def _name_set(self) -> frozenset[str]:
        return frozenset(self.names)

    def choices(self) -> dict[str, tuple[int, ...]]:
        return {p.name: p.choices for p in self.params}

    def check(self, config: Mapping[str, int]) -> str | None:
        """Why `config` is not a point of this space, or None when it is valid."""
        if config.keys() != self._name_set:
            missing = [name for name in self.names if name not in config]
            unknown = [name for name in config if name not in self._name_set]
            return f"config keys differ from the space (missing {missing}, unknown {unknown})"
        for p in self.params:
            value = config[p.name]
            # Exactly int: True == 1 and 128.0 == 128 would pass `in`, and reach nvcc as "True" or "128.0".
            if type(value) is not int:
                return f"{p.name} must be an integer, got {value!r}"[:200]
            if value not in p.choices:
                return f"{p.name}={config[p.name]} is not one of {list(p.choices)} for this problem"
        return self.constraint(config)

    def fit(self, config: Mapping[str, int], pinned: Mapping[str, int] | None = None) -> Config | None:
        """The valid config nearest to `config`, with the `pinned` values; None where `config` has
        other keys than this space, or where no such config differs from it in two parameters or fewer.

        A tuned config can miss another shape of the same op by a parameter or two: 16-byte loads
        where the rows are not 16-byte multiples, a prefetch that needs those loads, a split that
        leaves splits empty. Each value this space does not offer moves to its nearest choice (the
        smaller on a tie), then, while the constraint still objects, the fewest further parameters
        move, each by as little as it can: the tiling the config was tuned for stays."""
        pinned = dict(pinned or {})
        choices = self.choices()
        if set(config) != set(choices) or any(value not in choices.get(name, ()) for name, value in pinned.items()):
            return None
        base = {p.name: pinned.get(p.name, _nearest_choice(config[p.name], p)) for p in self.params}
        if self.constraint(base) is None:
            return base
        free = [p for p in self.params if p.name not in pinned]
        for changed in (1, 2):
            candidates: list[tuple[float, Config]] = []
            for params in itertools.combinations(free, changed):
                alternatives = [
                    [(c, _step(base[p.name], c, p)) for c in p.choices if c != base[p.name]] for p in params
                ]
                for combo in itertools.product(*alternatives):
                    candidate = {**base, **{p.name: value for p, (value, _) in zip(params, combo, strict=True)}}
                    if self.constraint(candidate) is None:
                        candidates.append((sum(cost for _, cost in combo), candidate))
            if candidates:
                # min() keeps the first of equal costs: parameters in the space's order, smaller values first.
                return min(candidates, key=lambda item: item[0])[1]
        return None

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in a fixed order."""
        for values in itertools.product(*(p.choices for p in self.params)):
            config = dict(zip(self.names, values, strict=True))
            if self.constraint(config) is None:
                yield config

    def size(self) -> int:
        return sum(1 for _ in self)


def _step(a: int, b: int, param: Param) -> float:
    """How far apart two values of a parameter are, in octaves of value + 1: 4 -> 8 costs about what
    64 -> 128 does, and a 0/1 switch one (parameters here are sizes, counts and switches); a change
    of a categorical parameter costs one."""
    if param.categorical:
        return float(a != b)
    return abs(math.log2((a + 1) / (b + 1)))


def _nearest_choice(value: int, param: Param) -> int:
    if value in param.choices:
        return value
    return min(param.choices, key=lambda c: (_step(value, c, param), c))
