"""What every GEMM family's launch geometry must respect on sm_90, and the configs the family tests
draw from a space (they share both)."""

from __future__ import annotations

import random

from autotune.core.space import Config, Space, config_key
from autotune.gpu.geometry import Launch

MAX_SHARED = 227 * 1024  # dynamic shared memory a block may opt in to
MAX_GRID = (2**31 - 1, 65535, 65535)


def assert_within_limits(launch: Launch) -> None:
    """Whole warps, at most 1024 threads, shared memory and every grid dimension within bounds."""
    assert launch.block[0] <= 1024 and launch.block[0] % 32 == 0, launch.block
    assert launch.shared_bytes <= MAX_SHARED, launch.shared_bytes
    assert all(0 < g <= limit for g, limit in zip(launch.grid, MAX_GRID, strict=True)), launch.grid


def distinct_configs(space: Space, most: int) -> list[Config]:
    """Every config of the space: some, fewer than `most`, none twice."""
    configs = list(space)
    assert 0 < len(configs) < most, len(configs)
    assert len({config_key(c) for c in configs}) == len(configs)
    return configs


def sampled(configs: list[Config], count: int = 200) -> list[Config]:
    """The same `count` configs on every run (all of them where there are fewer)."""
    return random.Random(0).sample(configs, min(count, len(configs)))
