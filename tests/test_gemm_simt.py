"""The SIMT GEMM family, for both layouts of B (K x N, and N x K for trans=True): a valid default and
seeds everywhere, sane geometry over the space, nvcc compiles it."""

from __future__ import annotations

import hashlib
import itertools
import shutil

import numpy as np
import pytest

from autotune.build.compiler import CompileJob, compile_kernel
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops.gemm import simt as gemm_simt
from tests import direct_launch
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


def _problem(m: int, n: int, k: int, dtype: str = "float32", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


LAYOUTS = pytest.mark.parametrize("trans", [False, True], ids=["kn", "nk"])
# Tails in every size, K and N of every residue mod 4, one size of 1.
SEED_SHAPES = [*SHAPES, (4096, 4096, 4098), (4096, 4098, 4096), (130, 4096, 4097), (4096, 1, 4096), (4096, 4096, 1)]


@LAYOUTS
@pytest.mark.parametrize("dtype", gemm_simt.DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_default_config_is_valid(shape: tuple[int, int, int], dtype: str, trans: bool) -> None:
    problem = _problem(*shape, dtype, trans)
    assert gemm_simt.space(problem).check(gemm_simt.default_config(problem)) is None


def test_seeds_are_valid_for_both_layouts() -> None:
    for shape, trans in itertools.product(SEED_SHAPES, (False, True)):
        problem = _problem(*shape, trans=trans)
        seeds = gemm_simt.seed_configs(problem)
        assert seeds, problem
        space = gemm_simt.space(problem)
        for seed in seeds:
            assert space.check(seed) is None, (problem, seed)
        assert len({config_key(c) for c in seeds}) == len(seeds)


@LAYOUTS
def test_default_is_the_classic_tile_for_large_shapes(trans: bool) -> None:
    config = gemm_simt.default_config(_problem(4096, 4096, 4096, trans=trans))
    assert config in CLASSIC


@LAYOUTS
def test_vector_width_needs_divisible_k_and_n(trans: bool) -> None:
    # K x N: A's rows need K % VEC, B's and C's N % VEC. N x K: A's and B's rows (loads along K) need
    # K % VEC, C's rows N % VEC: the same choices.
    def vecs(m: int, n: int, k: int) -> tuple[int, ...]:
        return gemm_simt.space(_problem(m, n, k, trans=trans)).choices()["vec"]

    assert vecs(4096, 4096, 4096) == (1, 2, 4)
    assert vecs(8, 4096, 4098) == (1, 2)  # K % 4 != 0
    assert vecs(8, 4098, 4096) == (1, 2)  # N % 4 != 0
    assert vecs(7, 13, 8) == (1,)
    assert vecs(7, 8, 13) == (1,)
    assert vecs(1001, 8, 8) == (1, 2, 4)  # M is free


def test_space_holds_the_classic_configs() -> None:
    space = gemm_simt.space(_problem(8192, 8192, 8192))
    for config in CLASSIC:
        assert space.check(config) is None, config
    assert 1000 <= space.size() <= 5000


def test_both_layouts_have_the_same_space() -> None:
    """B's padded N x K tile costs BK * 4 floats per stage more shared memory: no config is lost by it."""
    for shape in ((8192, 8192, 8192), (1000, 1001, 999)):
        kn, nk = (list(gemm_simt.space(_problem(*shape, trans=trans))) for trans in (False, True))
        assert kn == nk


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


@LAYOUTS
def test_launch_geometry_over_the_space(trans: bool) -> None:
    problem = _problem(8192, 8192, 8192, trans=trans)
    configs = list(gemm_simt.space(problem))
    assert len({config_key(c) for c in configs}) == len(configs)
    for config in sampled(configs):
        launch = gemm_simt.launch(problem, config, sm_count=132)
        threads = (config["bm"] // config["wm"]) * (config["bn"] // config["wn"]) * 32
        assert launch.block == (threads, 1, 1) and 64 <= threads <= 1024
        assert launch.shared_bytes == gemm_simt.shared_bytes(config, trans) <= MAX_SHARED
        b_pad = 4 if trans else 0  # N x K: B's tile is stored transposed, padded like A's
        expected = config["stages"] * config["bk"] * (config["bm"] + 4 + config["bn"] + b_pad) * 4
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
    kn, nk = _problem(4096, 4096, 4096), _problem(4096, 4096, 4096, trans=True)
    configs = sampled(list(gemm_simt.space(kn)), 500)
    names = {gemm_simt.kernel_name(problem, c) for c in configs for problem in (kn, nk)}
    assert len(names) == 2 * len(configs) and all(n.isidentifier() for n in names)
    assert gemm_simt.ARG_TYPES == "PPPiiiiiiffPP"  # A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, ws, counters
    config = CLASSIC[1]
    assert gemm_simt.kernel_name(nk, config) == gemm_simt.kernel_name(kn, config) + "_nt"
    for problem, b_nk in ((kn, "false"), (nk, "true")):
        source = gemm_simt.kernel_source(problem, config)
        assert source.startswith('#include "gemm/gemm_simt.cu"\n')
        assert f'extern "C" __global__ void __launch_bounds__(256, {config["occ"]})' in source
        name = gemm_simt.kernel_name(problem, config)
        assert (
            f"{name}(const float* A, const float* B, float* C, int M, int N, int K, int lda, int ldb, int ldc" in source
        )
        assert "float alpha, float beta, float* workspace, unsigned int* counters)" in source
        assert f"at_gemm_simt::gemm_simt_body<float, {b_nk}, 128, 128, " in source
        assert "(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta);" in source


# Compiled in the default run (three instances): the N x K defaults of large shapes and of small ones
# with scalar loads, and float4 loads with idle loader slots in B's N x K tile (128 vectors, 256 threads).
NT_SMALL: list[Config] = [
    gemm_simt.default_config(_problem(4096, 4096, 4096, trans=True)),
    gemm_simt.default_config(_problem(7, 13, 9, trans=True)),
    dict(bm=256, bn=32, bk=16, wm=32, wn=32, tm=8, tn=4, vec=4, stages=1, occ=2),
]


def _nt_compile_jobs() -> list[CompileJob]:
    return in_space_jobs(gemm_simt, [(_problem(4096, 4096, 4096, trans=True), config) for config in NT_SMALL])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # N x K instances: with the other architecture compiles, in .ci/run (time)
@pytest.mark.nvcc(jobs=_nt_compile_jobs)
def test_n_by_k_instances_compile_for_sm_90() -> None:
    compile_in_space(gemm_simt, [(_problem(4096, 4096, 4096, trans=True), config) for config in NT_SMALL])


def _compile_jobs() -> list[CompileJob]:
    return in_space_jobs(
        gemm_simt,
        [(_problem(4096, 4096, 4096, trans=trans), config) for trans in (False, True) for config in REPRESENTATIVE],
    )


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
@LAYOUTS
@pytest.mark.parametrize("config", REPRESENTATIVE, ids=lambda c: "_".join(str(v) for v in c.values()))
def test_representative_instances_compile_for_sm_90(config: Config, trans: bool) -> None:
    compile_in_space(gemm_simt, [(_problem(4096, 4096, 4096, trans=trans), config)])


# On the GPU machine (`pytest -m gpu`): both layouts of B against float64, with tails in M, N and K,
# beta 0 (C poisoned with NaN, so it must not be read) and beta != 0, and rows with gaps between them
# (lda > K, ldb > its row length, ldc > N, NaN in the gaps): odd gaps and arrays one float off 16 bytes
# for vec=1, gaps that keep rows 16-byte aligned for vec > 1 (the launcher only runs those on such rows).
GPU_SHAPES = [
    (1, 1, 1),
    (7, 300, 13),
    (129, 131, 17),
    (200, 260, 40),  # vec 4
    (33, 130, 66),  # vec 2
    (300, 7, 33),
    (257, 384, 200),  # vec 4, a partial M tile
    (1000, 1001, 999),
]


def _depends() -> str:
    """What the instances' cache key must follow: the kernel file they include."""
    return hashlib.sha256((kernels_dir() / gemm_simt.KERNEL_FILE).read_bytes()).hexdigest()[:16]


def _gpu_configs(problem: Problem) -> list[Config]:
    """The representative tilings with the widest vec the problem allows up to theirs, the default and
    the seeds: each once."""
    space = gemm_simt.space(problem)
    picked = [
        dict(config, vec=max(v for v in space.choices()["vec"] if v <= config["vec"])) for config in REPRESENTATIVE
    ]
    picked += [gemm_simt.default_config(problem), *gemm_simt.seed_configs(problem)]
    return list({config_key(c): c for c in picked}.values())


@pytest.mark.gpu
@LAYOUTS
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_results_match_float64_on_the_gpu(shape: tuple[int, int, int], trans: bool) -> None:
    from autotune.measure import pycuda_gpu

    cuda = pycuda_gpu.driver()
    pycuda_gpu.context()
    m, n, k = shape
    problem = _problem(m, n, k, trans=trans)
    kernels = pycuda_gpu.Kernels()
    rng = np.random.default_rng(sum(shape) + trans)
    b_rows, b_cols = (n, k) if trans else (k, n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((b_rows, b_cols)).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    b_kn = (b.T if trans else b).astype(np.float64)
    exact = a.astype(np.float64) @ b_kn
    scale = np.abs(a).astype(np.float64) @ np.abs(b_kn)

    def device(x: np.ndarray, ld: int, offset: int) -> tuple[object, int]:
        """x in rows `ld` floats apart, NaN in the gaps, starting `offset` floats into a fresh
        allocation: (the allocation, x's address)."""
        rows, cols = x.shape
        padded = np.full((offset + rows * ld + 8,), np.nan, np.float32)
        padded[offset : offset + rows * ld].reshape(rows, ld)[:, :cols] = x
        owner = cuda.to_device(padded)
        return owner, int(owner) + 4 * offset

    depends = _depends()
    checked = 0
    for config in _gpu_configs(problem):
        assert gemm_simt.space(problem).check(config) is None, config
        name = gemm_simt.kernel_name(problem, config)
        compiled = compile_kernel(CompileJob(name, gemm_simt.kernel_source(problem, config), "sm_90", depends))
        assert compiled.cubin is not None, compiled.message
        function = kernels.function(compiled.cubin, name, gemm_simt.ARG_TYPES)
        launch = gemm_simt.launch(problem, config, sm_count=132)
        direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
        # Contiguous rows; then gaps: odd ones (and arrays one float off 16 bytes) for scalar loads,
        # whole 16-byte ones for vector loads.
        (ga, gb, gc), offset = ((3, 5, 7), 1) if config["vec"] == 1 else ((4, 8, 4), 0)
        for lda, ldb, ldc, off in ((k, b_cols, n, 0), (k + ga, b_cols + gb, n + gc, offset)):
            a_owner, a_at = device(a, lda, off)
            b_owner, b_at = device(b, ldb, off)
            for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
                c_in = np.full_like(c0, np.nan) if beta == 0 else c0
                c_owner, c_at = device(c_in, ldc, off)
                function.prepared_call(
                    launch.grid, launch.block, a_at, b_at, c_at, m, n, k, lda, ldb, ldc,
                    np.float32(alpha), np.float32(beta), 0, 0, shared_size=launch.shared_bytes,
                )  # fmt: skip
                cuda.Context.synchronize()
                raw = np.empty((m * ldc,), np.float32)
                cuda.memcpy_dtoh(raw, c_at)
                stored = raw.reshape(m, ldc).astype(np.float64)
                got = stored[:, :n]
                want = alpha * exact + beta * c0.astype(np.float64)
                tol = (k + 2) * 2.0**-23 * (abs(alpha) * scale + abs(beta) * np.abs(c0)) + 1e-30
                what = (name, (lda, ldb, ldc, off), alpha, beta)
                assert np.isfinite(got).all(), what
                assert (np.abs(got - want) <= tol).all(), (*what, float(np.abs(got - want).max()))
                assert np.isnan(stored[:, n:]).all(), what  # the gaps between C's rows are left alone
                del c_owner
            del a_owner, b_owner
            checked += 1
    assert checked >= 2 * len(REPRESENTATIVE)
