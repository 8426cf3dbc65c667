"""The narrow-strips family of the transposed GEMV (kernels/gemv/gemv_t_narrow.cu): parameters,
constraints, launch geometry, source. It serves every transposed GEMV of at least MIN_N columns
(`serves`); the skinny GEMM family serves the narrower ones.

A team of width / vec threads (a power of two up to a warp) reads one row of a strip of `width`
columns; `block` threads hold block * vec / width teams, each with `unroll` rows in flight. The rows
are split into contiguous shares so that about `per_sm` blocks run on each SM (`splits`; 0: one share,
the strips alone fill the GPU), a launch parameter that shares one compiled kernel. The kernels wait
for the grid before them in griddepcontrol and are launched with programmatic dependent launch;
`prefetch` 1 fetches each thread's first rows into L2 before that wait. `lean` 1 compiles the body
that fits 32 registers a thread (no branch around the row loop, the splits' partials added one at a
time) with as many blocks an SM as 2048 threads make: at one tiling the row split ran 7-25% faster
that way on the H200, the unsplit loop slower (docs/findings.md). Problem sizes are the GEMV's: m
rows of A (the reduction), n columns (y's length).

`bands` > 0 runs the family's second body (kernels/gemv/gemv_t_wide.cu): the row cut into that many
bands of whole 16-byte words, a team of threads reading one row of a band (up to a whole row), so
that a block's loads cover one contiguous stretch of A, as the plain GEMV's do. It reads no strips, so
`width`, `prefetch` and `lean` are pinned there (WIDE_PINNED): it always prefetches, and its registers
are estimated as the strips' are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemv import strip_teams

NAME = "narrow"
# Under kernels/, beside this folder's mirror: the wide bands' file, which includes the strips' (their
# instances include the strips' file alone, so their code is what it was before the bands joined).
KERNEL_FILE = "gemv/gemv_t_wide.cu"
STRIPS_FILE = "gemv/gemv_t_narrow.cu"
WAITS_FOR_PRIOR_GRID = True  # its kernels wait in griddepcontrol: launched with programmatic dependent launch

# Narrower matrices (a few columns: 262144 x 8) stay with skinny, whose thread groups narrower than a
# warp were tuned on them; a strip is 16 columns at least.
MIN_N = 16

_BLOCKS = (128, 256, 512, 1024)
WIDTHS = (16, 32, 64, 128, 256)
_UNROLLS = (2, 4, 8)
_PER_SM = (0, 1, 2, 4, 8)
THREADS_PER_SM = 2048  # a lean kernel asks for as many blocks an SM as this many threads make
LEAN_REGISTERS = 32  # what ptxas fits a lean kernel in (30-34 unbounded, sm_90, every vec and unroll)
# Bands of a row for the wide body (0: strips); on the H200 the float16 probe's winners cut the row into
# 2 to 12 (experiments/gemv_t_rows.cu).
_BANDS = (0, 1, 2, 3, 4, 6, 8, 12, 16)
# What the wide body does not read, pinned so that one kernel is not tuned twice.
WIDE_PINNED = {"width": WIDTHS[0], "prefetch": 1, "lean": 0}


def serves(problem: Problem) -> bool:
    """Whether a transposed GEMV (m rows, n columns) is wide enough for this family."""
    return problem.n >= MIN_N


REGISTER_BASE = strip_teams.REGISTER_BASE  # the bundle header's AUTOTUNE_NARROW_REGISTER_BASE
_vec_choices = strip_teams.vec_choices


def registers(problem: Problem, c: Mapping[str, int]) -> int:
    """Registers per thread, estimated: a lean kernel's LEAN_REGISTERS, else the strip teams' estimate
    (the bundle header mirrors both: autotune_narrow_runs)."""
    return LEAN_REGISTERS if c["lean"] else strip_teams.registers(problem, c)


registers_per_thread = registers  # the name the transposed GEMV asks its families for (Op.registers)


def words_of(problem: Problem, c: Mapping[str, int]) -> int:
    """A row's words: the loads of vec elements a row takes (n is a multiple of vec where vec > 1)."""
    return problem.n // c["vec"]


def team_of(problem: Problem, c: Mapping[str, int]) -> int:
    """The wide body's team: the words of one band, each read by one thread."""
    return math.ceil(words_of(problem, c) / c["bands"])


