"""Parameter spaces as plain data: choices per parameter plus one constraint, checked before compiling."""

from __future__ import annotations

import itertools
import json
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


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    constraint: Constraint

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def choices(self) -> dict[str, tuple[int, ...]]:
        return {p.name: p.choices for p in self.params}

    def check(self, config: Mapping[str, int]) -> str | None:
        """Why `config` is not a point of this space, or None when it is valid."""
        missing = [p.name for p in self.params if p.name not in config]
        unknown = [name for name in config if name not in self.names]
        if missing or unknown:
            return f"config keys differ from the space (missing {missing}, unknown {unknown})"
        for p in self.params:
            if config[p.name] not in p.choices:
                return f"{p.name}={config[p.name]} is not one of {list(p.choices)} for this problem"
        return self.constraint(config)

    def __iter__(self) -> Iterator[Config]:
        """Every valid config, in a fixed order."""
        for values in itertools.product(*(p.choices for p in self.params)):
            config = dict(zip(self.names, values, strict=True))
            if self.constraint(config) is None:
                yield config

    def size(self) -> int:
        return sum(1 for _ in self)
