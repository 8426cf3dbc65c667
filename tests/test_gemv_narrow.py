"""The narrow-strips family of the transposed GEMV on the CPU: which shapes it serves, its space, launch
geometry, programmatic launch, and nvcc compiles for sm_90 (correctness against float64 runs on the GPU:
test_gpu_gemm.py, test_gpu_launch.py)."""

from __future__ import annotations

import shutil

import pytest

from autotune.build.compiler import CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config
from autotune.ops import for_problem
from autotune.ops.gemm import skinny
from autotune.ops.gemv import narrow, strips, transposed
from tests.nvcc import compile_all, in_space_jobs

DTYPES = ("float32", "float16", "bfloat16")


def _t(m: int, n: int, dtype: str = "float16") -> Problem:
    return Problem("gemv", dtype, m, n, trans=True)


@pytest.mark.parametrize(
    "shape", [(4096, 4096), (131072, 256), (65536, 1024), (1, 262144), (4097, 8191), (128256, 4096), (8192, 16)]
)
def test_transposed_gemvs_of_16_columns_and_more_run_in_narrow_strips_with_pdl(shape: tuple[int, int]) -> None:
    problem = _t(*shape)
    op = for_problem(problem)
    assert op.kernel_file(problem) == narrow.KERNEL_FILE
    assert op.family(problem, op.default_config(problem)) == narrow.NAME
    assert op.waits_for_prior_grid(problem)


@pytest.mark.parametrize("shape", [(8192, 9), (16384, 12), (8192, 15)])
def test_transposed_gemvs_of_9_to_15_columns_keep_the_skinny_family_and_its_records(shape: tuple[int, int]) -> None:
    problem = _t(*shape)
    op = for_problem(problem)
    assert op.kernel_file(problem) == skinny.KERNEL_FILE
    assert not op.waits_for_prior_grid(problem)


def test_a_family_named_in_the_environment_serves_where_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    tall, square = _t(131072, 256), _t(4096, 4096)
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "strips")
    assert transposed.family_of(tall) is strips and transposed.family_of(square) is narrow
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "skinny")
    assert for_problem(square).kernel_file(square) == skinny.KERNEL_FILE
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "wide")
    with pytest.raises(AutotuneError, match="choose narrow, strips, tall, skinny"):
        transposed.family_of(square)