def _wide_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    for name, value in WIDE_PINNED.items():
        if c[name] != value:
            return f"bands={c['bands']} reads whole rows: {name} stays {value}"
    words = words_of(problem, c)
    if c["bands"] > words:
        return f"bands={c['bands']}: a row of n={problem.n} holds {words} loads of vec={c['vec']}"
    if team_of(problem, c) > c["block"]:
        return f"bands={c['bands']}: a band of {team_of(problem, c)} loads needs more than block={c['block']} threads"
    return strip_teams.spill_reason(problem, c)


def _reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if not serves(problem):
        return f"narrow strips serve transposed GEMVs of n >= {MIN_N}, not {problem}"
    if c["bands"]:
        return _wide_reason(problem, c)
    words = c["width"] // c["vec"]
    if words == 0 or c["width"] % c["vec"] or 32 % words:
        return f"width={c['width']} over vec={c['vec']}: a row of a strip needs a power of two of 1 to 32 threads"
    if c["width"] > WIDTHS[0] and c["width"] // 2 >= problem.n:
        return f"width={c['width']}: half as wide a strip already covers n={problem.n}"
    # A lean kernel's launch bounds hold it to LEAN_REGISTERS, which every block size affords.
    return None if c["lean"] else strip_teams.spill_reason(problem, c)


# The parameters narrow's configs had before `lean` joined them (db/migrations/versions/0010_narrow_lean.py),
# and before `bands` did. `bands` needs no migration: narrow's kernel file changed with it, so database
# rows from before are stale, and the tuner carries them forward with bands 0 (tune/tuner.py).
_BEFORE_LEAN = frozenset({"block", "width", "vec", "unroll", "prefetch", "per_sm"})
_BEFORE_BANDS = _BEFORE_LEAN | {"lean"}


