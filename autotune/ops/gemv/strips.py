"""The strips family of the transposed GEMV (kernels/gemv/gemv_t_strips.cu): parameters, constraints,
launch geometry, source. It serves the tall, narrow transposed shapes (`serves`); the skinny GEMM
family serves the rest.

A team of width / vec threads reads one row of a strip of `width` columns, `block` threads hold
block * vec / width teams, each with `unroll` rows in flight; `policy` is the matrix's load path. The
rows are split into contiguous shares so that about `per_sm` blocks run on each SM (`splits`), a
launch parameter that shares one compiled kernel. Problem sizes are the GEMV's: m rows of A (the
reduction), n columns (y's length).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autotune.core.limits import MAX_THREADS_PER_BLOCK
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemv import strip_teams

NAME = "strips"
KERNEL_FILE = "gemv/gemv_t_strips.cu"  # under kernels/, beside this folder's mirror
WAITS_FOR_PRIOR_GRID = False  # its kernels read at once: launched without programmatic dependent launch

# Which transposed GEMVs the family serves: MIN_N to MAX_N columns and at least ROWS_PER_COLUMN rows
# for each. There the skinny family (tiles of at most 128 threads along N, splits in powers of two)
# reached 0.87-0.95x cuBLAS on the H200 (131072x256, 65536x1024), and a strips probe (one team a row,
# a block an SM) 1.03x at 131072x256 (experiments/gemv_t_tall.cu, experiments/gemv_t_strips.cu).
# Narrower matrices (a few columns: 262144 x 8) stay with skinny, whose thread groups narrower than
# a warp were tuned on them.
MIN_N = 64
MAX_N = 1024
ROWS_PER_COLUMN = 64

_BLOCKS = (256, 512, 1024)
WIDTHS = (16, 32, 64, 128, 256, 512, 1024, 2048)
_UNROLLS = (2, 4, 8)
_POLICIES = (0, 1, 2)  # load_stream in kernels/common/common.cuh
_PER_SM = (1, 2, 3, 4, 6, 8)


def serves(problem: Problem) -> bool:
    """Whether a transposed GEMV (m rows, n columns) is tall and narrow enough for this family."""
    return MIN_N <= problem.n <= MAX_N and problem.m >= ROWS_PER_COLUMN * problem.n


REGISTER_BASE = strip_teams.REGISTER_BASE  # the bundle header's AUTOTUNE_STRIPS_REGISTER_BASE
_vec_choices = strip_teams.vec_choices
registers = strip_teams.registers  # the bundle header mirrors it (autotune_strips_runs)
registers_per_thread = registers  # the name the transposed GEMV asks its families for (Op.registers)


def _reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if not serves(problem):
        return f"strips serve transposed GEMVs of {MIN_N} <= n <= {MAX_N} and m >= {ROWS_PER_COLUMN}*n, not {problem}"
    words = c["width"] // c["vec"]
    if words == 0 or words > c["block"]:
        return f"width={c['width']} over vec={c['vec']}: a row of a strip needs 1 to {c['block']} threads"
    if c["block"] % words:
        return f"block={c['block']} does not hold whole teams of {words} threads"
    if c["width"] > WIDTHS[0] and c["width"] // 2 >= problem.n:
        return f"width={c['width']}: half as wide a strip already covers n={problem.n}"
    if c["block"] > MAX_THREADS_PER_BLOCK:
        return f"block={c['block']} exceeds {MAX_THREADS_PER_BLOCK} threads"
    return strip_teams.spill_reason(problem, c)


def space(problem: Problem) -> Space:
    return Space(
        params=(
            Param("block", _BLOCKS),
            Param("width", WIDTHS),
            Param("vec", _vec_choices(problem)),
            Param("unroll", _UNROLLS),
            Param("policy", _POLICIES, categorical=True),
            Param("per_sm", _PER_SM, compiled=False),
        ),
        constraint=lambda c: _reason(problem, c),
    )


def _tiling(problem: Problem, block: int, width: int, unroll: int, per_sm: int, narrower: bool = False) -> Config:
    """A tiling with the widest loads the rows allow (or the next narrower), its strips no wider than
    the rule on n lets them be."""
    vecs = _vec_choices(problem)
    vec = vecs[-2] if narrower and len(vecs) > 1 else vecs[-1]
    width = min(width, max(w for w in WIDTHS if w == WIDTHS[0] or w // 2 < problem.n))
    return {"block": block, "width": width, "vec": vec, "unroll": unroll, "policy": 1, "per_sm": per_sm}


def default_config(problem: Problem) -> Config:
    """512 threads, strips of 64 columns read with 8-byte loads, 8 rows in flight per team, two
    blocks an SM: what the 64-trial sweeps of 131072x256 and 65536x1024 chose in all three dtypes on
    the H200."""
    return _tiling(problem, 512, 64, 8, 2, narrower=True)


# Seed tilings (block, width, unroll, per_sm, narrower loads): the sweeps' choice and its neighbours,
# and the probes' tilings (experiments/gemv_t_tall.cu: a block an SM of 1024 threads, whole rows).
_SEEDS = (
    (512, 64, 8, 2, True),
    (512, 32, 8, 2, True),
    (512, 64, 8, 2, False),
    (512, 64, 8, 4, True),
    (1024, 64, 4, 1, True),
    (512, 128, 8, 2, True),
    (1024, 256, 4, 1, False),
    (512, 256, 8, 2, False),
)


def seed_configs(problem: Problem) -> list[Config]:
    check = space(problem).check
    seeds: list[Config] = []
    for block, width, unroll, per_sm, narrower in _SEEDS:
        config = _tiling(problem, block, width, unroll, per_sm, narrower)
        if check(config) is None and config not in seeds:
            seeds.append(config)
    return seeds


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    return f"gemv_t_strips_{problem.dtype}_b{c['block']}_w{c['width']}_v{c['vec']}_u{c['unroll']}_p{c['policy']}"


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance taking the GEMM arguments (the transposed GEMV's)."""
    c = config
    args = [c[k] for k in ("block", "width", "vec", "unroll", "policy")]
    return gemm_shared.instance_source(
        KERNEL_FILE, kernel_name(problem, c), problem.dtype, str(c["block"]), "at_strips::strips_body", args
    )


def splits(problem: Problem, config: Mapping[str, int], sm_count: int) -> int:
    """Contiguous shares of the rows: about per_sm blocks an SM over all strips, no share smaller
    than what the block's teams read in one step."""
    strips = math.ceil(problem.n / config["width"])
    teams = config["block"] * config["vec"] // config["width"]
    most = max(1, problem.m // (teams * config["unroll"]))
    return max(1, min(most, config["per_sm"] * sm_count // strips))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    strips = math.ceil(problem.n / config["width"])
    split = splits(problem, config, sm_count)
    return Launch(
        grid=(strips, split, 1),
        block=(config["block"], 1, 1),
        shared_bytes=0,  # static: the teams' sums
        workspace_floats=split * problem.n if split > 1 else 0,
        counters=strips if split > 1 else 0,
    )
