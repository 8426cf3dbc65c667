"""What the transposed GEMV's two strip families (strips.py, narrow.py) share: a team of threads reads a
row of a strip of columns, each thread `vec` of them, `unroll` rows in flight. Their load widths, their
register estimate and its spill check."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.limits import MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM
from autotune.core.problem import ITEMSIZE, Problem

# Registers a thread needs beside its loads in flight and accumulators (addresses, loop state): the
# estimate below meets ptxas -v for sm_90 (62 at unroll 4, block 1024, 16-byte loads, 16-bit and 32-bit;
# the narrow kernels stay a few below it). The bundle header mirrors it (autotune_*_runs).
REGISTER_BASE = 34


def vec_choices(problem: Problem) -> tuple[int, ...]:
    """The two widest loads the rows allow (16 bytes at most) and scalar loads (which the launcher
    needs for arrays whose rows are not 16-byte aligned)."""
    item = ITEMSIZE[problem.dtype]
    fits = [v for v in (1, 2, 4, 8) if v * item <= 16 and (v == 1 or problem.n % v == 0)]
    return tuple(sorted({1, *fits[-2:]}))


def registers(problem: Problem, c: Mapping[str, int]) -> int:
    """Registers per thread, estimated: the unrolled loads (whole 32-bit words) and their x values,
    the accumulators and REGISTER_BASE."""
    words = max(1, c["vec"] * ITEMSIZE[problem.dtype] // 4)
    return c["unroll"] * (words + 1) + c["vec"] + REGISTER_BASE


def spill_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    """Why the config would spill: more registers than a block of its size gets a thread, or None."""
    cap = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // c["block"])
    regs = registers(problem, c)
    if regs > cap:
        return f"about {regs} registers per thread, more than the {cap} a block of {c['block']} gets: spills"
    return None
