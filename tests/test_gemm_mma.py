"""The "mma" GEMM family: space and constraints for both layouts of B (K x N, and N x K for trans=True),
launch geometry, sm_90 compiles of its kernels, and (on a GPU) its results against float64."""

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
from autotune.ops.gemm import mma as gemm_mma
from tests import direct_launch, padded
from tests.nvcc import compile_all

SHAPES = [(1, 1, 1), (1000, 1001, 999), (7, 4096, 13), (4096, 4096, 4096)]
GRID_X_MAX, GRID_YZ_MAX = 2**31 - 1, 65535


def _problem(m: int, n: int, k: int, dtype: str = "float16", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


def _config(**overrides: int) -> Config:
    base = dict(bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, vec=8, swizzle=8, split=1)
    return {**base, **overrides}


def test_default_config_is_valid_everywhere() -> None:
    for (m, n, k), dtype, trans in itertools.product(SHAPES, gemm_mma.DTYPES, (False, True)):
        problem = _problem(m, n, k, dtype, trans)
        config = gemm_mma.default_config(problem)
        assert gemm_mma.space(problem).check(config) is None, (problem, config)
        assert config["vec"] == 1  # no alignment assumed: the launcher falls back to it for odd pointers


def test_vector_width_follows_alignment() -> None:
    assert gemm_mma.space(_problem(1000, 1001, 999)).choices()["vec"] == (1,)
    assert gemm_mma.space(_problem(1000, 1002, 998)).choices()["vec"] == (1, 2)
    assert gemm_mma.space(_problem(1000, 1004, 996)).choices()["vec"] == (1, 4)
    assert gemm_mma.space(_problem(1000, 4096, 1004)).choices()["vec"] == (1, 4)
    assert gemm_mma.space(_problem(8, 4096, 4096)).choices()["vec"] == (1, 8)


def test_vector_width_of_n_by_k_follows_k_alone() -> None:
    # B's rows are K long there: its copies run along K, as A's do, so N's oddness does not matter.
    assert gemm_mma.space(_problem(1000, 1001, 1000, trans=True)).choices()["vec"] == (1, 8)
    assert gemm_mma.space(_problem(1000, 1002, 1004, trans=True)).choices()["vec"] == (1, 4)
    assert gemm_mma.space(_problem(1000, 4096, 999, trans=True)).choices()["vec"] == (1,)
    space = gemm_mma.space(_problem(4096, 4100, 4096, trans=True))
    assert space.check(_config(vec=8)) is None
    assert gemm_mma.vec_reason(_problem(4096, 4096, 4100, trans=True), 8) == "vec=8 needs k divisible by 8"
    assert gemm_mma.vec_reason(_problem(4096, 4100, 4096), 8) == "vec=8 needs k and n divisible by 8"


def test_seeds_are_valid_in_both_layouts() -> None:
    for (m, n, k), dtype, trans in itertools.product(
        [*SHAPES, (8192, 8192, 8192), (4096, 4100, 4096), (512, 4096, 1000)], gemm_mma.DTYPES, (False, True)
    ):
        problem = _problem(m, n, k, dtype, trans)
        seeds = gemm_mma.seed_configs(problem)
        for seed in seeds:
            assert gemm_mma.space(problem).check(seed) is None, (problem, seed)
            assert seed["vec"] == gemm_mma.widest_vec(problem)
        if min(m, n, k) >= 4096:
            assert len(seeds) == 6, problem


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


def test_names_are_unique_per_layout() -> None:
    kn, nk = _problem(4096, 4096, 4096), _problem(4096, 4096, 4096, trans=True)
    configs = list(gemm_mma.space(nk))
    assert configs == list(gemm_mma.space(kn))  # the same space where K and N both allow vec=8
    names_kn = {gemm_mma.kernel_name(kn, c) for c in configs}
    names_nk = {gemm_mma.kernel_name(nk, c) for c in configs}
    assert not names_kn & names_nk
    assert all(name.endswith("_nt") for name in names_nk) and not any(name.endswith("_nt") for name in names_kn)
    # K x N names are what they were before B's layout was a parameter (db/kernels/manifest.json names them).
    assert gemm_mma.kernel_name(kn, _config()) == "gemm_mma_float16_128x256x32_w64x64_s4_v8_z8"


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
    for trans in (False, True):
        problem = _problem(4096, 4096, 4096, "bfloat16", trans)
        source = gemm_mma.kernel_source(problem, _config())
        assert '#include "gemm/gemm_mma.cu"' in source
        assert "__launch_bounds__(256)" in source
        b_nk = "true" if trans else "false"
        assert f"gemm_mma_body<__nv_bfloat16, {b_nk}, 128, 256, 32, 64, 64, 4, 8, 8>" in source
        assert "int M, int N, int K, int lda, int ldb, int ldc," in source
        assert "(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, workspace, counters)" in source
        assert gemm_mma.kernel_name(problem, _config()) in source


# Spread over dtypes, copy widths, tile shapes (rows of 4 and 8 chunks), stage counts, swizzles, and
# both layouts of B (trans: N x K, whose B tile is BN x BK, rows of BK as A's).
COMPILE_SAMPLE = [
    ("float16", False, _config()),
    ("bfloat16", False, _config(bm=256, bn=128, bk=64, stages=3, swizzle=16)),
    ("float16", False, _config(bm=128, bn=128, bk=64, stages=5, vec=4, swizzle=1)),
    ("bfloat16", False, _config(bm=64, bn=128, wm=32, wn=32, stages=2, vec=2, swizzle=4)),
    ("float16", False, _config(bm=128, bn=128, wm=64, wn=32, stages=3, vec=1, swizzle=1)),
    ("bfloat16", False, _config(bm=64, bn=64, wm=32, wn=32, bk=64, stages=3, vec=1, swizzle=1)),
    ("float16", True, _config()),
    ("bfloat16", True, _config(bm=256, bn=128, bk=64, stages=3, swizzle=16)),
    ("bfloat16", True, _config(bm=128, bn=64, wm=32, wn=32, stages=4, vec=4, swizzle=4)),
    ("float16", True, _config(bm=128, bn=128, wm=64, wn=32, stages=3, vec=1, swizzle=1)),
    ("bfloat16", True, _config(bm=64, bn=64, wm=32, wn=32, bk=64, stages=3, vec=1, swizzle=1)),
]


def _depends() -> str:
    """What the instances' cache key must follow: the kernel file they include."""
    return hashlib.sha256((kernels_dir() / gemm_mma.KERNEL_FILE).read_bytes()).hexdigest()[:16]


def _compile_jobs() -> list[CompileJob]:
    depends = _depends()
    jobs = []
    for dtype, trans, config in COMPILE_SAMPLE:
        problem = _problem(4096, 4096, 4096, dtype, trans)
        name = gemm_mma.kernel_name(problem, config)
        jobs.append(CompileJob(name, gemm_mma.kernel_source(problem, config), "sm_90", depends))
    return jobs


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90() -> None:
    compile_all(_compile_jobs())


# On the GPU machine (`pytest -m gpu`): both layouts of B against float64, with tails in M, N and K,
# beta 0 (C poisoned with NaN, so it must not be read) and beta != 0, split-K, and rows with gaps
# between them (lda > K, ldb > its row length, ldc > N): odd gaps for vec=1 (rows and C pairs then
# start unaligned), gaps of 16 bytes for vec > 1 (the launcher only runs those on 16-byte rows).
# K x N gets vec 8, 4 and 2 on 200 x 264 x 72, 96 x 520 x 1028 and 70 x 130 x 258; N x K also vec 8 on
# 129 x 131 x 40 (odd N: its copies run along K only).
GPU_SHAPES = [
    (1, 1, 1),
    (17, 300, 13),
    (129, 131, 40),
    (200, 264, 72),
    (300, 7, 33),
    (96, 520, 1028),
    (70, 130, 258),
    (1000, 1001, 999),
]
# Tilings fitted to each shape (Space.fit) with vec=1 and with the widest vec: rows of 4 and 8
# chunks, one and several copy steps, warps of 32x32 to 64x64, a K split over 3 slices.
GPU_TILINGS = [
    _config(bm=64, bn=64, wm=32, wn=32, stages=2, swizzle=1),
    _config(bm=128, bn=128, wm=64, wn=32, bk=64, stages=3, swizzle=4),
    _config(bm=128, bn=256, stages=4, swizzle=8),
    _config(bm=64, bn=128, wm=32, wn=64, stages=3, swizzle=1, split=2),
]


def _gpu_configs(problem: Problem) -> list[Config]:
    space = gemm_mma.space(problem)
    picked = [gemm_mma.default_config(problem), *gemm_mma.seed_configs(problem)[:1]]
    for tiling in GPU_TILINGS:
        for vec in sorted({1, gemm_mma.widest_vec(problem)}):
            fitted = space.fit(tiling, {"vec": vec})
            if fitted is not None:
                picked.append(fitted)
    unique = {config_key(c): c for c in picked}
    return list(unique.values())


@pytest.mark.gpu
@pytest.mark.parametrize("trans", [False, True], ids=["kn", "nk"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_results_match_float64_on_the_gpu(shape: tuple[int, int, int], trans: bool) -> None:
    from autotune.measure import pycuda_gpu

    cuda = pycuda_gpu.driver()
    pycuda_gpu.context()
    kernels, scratch = pycuda_gpu.Kernels(), direct_launch.Scratch(cuda)
    m, n, k = shape
    dtype = gemm_mma.DTYPES[(GPU_SHAPES.index(shape) + trans) % 2]  # each shape and layout in one of them
    problem = _problem(m, n, k, dtype, trans)
    rng = np.random.default_rng(sum(shape) + trans)
    b_rows, b_cols = (n, k) if trans else (k, n)
    # Values exact in both dtypes (small integers times powers of two), so the inputs round to nothing.
    a = rng.integers(-8, 9, (m, k)).astype(np.float32) / 8
    b = rng.integers(-8, 9, (b_rows, b_cols)).astype(np.float32) / 8
    c0 = rng.integers(-8, 9, (m, n)).astype(np.float32) / 4
    b_kn = b.T if trans else b
    exact = a.astype(np.float64) @ b_kn.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b_kn).astype(np.float64)

    def device(x: np.ndarray, ld: int, offset: int) -> tuple[object, int]:
        return padded.to_device(cuda, x, dtype, ld, offset)

    def from_device(address: int, rows: int, ld: int) -> np.ndarray:
        return padded.from_device(cuda, address, dtype, rows, ld)

    depends = _depends()
    for config in _gpu_configs(problem):
        assert gemm_mma.space(problem).check(config) is None, config
        name = gemm_mma.kernel_name(problem, config)
        compiled = compile_kernel(CompileJob(name, gemm_mma.kernel_source(problem, config), "sm_90", depends))
        assert compiled.cubin is not None, compiled.message
        function = kernels.function(compiled.cubin, name, gemm_mma.ARG_TYPES)
        launch = gemm_mma.launch(problem, config, sm_count=132)
        direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
        workspace, counters = scratch.get(launch.workspace_floats, launch.counters)
        # Contiguous rows; then gaps: odd ones (and arrays one element off 16 bytes) for scalar loads,
        # 16-byte ones for vector loads.
        (ga, gb, gc), offset = ((3, 5, 7), 1) if config["vec"] == 1 else ((8, 16, 8), 0)
        for lda, ldb, ldc, off in ((k, b_cols, n, 0), (k + ga, b_cols + gb, n + gc, offset)):
            a_owner, a_at = device(a, lda, off)
            b_owner, b_at = device(b, ldb, off)
            for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
                c_in = np.full_like(c0, np.nan) if beta == 0 else c0
                c_owner, c_at = device(c_in, ldc, off)
                function.prepared_call(
                    launch.grid, launch.block, a_at, b_at, c_at, m, n, k, lda, ldb, ldc,
                    np.float32(alpha), np.float32(beta), workspace, counters, shared_size=launch.shared_bytes,
                )  # fmt: skip
                cuda.Context.synchronize()
                stored = from_device(c_at, m, ldc)
                got = stored[:, :n]
                want = alpha * exact + beta * c0.astype(np.float64)
                # float32 accumulation, then one rounding to the 8 (bfloat16) or 11 (half) bit output.
                ulp = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
                tol = (k + 2) * 2.0**-23 * abs(alpha) * scale + ulp * np.abs(want) + 1e-6
                what = (name, (lda, ldb, ldc, off), alpha, beta)
                assert np.isfinite(got).all(), what
                assert (np.abs(got - want) <= tol).all(), (*what, float(np.abs(got - want).max()))
                assert np.isnan(stored[:, n:]).all(), what  # the gaps between C's rows are left alone
                del c_owner
            del a_owner, b_owner
        # Split-K leaves its workspace and counters zeroed for the next launch.
        if launch.counters:
            left = np.empty((launch.counters,), np.uint32)
            cuda.memcpy_dtoh(left, counters)
            assert not left.any(), name
