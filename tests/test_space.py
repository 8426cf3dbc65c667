"""Space.fit: the nearest valid config to one tuned for another shape, for every op's space."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from autotune import ops
from autotune.core.problem import Problem
from autotune.core.space import Config, Param, Space
from autotune.ops import gemm, gemv


def _no_big_in_small(c: Mapping[str, int]) -> str | None:
    return "tile larger than block" if c["tile"] > c["block"] else None


TOY = Space((Param("block", (64, 128, 256)), Param("tile", (1, 2, 4, 8, 256)), Param("flag", (0, 1))), _no_big_in_small)


def test_a_valid_config_fits_as_it_is() -> None:
    config = {"block": 128, "tile": 8, "flag": 1}
    assert TOY.fit(config) == config


def test_a_value_the_space_lacks_moves_to_its_nearest_choice() -> None:
    assert TOY.fit({"block": 100, "tile": 5, "flag": 0}) == {"block": 128, "tile": 4, "flag": 0}
    assert TOY.fit({"block": 512, "tile": 16, "flag": 1}) == {"block": 256, "tile": 8, "flag": 1}


def test_the_constraint_moves_the_fewest_parameters_by_the_least() -> None:
    # tile=256 does not fit block=128: lowering the tile to 8 costs 5 octaves, raising the block to
    # 256 one: the block moves.
    assert TOY.fit({"block": 128, "tile": 256, "flag": 0}) == {"block": 256, "tile": 256, "flag": 0}
    # Pinned, the block stays and the tile gives way.
    assert TOY.fit({"block": 128, "tile": 256, "flag": 0}, {"block": 64}) == {"block": 64, "tile": 8, "flag": 0}


def test_configs_of_another_space_and_impossible_pins_do_not_fit() -> None:
    assert TOY.fit({"block": 128, "tile": 8}) is None
    assert TOY.fit({"block": 128, "tile": 8, "flag": 0, "other": 1}) is None
    assert TOY.fit({"block": 128, "tile": 8, "flag": 0}, {"block": 96}) is None
    assert TOY.fit({"block": 128, "tile": 8, "flag": 0}, {"vec": 1}) is None
    never = Space(TOY.params, lambda c: "never")
    assert never.fit({"block": 128, "tile": 8, "flag": 0}) is None


def test_a_16_byte_gemv_config_fits_odd_rows_with_scalar_loads_and_keeps_its_tiling() -> None:
    tuned = {**gemv.DEFAULT_CONFIG, "block": 512, "lanes": 128, "vec": 8, "unroll": 4, "rows": 2, "prefetch": 1}
    assert gemv.OP.space(Problem("gemv", "float16", 1024, 1024)).check(tuned) is None
    fitted = gemv.OP.space(Problem("gemv", "float16", 1024, 1023)).fit(tuned)
    assert fitted == {**tuned, "vec": 1, "prefetch": 0}  # the prefetch needs 16-byte loads
    assert gemv.OP.space(Problem("gemv", "float16", 1024, 1020)).fit(tuned) == {**tuned, "vec": 4, "prefetch": 0}


# Problems whose spaces differ from those of the shapes next to them: odd reduction lengths, rows of
# 2 or 4 elements' multiples, and small shapes that rule out splits.
MISFITS = [
    Problem("gemv", "float16", 5000, 7001),
    Problem("gemv", "float32", 4096, 4098),
    Problem("gemv", "bfloat16", 4096, 4100, trans=True),
    Problem("gemv", "float16", 100, 30),
    Problem("gemm", "float16", 1, 4095, 4093),
    Problem("gemm", "float16", 16, 4100, 4093),
    Problem("gemm", "float32", 1000, 1000, 1001),
    Problem("gemm", "float16", 4097, 4095, 4093),
]


def _aligned(problem: Problem) -> Problem:
    """A problem of the same dtype and layout with 16-byte rows and room for every split."""
    if problem.op == "gemv":
        return Problem("gemv", problem.dtype, 4096, 8192, trans=problem.trans)
    return Problem("gemm", problem.dtype, problem.m, 4096, 4096)


def _sample(space: Space, count: int) -> list[Config]:
    """`count` valid configs drawn at random (a fixed seed): enumerating a whole space takes seconds."""
    draw = random.Random(7)
    found: list[Config] = []
    while len(found) < count:
        config = {p.name: draw.choice(p.choices) for p in space.params}
        if space.check(config) is None and config not in found:
            found.append(config)
    return found


@pytest.mark.parametrize("problem", MISFITS, ids=str)
def test_every_config_of_an_aligned_shape_fits_the_misfit(problem: Problem) -> None:
    # The misfit's own kernel family on the aligned shape (GEMM picks families by shape too).
    module = gemm.family(problem) if problem.op == "gemm" else ops.for_problem(problem)
    space = module.space(problem)
    sample = _sample(module.space(_aligned(problem)), 60)
    fitted = [space.fit(config) for config in sample]
    assert all(f is not None and space.check(f) is None for f in fitted)
    for config, fit in zip(sample, fitted, strict=True):
        if space.check(config) is None:
            assert fit == config