def with_lean(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config written before `lean` or `bands` joined the space, with the kernel it ran (LEAN 0,
    strips); any other as it is."""
    if set(config) == _BEFORE_LEAN:
        config = {**config, "lean": 0}
    return {**config, "bands": 0} if set(config) == _BEFORE_BANDS else dict(config)


def space(problem: Problem) -> Space:
    return Space(
        params=(
            Param("block", _BLOCKS),
            Param("width", WIDTHS),
            Param("vec", _vec_choices(problem)),
            Param("unroll", _UNROLLS),
            Param("prefetch", (0, 1)),
            Param("lean", (0, 1), categorical=True),
            Param("bands", _BANDS),
            Param("per_sm", _PER_SM, compiled=False),
        ),
        constraint=lambda c: _reason(problem, c),
    )


def _tiling(
    problem: Problem, block: int, width: int, unroll: int, per_sm: int, lean: int = 0, most_vec: int = 8
) -> Config:
    """A tiling with the widest loads the rows allow up to most_vec elements (one element where they
    allow none wider, with strips a warp can hold), its strips no wider than n needs, prefetching."""
    vec = max(v for v in _vec_choices(problem) if v <= most_vec)
    width = min(width, max(w for w in WIDTHS if w == WIDTHS[0] or w // 2 < problem.n), 32 * vec)
    return {
        "block": block,
        "width": width,
        "vec": vec,
        "unroll": unroll,
        "prefetch": 1,
        "lean": lean,
        "bands": 0,
        "per_sm": per_sm,
    }


def _wide_tiling(problem: Problem, block: int, bands: int, unroll: int, per_sm: int) -> Config:
    """A wide tiling with the widest loads the rows allow."""
    return {**_tiling(problem, block, WIDTHS[0], unroll, per_sm), **WIDE_PINNED, "bands": bands}


def default_config(problem: Problem) -> Config:
    """512 threads, strips of 64 columns, 4 rows in flight a team, about 4 blocks an SM, prefetching:
    the tiling a float16 probe of 20 shapes on the H200 found best most often
    (experiments/gemv_t_narrow.cu). The sweeps preferred unsplit rows where the strips alone fill the
    GPU (the family's split costs more than the probe's: docs/findings.md), but unsplit rows on a tall
    matrix leave most SMs idle (131072 x 256: 4 blocks), so the default splits."""
    return _tiling(problem, 512, 64, 4, 4)


# Seed tilings (block, width, unroll, per_sm, lean, widest loads in elements): the probe's winners over
# the standard shapes, then lean split tilings: at 1024 threads and strips of 64 the lean kernel beat the
# family's split on float16 131072x256 and 65536x1024 (experiments/gemv_t_narrow_split.cu), and the sweeps
# chose them on 131072x256; at strips of 128 read 4 elements a thread (a warp a row), 8 rows in flight,
# the LLM sweeps chose it on float16 and bfloat16 4544x4544, 4672x4544 and 16384x3072, and seeded, the
# standard set's sweeps on 16-bit 4096x11008 and 65536x1024 (docs/findings.md).
_SEEDS = (
    (512, 64, 4, 4, 0, 8),
    (1024, 64, 4, 2, 0, 8),
    (1024, 64, 4, 0, 0, 8),
    (512, 128, 4, 4, 0, 8),
    (1024, 256, 4, 2, 0, 8),
    (1024, 256, 4, 0, 0, 8),
    (1024, 32, 4, 0, 0, 8),
    (256, 64, 8, 0, 0, 8),
    (1024, 64, 4, 2, 1, 8),
    (1024, 64, 4, 1, 1, 8),
    (1024, 128, 8, 2, 1, 4),
)
# Wide seed tilings (block, bands, unroll, per_sm): the float16 probe's fastest on the H200 over 18
# short-and-wide and mid-size shapes (experiments/gemv_t_rows_wide_nvidia-h200.txt): 1024 threads, 4
# rows in flight a team, the row cut in 12, 8 or 4, the rows split for about one block an SM (the
# last block's ordered sum of the shares grows with them), and 8 bands at two.
_WIDE_SEEDS = (
    (1024, 12, 4, 1),
    (1024, 8, 4, 1),
    (1024, 4, 4, 1),
    (1024, 8, 4, 2),
)


def seed_configs(problem: Problem) -> list[Config]:
    check = space(problem).check
    seeds: list[Config] = []
    # The wide tilings first: a short warm sweep of a shape tuned before they joined still measures them.
    tilings = [_wide_tiling(problem, *seed) for seed in _WIDE_SEEDS]
    tilings += [_tiling(problem, *seed) for seed in _SEEDS]
    for config in tilings:
        if check(config) is None and config not in seeds:
            seeds.append(config)
    return seeds


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    if c["bands"]:  # one kernel for every count of bands: the grid sets them
        return f"gemv_t_wide_{problem.dtype}_b{c['block']}_v{c['vec']}_u{c['unroll']}"
    lean = "_l1" if c["lean"] else ""  # the names of the kernels before `lean` stay as they were
    tiling = f"b{c['block']}_w{c['width']}_v{c['vec']}_u{c['unroll']}_p{c['prefetch']}{lean}"
    return f"gemv_t_narrow_{problem.dtype}_{tiling}"


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance taking the GEMM arguments (the transposed GEMV's)."""
    c = config
    if c["bands"]:
        args = [c[k] for k in ("block", "vec", "unroll")]
        return gemm_shared.instance_source(
            KERNEL_FILE, kernel_name(problem, c), problem.dtype, str(c["block"]), "at_wide::wide_body", args
        )
    args = [c[k] for k in ("block", "width", "vec", "unroll", "prefetch")]
    bounds = str(c["block"])
    if c["lean"]:  # LEAN 0 is the template's default: the instances before `lean` compile as they did
        args.append(1)
        bounds += f", {THREADS_PER_SM // c['block']}"
    return gemm_shared.instance_source(
        STRIPS_FILE, kernel_name(problem, c), problem.dtype, bounds, "at_narrow::narrow_body", args
    )


def _strips_and_teams(problem: Problem, c: Mapping[str, int]) -> tuple[int, int]:
    """The grid's columns (strips, or the wide body's bands) and the teams a block holds."""
    if c["bands"]:
        team = team_of(problem, c)
        return math.ceil(words_of(problem, c) / team), c["block"] // team
    return math.ceil(problem.n / c["width"]), c["block"] * c["vec"] // c["width"]


def splits(problem: Problem, config: Mapping[str, int], sm_count: int) -> int:
    """Contiguous shares of the rows: the nearest count that puts about per_sm blocks on each SM over
    all strips or bands (one for per_sm 0), no share smaller than what the block's teams read in one
    step."""
    if config["per_sm"] == 0:
        return 1
    strips, teams = _strips_and_teams(problem, config)
    most = max(1, problem.m // (teams * config["unroll"]))
    return max(1, min(most, (config["per_sm"] * sm_count + strips // 2) // strips))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    strips, teams = _strips_and_teams(problem, config)
    split = splits(problem, config, sm_count)
    # The wide body's block is its teams, whole: the kernel finds the team from n and the bands.
    threads = teams * team_of(problem, config) if config["bands"] else config["block"]
    return Launch(
        grid=(strips, split, 1),
        block=(threads, 1, 1),
        shared_bytes=0,  # static: the warps' or teams' sums
        workspace_floats=split * problem.n if split > 1 else 0,
        counters=strips if split > 1 else 0,
    )
