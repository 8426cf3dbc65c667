"""How a config's grid meets the GPU: the waves of blocks its SMs take it in, and the bytes each thread
streams one after the other (the cost model's rules on parallelism, cost.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from autotune import ops
from autotune.core.limits import (
    MAX_SHARED_BYTES_OPT_IN,
    MAX_SM_COUNT,
    MAX_THREADS_PER_SM,
    REGISTERS_PER_SM,
)
from autotune.core.problem import Problem

# Blocks an SM of compute capability 8.0 or 9.0 holds at once, whatever their size.
MAX_BLOCKS_PER_SM = 32


def waves(problem: Problem, config: Mapping[str, int], sm_count: int) -> int | None:
    """How many waves of blocks the SMs take the config's grid in (by the threads, registers and
    shared memory a block needs); None where the SM count is none a GPU has, the config is of another
    space, or its family does not estimate its registers (Op.registers) and its grid has more blocks
    than the GPU has SMs: a GEMV block of 128 threads may hold 16 to an SM or 4."""
    if not 1 <= sm_count <= MAX_SM_COUNT:
        return None
    op = ops.for_problem(problem)
    try:
        launch = op.launch(problem, config, sm_count)
        registers = op.registers(problem, config)
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    blocks = math.prod(launch.grid)
    if registers is None:
        return 1 if blocks <= sm_count else None
    per_sm = blocks_per_sm(math.prod(launch.block), registers, launch.shared_bytes)
    return math.ceil(blocks / (sm_count * per_sm))


def critical_path(problem: Problem, config: Mapping[str, int], sm_count: int) -> float | None:
    """The bytes each thread of the config's grid streams one after the other: its share of the bytes
    times the waves its blocks run in. It sees what bytes alone do not: the row length a thread walks,
    the rows a block takes, the split of K, the blocks to the SMs. None where the waves are unknown."""
    count = waves(problem, config, sm_count)
    if count is None:
        return None
    op = ops.for_problem(problem)
    launch = op.launch(problem, config, sm_count)
    return count * op.bytes_moved(problem) / (math.prod(launch.grid) * math.prod(launch.block))


def blocks_per_sm(threads: int, registers: float | None, shared_bytes: int) -> int:
    """Blocks of `threads` threads an SM holds at once, by its threads, registers (where the family
    estimates them) and shared memory."""
    limits = [MAX_BLOCKS_PER_SM, MAX_THREADS_PER_SM // threads]
    if registers:
        limits.append(int(REGISTERS_PER_SM // (registers * threads)))
    if shared_bytes:
        limits.append(MAX_SHARED_BYTES_OPT_IN // shared_bytes)
    return max(1, min(limits))
