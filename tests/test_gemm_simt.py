"""The SIMT GEMM family: a valid default everywhere, sane geometry over the space, nvcc compiles it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import CompileJob, compile_kernel
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops.gemm import simt as gemm_simt
from tests.limits import MAX_GRID, MAX_SHARED, sampled
from tests.nvcc import compile_in_space, in_space_jobs

SHAPES = [(1, 1, 1), (1000, 1001, 999), (7, 4096, 13), (4096, 4096, 4096)]
# The configs known to be fast for large float32 GEMMs on Hopper/Ampere (CUTLASS SIMT, maxas-style):
# 128x128 block tiles, 256 threads of 8x8, warp tiles 32x64 or 64x32, float4 loads, double buffered.
CLASSIC: list[Config] = [
    dict(bm=128, bn=128, bk=bk, wm=wm, wn=wn, tm=8, tn=8, vec=4, stages=2, occ=occ)
    for bk in (8, 16)
    for wm, wn in ((32, 64), (64, 32))
    for occ in (1, 2)
]
# Compiled for sm_90 in the test below: the classics and every corner of the template.
REPRESENTATIVE: list[Config] = [
    *CLASSIC,
    dict(bm=128, bn=256, bk=8, wm=64, wn=64, tm=8, tn=16, vec=4, stages=2, occ=1),
    dict(bm=256, bn=128, bk=8, wm=64, wn=64, tm=16, tn=8, vec=4, stages=2, occ=1),
    dict(bm=64, bn=64, bk=8, wm=32, wn=32, tm=8, tn=4, vec=1, stages=2, occ=1),
    dict(bm=32, bn=64, bk=32, wm=32, wn=32, tm=4, tn=8, vec=2, stages=1, occ=1),
    dict(bm=256, bn=32, bk=16, wm=32, wn=32, tm=8, tn=4, vec=4, stages=1, occ=2),
    dict(bm=64, bn=256, bk=8, wm=64, wn=32, tm=8, tn=8, vec=1, stages=1, occ=1),
    dict(bm=32, bn=32, bk=8, wm=16, wn=32, tm=4, tn=4, vec=4, stages=2, occ=1),  # idle loader slots
]


def _problem(m: int, n: int, k: int, dtype: str = "float32") -> Problem:
    return Problem("gemm", dtype, m, n, k)


@pytest.mark.parametrize("dtype", gemm_simt.DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_default_config_is_valid(shape: tuple[int, int, int], dtype: str) -> None:
    problem = _problem(*shape, dtype)
    assert gemm_simt.space(problem).check(gemm_simt.default_config(problem)) is None


def test_default_is_the_classic_tile_for_large_shapes() -> None:
    config = gemm_simt.default_config(_problem(4096, 4096, 4096))
    assert config in CLASSIC


def test_vector_width_needs_divisible_k_and_n() -> None:
    assert gemm_simt.space(_problem(4096, 4096, 4096)).choices()["vec"] == (1, 2, 4)
    assert gemm_simt.space(_problem(8, 4096, 4098)).choices()["vec"] == (1, 2)  # K % 4 != 0
    assert gemm_simt.space(_problem(8, 4098, 4096)).choices()["vec"] == (1, 2)  # N % 4 != 0
    assert gemm_simt.space(_problem(7, 13, 8)).choices()["vec"] == (1,)
    assert gemm_simt.space(_problem(1001, 8, 8)).choices()["vec"] == (1, 2, 4)  # M is free


def test_space_holds_the_classic_configs() -> None:
    space = gemm_simt.space(_problem(8192, 8192, 8192))
    for config in CLASSIC:
        assert space.check(config) is None, config
    assert 1000 <= space.size() <= 5000


def test_constraint_explains_invalid_points() -> None:
    space = gemm_simt.space(_problem(4096, 4096, 4096))
    base = CLASSIC[0]
    cases = {
        "lanes": dict(base, wm=64, wn=64),  # 8 x 8 lanes
        "does not divide block": dict(base, wm=256 // 2, bm=64),
        "16-wide": dict(base, tm=16, tn=4, wm=64, wn=32),
        "threads": dict(base, wm=16, wn=32, tm=4, tn=4, bm=256, bn=128),  # 2048 threads
        "caps nothing": dict(base, bm=64, wm=32, wn=64, occ=2),  # 128 threads
        "not one of": dict(base, vec=8),
    }
    for words, config in cases.items():
        reason = space.check(config)
        assert reason is not None and words in reason and "\n" not in reason, (words, reason)


def test_launch_geometry_over_the_space() -> None:
    problem = _problem(8192, 8192, 8192)
    configs = list(gemm_simt.space(problem))
    assert len({config_key(c) for c in configs}) == len(configs)
    for config in sampled(configs):
        launch = gemm_simt.launch(problem, config, sm_count=132)
        threads = (config["bm"] // config["wm"]) * (config["bn"] // config["wn"]) * 32
        assert launch.block == (threads, 1, 1) and 64 <= threads <= 1024
        assert launch.shared_bytes == gemm_simt.shared_bytes(config) <= MAX_SHARED
        expected = config["stages"] * config["bk"] * (config["bm"] + 4 + config["bn"]) * 4
        assert launch.shared_bytes == expected
        assert all(1 <= g <= limit for g, limit in zip(launch.grid, MAX_GRID, strict=True))
        assert launch.grid[0] * config["bn"] >= problem.n and launch.grid[1] * config["bm"] >= problem.m
        assert launch.workspace_floats == 0 and launch.counters == 0


def test_grid_y_is_capped_for_very_tall_problems() -> None:
    config = dict(CLASSIC[0], bm=32, wm=32, wn=32, tm=4, tn=8, bn=64)
    problem = _problem(32 * 70000 + 5, 3, 2)
    assert gemm_simt.space(problem).check(dict(config, vec=1)) is None
    launch = gemm_simt.launch(problem, dict(config, vec=1), sm_count=132)
    assert launch.grid == (1, 65535, 1)  # the kernel strides over the remaining M tiles


def test_kernel_names_are_unique_and_sources_name_them() -> None:
    problem = _problem(4096, 4096, 4096)
    configs = sampled(list(gemm_simt.space(problem)), 500)
    names = {gemm_simt.kernel_name(problem, c) for c in configs}
    assert len(names) == len(configs) and all(n.isidentifier() for n in names)
    config = CLASSIC[1]
    source = gemm_simt.kernel_source(problem, config)
    assert source.startswith('#include "gemm/gemm_simt.cu"\n')
    assert f'extern "C" __global__ void __launch_bounds__(256, {config["occ"]})' in source
    assert f"{gemm_simt.kernel_name(problem, config)}(const float* A, const float* B, float* C, int M" in source
    assert "float alpha, float beta, float* workspace, unsigned int* counters)" in source


def _compile_jobs() -> list[CompileJob]:
    return in_space_jobs(gemm_simt, [(_problem(4096, 4096, 4096), config) for config in REPRESENTATIVE])


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: "_".join(str(v) for v in c.values()))
def test_representative_instances_compile_for_sm_90(config: Config) -> None:
    compile_in_space(gemm_simt, [(_problem(4096, 4096, 4096), config)])


# On the GPU machine (`pytest -m gpu`): results against float64 on tails in M, N and K, with beta 0
# (C poisoned with NaN, so it must not be read) and beta != 0.
GPU_SHAPES = [(1, 1, 1), (7, 300, 13), (129, 131, 17), (200, 260, 40), (300, 7, 33), (1000, 1001, 999)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_results_match_float64_on_the_gpu(shape: tuple[int, int, int], tmp_path: Path) -> None:
    from autotune.measure import gpu

    cuda = gpu.driver()
    gpu.context()
    problem = _problem(*shape)
    kernels = gpu.Kernels()
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal((problem.m, problem.k)).astype(np.float32)
    b = rng.standard_normal((problem.k, problem.n)).astype(np.float32)
    c0 = rng.standard_normal((problem.m, problem.n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    a_gpu, b_gpu = cuda.to_device(a), cuda.to_device(b)
    space = gemm_simt.space(problem)
    for config in REPRESENTATIVE:
        config = dict(config, vec=max(v for v in space.choices()["vec"] if v <= config["vec"]))
        assert space.check(config) is None
        name = gemm_simt.kernel_name(problem, config)
        compiled = compile_kernel(CompileJob(name, gemm_simt.kernel_source(problem, config), "sm_90", "t"), tmp_path)
        assert compiled.cubin is not None, compiled.message
        function = kernels.function(compiled.cubin, name, gemm_simt.ARG_TYPES)
        launch = gemm_simt.launch(problem, config, sm_count=132)
        gpu.opt_in_shared(function, launch.shared_bytes)
        for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
            c_in = np.full_like(c0, np.nan) if beta == 0 else c0
            c_gpu = cuda.to_device(c_in)
            function.prepared_call(
                launch.grid, launch.block, a_gpu, b_gpu, c_gpu, problem.m, problem.n, problem.k,
                np.float32(alpha), np.float32(beta), 0, 0, shared_size=launch.shared_bytes,
            )  # fmt: skip
            got = cuda.from_device_like(c_gpu, c0).astype(np.float64)
            want = alpha * exact + beta * c0.astype(np.float64)
            tol = (problem.k + 2) * 2.0**-23 * (abs(alpha) * scale + abs(beta) * np.abs(c0)) + 1e-30
            assert np.isfinite(got).all(), (name, alpha, beta)
            assert (np.abs(got - want) <= tol).all(), (name, alpha, beta, float(np.abs(got - want).max()))
