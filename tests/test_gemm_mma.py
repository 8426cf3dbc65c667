"""The "mma" GEMM family: space and constraints, launch geometry, and sm_90 compiles of its kernels."""

from __future__ import annotations

import hashlib
import itertools
import shutil

import pytest

from autotune.build.compiler import CompileJob
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops.gemm import mma as gemm_mma
from tests.nvcc import compile_all

SHAPES = [(1, 1, 1), (1000, 1001, 999), (7, 4096, 13), (4096, 4096, 4096)]
GRID_X_MAX, GRID_YZ_MAX = 2**31 - 1, 65535


def _problem(m: int, n: int, k: int, dtype: str = "float16") -> Problem:
    return Problem("gemm", dtype, m, n, k)


def _config(**overrides: int) -> Config:
    base = dict(bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, vec=8, swizzle=8, split=1)
    return {**base, **overrides}


def test_default_config_is_valid_everywhere() -> None:
    for (m, n, k), dtype in itertools.product(SHAPES, gemm_mma.DTYPES):
        problem = _problem(m, n, k, dtype)
        config = gemm_mma.default_config(problem)
        assert gemm_mma.space(problem).check(config) is None, (problem, config)
        assert config["vec"] == 1  # no alignment assumed: the launcher falls back to it for odd pointers


def test_vector_width_follows_alignment() -> None:
    assert gemm_mma.space(_problem(1000, 1001, 999)).choices()["vec"] == (1,)
    assert gemm_mma.space(_problem(1000, 1002, 998)).choices()["vec"] == (1, 2)
    assert gemm_mma.space(_problem(1000, 1004, 996)).choices()["vec"] == (1, 4)
    assert gemm_mma.space(_problem(1000, 4096, 1004)).choices()["vec"] == (1, 4)
    assert gemm_mma.space(_problem(8, 4096, 4096)).choices()["vec"] == (1, 8)


def test_goal_configs_are_in_the_space() -> None:
    for size in (4096, 8192):
        space = gemm_mma.space(_problem(size, size, size))
        for config in (
            _config(),
            _config(bk=64, stages=3),
            _config(bm=256, bn=128, bk=64, stages=4),
            _config(bm=128, bn=128, bk=32, stages=4, swizzle=4),
        ):
            assert space.check(config) is None, config


def test_constraints_say_why() -> None:
    space = gemm_mma.space(_problem(4096, 4096, 4096))
    assert "shared memory" in (space.check(_config(bk=64, stages=5)) or "")
    assert "register" in (space.check(_config(bm=256, bn=256)) or "")
    assert "warps" in (space.check(_config(bm=64, bn=64)) or "")
    assert "split-K" in (space.check(_config(split=2)) or "")
    small = gemm_mma.space(_problem(100, 100, 64))
    assert "larger than" in (small.check(_config(bm=256, bn=128, vec=1)) or "")
    assert "stages" in (small.check(_config(bm=128, bn=128, stages=4, vec=1)) or "")
    odd = gemm_mma.space(_problem(64, 100, 4096))
    assert "vec=8" in (odd.check(_config(bm=64, bn=64, wm=32, wn=32, vec=8)) or "")


def test_space_is_small_and_names_are_unique() -> None:
    space = gemm_mma.space(_problem(4096, 4096, 4096))
    configs = list(space)
    assert 500 < len(configs) < 5000
    assert len({config_key(c) for c in configs}) == len(configs)
    problem = _problem(4096, 4096, 4096)
    compiled = {tuple(v for k, v in sorted(c.items()) if k != "split") for c in configs}
    names = {gemm_mma.kernel_name(problem, c) for c in configs}
    assert len(names) == len(compiled)  # split is a launch parameter: it shares the kernel
    assert gemm_mma.kernel_name(problem, configs[0]) != gemm_mma.kernel_name(_problem(1, 1, 1, "bfloat16"), configs[0])


def test_geometry_of_a_sample_is_launchable() -> None:
    problem = _problem(8192, 8192, 8192)
    space = gemm_mma.space(problem)
    configs = list(space)
    for config in configs[:: max(1, len(configs) // 200)]:
        launch = gemm_mma.launch(problem, config, sm_count=132)
        assert launch.block == (gemm_mma.threads(config), 1, 1) and launch.block[0] <= 1024
        assert launch.shared_bytes == gemm_mma.shared_bytes(problem, config) <= 227 * 1024
        assert launch.grid[0] <= GRID_X_MAX and launch.grid[1] == 1 and launch.grid[2] <= GRID_YZ_MAX
        assert launch.grid[0] * config["bm"] * config["bn"] >= problem.m * problem.n
        assert launch.workspace_floats == 0 and launch.counters == 0  # too many tiles for split-K


def test_split_k_workspace_and_counters() -> None:
    problem = _problem(256, 512, 16384)
    config = _config(bm=128, bn=128, swizzle=1, split=4)
    assert gemm_mma.space(problem).check(config) is None
    launch = gemm_mma.launch(problem, config, sm_count=132)
    assert launch.grid == (2 * 4, 1, 4)
    assert launch.workspace_floats == 4 * 256 * 512
    assert launch.counters == 8
    single = gemm_mma.launch(problem, dict(config, split=1), sm_count=132)
    assert single.workspace_floats == 0 and single.counters == 0


def test_source_instantiates_the_template() -> None:
    problem = _problem(4096, 4096, 4096, "bfloat16")
    source = gemm_mma.kernel_source(problem, _config())
    assert '#include "gemm/gemm_mma.cu"' in source
    assert "__launch_bounds__(256)" in source
    assert "gemm_mma_body<__nv_bfloat16, 128, 256, 32, 64, 64, 4, 8, 8>" in source
    assert gemm_mma.kernel_name(problem, _config()) in source


# Spread over dtypes, copy widths, tile shapes (A rows of 4 and 8 chunks), stage counts, swizzles.
COMPILE_SAMPLE = [
    ("float16", _config()),
    ("bfloat16", _config(bm=256, bn=128, bk=64, stages=3, swizzle=16)),
    ("float16", _config(bm=128, bn=128, bk=64, stages=5, vec=4, swizzle=1)),
    ("bfloat16", _config(bm=64, bn=128, wm=32, wn=32, stages=2, vec=2, swizzle=4)),
    ("float16", _config(bm=128, bn=128, wm=64, wn=32, stages=3, vec=1, swizzle=1)),
    ("bfloat16", _config(bm=64, bn=64, wm=32, wn=32, bk=64, stages=3, vec=1, swizzle=1)),
]


def _compile_jobs() -> list[CompileJob]:
    source_file = kernels_dir() / gemm_mma.KERNEL_FILE
    depends = hashlib.sha256(source_file.read_bytes()).hexdigest()[:16]
    problem_of = {dtype: _problem(4096, 4096, 4096, dtype) for dtype in gemm_mma.DTYPES}
    jobs = []
    for dtype, config in COMPILE_SAMPLE:
        problem = problem_of[dtype]
        name = gemm_mma.kernel_name(problem, config)
        jobs.append(CompileJob(name, gemm_mma.kernel_source(problem, config), "sm_90", depends))
    return jobs


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90() -> None:
    compile_all(_compile_jobs())