SHAPES = [(4096, 4096), (131072, 256), (100003, 255), (1, 262144), (4097, 8191), (2048, 16), (70000, 1000)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_default_and_seeds_are_in_the_space_and_fall_back_to_scalar_loads(shape: tuple[int, int], dtype: str) -> None:
    problem = _t(*shape, dtype)
    op = for_problem(problem)
    space = op.space(problem)
    configs = [op.default_config(problem), *op.seed_configs(problem)]
    assert len(configs) >= 3
    for config in configs:
        assert space.check(config) is None, config
        scalar = space.fit(config, {"vec": 1})  # what the launcher runs on unaligned arrays
        assert scalar is not None and scalar["vec"] == 1, config
    if problem.n % 8 == 0:
        assert configs[0]["vec"] * ITEMSIZE[dtype] == 16  # 16-byte loads where the rows allow them


def test_the_space_keeps_teams_within_a_warp_and_strips_no_wider_than_needed() -> None:
    problem = _t(4096, 4096)
    check = narrow.space(problem).check
    base = narrow.default_config(problem)
    assert check({**base, "width": 256}) is None  # 32 threads of 8 halves
    assert check({**base, "width": 256, "vec": 4}) is not None  # 64 threads a row: more than a warp
    assert check({**base, "width": 64, "vec": 1}) is not None
    assert check({**base, "width": 32, "vec": 1}) is None
    thin = _t(4096, 40)
    assert narrow.space(thin).check({**narrow.default_config(thin), "width": 128}) is not None  # 64 covers 40
    assert "registers" in str(check({**base, "block": 1024, "unroll": 8}))  # spills at 64 registers


def test_a_lean_kernel_is_named_apart_bounded_to_32_registers_and_the_others_compile_as_before() -> None:
    problem = _t(131072, 256)
    base = narrow.default_config(problem)
    lean = {**base, "lean": 1}
    assert base["lean"] == 0 and narrow.kernel_name(problem, lean) == narrow.kernel_name(problem, base) + "_l1"
    plain, bounded = narrow.kernel_source(problem, base), narrow.kernel_source(problem, lean)
    # LEAN 0 is the template's default: an instance from before `lean` keeps its source and cubin.
    assert "__launch_bounds__(512)" in plain and "narrow_body<__half, false, 512, 64, 8, 4, 1>(" in plain
    assert "__launch_bounds__(512, 4)" in bounded and "narrow_body<__half, false, 512, 64, 8, 4, 1, 1>(" in bounded
    heavy = {**base, "block": 1024, "unroll": 8}
    check = narrow.space(problem).check
    assert "registers" in str(check(heavy)) and check({**heavy, "lean": 1}) is None
    assert narrow.registers(problem, {**heavy, "lean": 1}) == narrow.LEAN_REGISTERS == 32
    assert any(c["lean"] and c["per_sm"] for c in narrow.seed_configs(problem))  # lean splits are seeded
    # and so is the lean split whose warps each read a whole row of a 128-column strip, 4 halves a thread
    warp_a_row = {"block": 1024, "width": 128, "vec": 4, "unroll": 8, "prefetch": 1, "lean": 1, "bands": 0, "per_sm": 2}
    assert warp_a_row in narrow.seed_configs(problem)


@pytest.mark.parametrize("sm_count", [1, 78, 132])
def test_launch_splits_rows_for_about_per_sm_blocks_an_sm_and_asks_workspace_only_when_split(sm_count: int) -> None:
    for problem in (_t(131072, 256), _t(4096, 4096), _t(4096, 14336), _t(8, 65536)):
        strips = [c for c in [narrow.default_config(problem), *narrow.seed_configs(problem)] if not c["bands"]]
        for config in strips:
            launch = narrow.launch(problem, config, sm_count)
            strip_count = -(-problem.n // config["width"])
            split = launch.grid[1]
            teams = config["block"] * config["vec"] // config["width"]
            assert launch.grid[0] == strip_count and launch.block == (config["block"], 1, 1)
            assert 1 <= split <= max(1, problem.m // (teams * config["unroll"]))
            if config["per_sm"] == 0:
                assert split == 1
            else:  # within half a strip's worth of blocks of per_sm an SM
                assert split == 1 or abs(split * strip_count - config["per_sm"] * sm_count) <= strip_count / 2
            if split > 1:
                assert (launch.workspace_floats, launch.counters) == (split * problem.n, strip_count)
            else:
                assert (launch.workspace_floats, launch.counters) == (0, 0)
    assert narrow.launch(_t(4096, 4096), narrow.default_config(_t(4096, 4096)), 132).grid == (64, 8, 1)


def test_the_wide_body_pins_what_it_does_not_read_and_keeps_a_band_within_a_block() -> None:
    problem = _t(2304, 9216)
    check = narrow.space(problem).check
    wide = [c for c in narrow.seed_configs(problem) if c["bands"]]
    assert wide and all(check(c) is None for c in wide)
    config = wide[0]
    for name, value in (("width", 64), ("prefetch", 0), ("lean", 1)):
        assert "stays" in str(check({**config, name: value}))
    # 9216 halves are 1152 loads of 8: one band of them needs more than 1024 threads, two do not.
    assert "needs more than" in str(check({**config, "bands": 1})) and check({**config, "bands": 2}) is None
    narrow_row = _t(4096, 16)  # 2 loads of 8 halves a row: no third band
    assert "holds 2 loads" in str(narrow.space(narrow_row).check({**config, "bands": 3}))


@pytest.mark.parametrize("sm_count", [1, 78, 132])
@pytest.mark.parametrize("shape", [(2304, 9216), (4097, 8191), (131072, 256), (3, 100000), (5, 17)])
def test_the_wide_body_launches_whole_teams_over_its_bands(shape: tuple[int, int], sm_count: int) -> None:
    """A block is its teams, whole (the kernel finds the team from n and the grid's bands), the grid one
    column of blocks a band, the rows split for about per_sm blocks an SM, no share smaller than one
    step of the block's teams."""
    problem = _t(*shape)
    space = narrow.space(problem)
    launched = 0
    for bands in (1, 2, 3, 8, 16):
        for per_sm in (0, 1, 2, 8):
            base = {**narrow.default_config(problem), **narrow.WIDE_PINNED, "block": 1024}
            config = {**base, "bands": bands, "per_sm": per_sm}
            if space.check(config) is not None:
                continue
            words = problem.n // config["vec"]
            team = -(-words // bands)
            launch = narrow.launch(problem, config, sm_count)
            assert launch.grid[0] == -(-words // team) <= bands and launch.grid[0] * team >= words
            assert launch.block[0] == config["block"] // team * team <= config["block"]
            split = launch.grid[1]
            assert 1 <= split <= max(1, problem.m // (config["block"] // team * config["unroll"]))
            assert (split == 1) == (per_sm == 0 or split == 1)
            assert launch.workspace_floats == (split * problem.n if split > 1 else 0)
            assert launch.counters == (launch.grid[0] if split > 1 else 0)
            launched += 1
    assert launched >= 4


def test_a_wide_kernel_serves_every_count_of_bands_and_includes_the_wide_file() -> None:
    problem = _t(2304, 9216)
    wide = [c for c in narrow.seed_configs(problem) if c["bands"]]
    assert len({narrow.kernel_name(problem, c) for c in wide}) == 1  # bands differ, the kernel does not
    source = narrow.kernel_source(problem, wide[0])
    assert '#include "gemv/gemv_t_wide.cu"' in source and "at_wide::wide_body<__half, false, 1024, 8, 4>(" in source
    # The strips' instances include their own file, as before the wide body joined the family.
    strips = narrow.kernel_source(problem, narrow.default_config(problem))
    assert '#include "gemv/gemv_t_narrow.cu"' in strips


def test_a_config_from_before_bands_gains_bands_0() -> None:
    problem = _t(4096, 4096)
    config = narrow.default_config(problem)
    before = {k: v for k, v in config.items() if k != "bands"}
    assert narrow.with_lean(before) == config
    assert narrow.with_lean({k: v for k, v in before.items() if k != "lean"}) == config
    assert for_problem(problem).carried_over(problem, before) == config


def _instances(whole: bool = False) -> list[tuple[Problem, Config]]:
    """Each dtype's default on a square shape and scalar loads on an odd width; `whole` (under `-m
    arch`, about 2 s of nvcc an instance) adds the narrowest strips, the smallest block with the
    widest strips, and no prefetch (the seeds compile in test_architectures.py, for every architecture)."""
    square, odd = _t(4096, 4096), _t(4097, 8191)
    picked = [(_t(4096, 4096, d), narrow.default_config(_t(4096, 4096, d))) for d in DTYPES]
    picked += [(odd, narrow.default_config(odd))]
    # The lean body on odd widths, where threads past the last column read the strip's first ones.
    picked += [(_t(4097, 8191, d), {**narrow.default_config(_t(4097, 8191, d)), "lean": 1}) for d in DTYPES[:2]]

    # The wide body: 16-byte loads in every dtype, and scalar loads on an odd width.
    def first_wide(problem: Problem) -> Config:
        return next(c for c in narrow.seed_configs(problem) if c["bands"])

    picked += [(_t(2304, 9216, d), first_wide(_t(2304, 9216, d))) for d in DTYPES] + [(odd, first_wide(odd))]
    if not whole:
        return picked
    picked += [(odd, {**narrow.default_config(odd), "width": 16, "unroll": 8})]
    base = narrow.default_config(square)
    picked += [(square, {**base, "width": 16, "block": 1024})]
    picked += [(square, {**base, "width": 256, "block": 128, "unroll": 8, "prefetch": 0})]
    return picked


def _jobs(whole: bool = False) -> list[CompileJob]:
    return in_space_jobs(narrow, _instances(whole))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_jobs)
def test_instances_compile_for_sm_90() -> None:
    for result in compile_all(_jobs()):
        assert result.cubin is not None and result.cubin.read_bytes()[:4] == b"\x7fELF", result.message


def _whole_jobs() -> list[CompileJob]:
    return _jobs(whole=True)


@pytest.mark.arch  # more instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_whole_jobs)
def test_more_instances_compile_for_sm_90() -> None:
    compile_all(_whole_jobs())  # each a cubin holding its kernel, or the test fails with nvcc's message
