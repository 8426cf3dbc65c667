"""The skinny GEMM family on the CPU: defaults, constraints, launch geometry, and nvcc compiles, for B
stored K x N and N x K (`trans`); on the GPU (-m gpu), results against float64."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import CompileJob, compile_kernel
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import skinny as skinny
from tests import direct_launch
from tests.limits import assert_within_limits, distinct_configs, sampled
from tests.nvcc import compile_in_space, in_space_jobs

DTYPES = ("float32", "float16", "bfloat16")
# The shared test shapes with m clipped to the family's 16 rows, plus the goal and transposed-GEMV shapes.
SHAPES = [
    (1, 1, 1),
    (16, 1001, 999),
    (7, 4096, 13),
    (16, 4096, 4096),
    (1, 4096, 4096),
    (16, 14336, 14336),
    (1, 256, 131072),
    (1, 131072, 256),
    (3, 5, 2),
]


def _problem(m: int, n: int, k: int, dtype: str = "float16", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


def _nt(m: int, n: int, k: int, dtype: str = "float16") -> Problem:
    """B stored N x K (C = A Wᵀ)."""
    return _problem(m, n, k, dtype, trans=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_is_valid_everywhere(dtype: str) -> None:
    for m, n, k in SHAPES:
        problem = _problem(m, n, k, dtype)
        assert skinny.space(problem).check(skinny.default_config(problem)) is None, (m, n, k)


def test_default_config_is_valid_for_every_small_shape() -> None:
    for m, n, k, dtype, trans in itertools.product(
        range(1, 17), (1, 2, 3, 8, 24, 4096), (1, 2, 3, 5, 8, 1000), DTYPES, (False, True)
    ):
        problem = _problem(m, n, k, dtype, trans)
        assert skinny.space(problem).check(skinny.default_config(problem)) is None, (m, n, k, dtype, trans)


# N x K (B_NK): the goal shapes (M in 1..16 by N, K in 4096, 14336), tails, tiny and lopsided shapes.
NT_SHAPES = [
    *[(m, n, k) for m in (1, 2, 4, 8, 16) for n in (4096, 14336) for k in (4096, 14336)],
    (1, 1, 1),
    (3, 5, 2),
    (7, 13, 5),
    (16, 1001, 999),
    (5, 4095, 4100),
    (1, 256, 131072),
    (1, 131072, 256),
    (12, 200, 4100),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_nt_default_and_seeds_are_valid_everywhere(dtype: str) -> None:
    for m, n, k in NT_SHAPES:
        problem = _nt(m, n, k, dtype)
        space = skinny.space(problem)
        default = skinny.default_config(problem)
        assert space.check(default) is None, (m, n, k, space.check(default))
        seeds = skinny.seed_configs(problem)
        assert seeds and all(space.check(c) is None for c in seeds), (m, n, k)
        assert all(c["a_chunk"] == 0 for c in [default, *seeds])


def test_nt_default_fills_the_gpu_on_the_goal_shapes() -> None:
    """The default is a fast config, not just a valid one: 16-byte loads, 256 threads, K split until
    the grid has about two blocks per SM (H100/H200), never more than SEED_BLOCKS."""
    for dtype in DTYPES:
        for m in (1, 2, 4, 8, 16):
            for n, k in ((4096, 4096), (4096, 14336), (14336, 4096), (14336, 14336)):
                problem = _nt(m, n, k, dtype)
                c = skinny.default_config(problem)
                launch = skinny.launch(problem, c, sm_count=132)
                assert c["vec"] * 4 == 16 if dtype == "float32" else c["vec"] * 2 == 16
                assert launch.block == (256, 1, 1) and c["mt"] == m
                blocks = launch.grid[0] * launch.grid[1]
                assert 128 <= blocks <= gemm_shared.SEED_BLOCKS or c["split"] == 1, (m, n, k, c)


def test_nt_default_is_valid_for_every_small_shape() -> None:
    for m, n, k in itertools.product((1, 3, 16), range(1, 40), (1, 2, 3, 7, 8, 9, 31, 33, 1000)):
        problem = _nt(m, n, k, "float32")
        assert skinny.space(problem).check(skinny.default_config(problem)) is None, (m, n, k)


def test_nt_vector_width_follows_k() -> None:
    """N x K loads run along K (W's and A's rows): the widths K allows, N does not matter."""
    assert skinny.space(_nt(1, 64, 999)).choices()["vec"] == (1,)
    assert skinny.space(_nt(1, 999, 4096)).choices()["vec"] == (1, 4, 8)
    assert skinny.space(_nt(1, 999, 4096, "float32")).choices()["vec"] == (1, 2, 4)
    assert skinny.space(_nt(1, 4096, 4100)).choices()["vec"] == (1, 2, 4)
    assert skinny.space(_nt(1, 64, 64)).choices()["a_chunk"] == (0,)


def test_nt_constraints_name_the_problem() -> None:
    problem = _nt(16, 4096, 4096)
    space = skinny.space(problem)
    base = skinny.default_config(problem)
    assert "a_chunk" in (space.check(dict(base, a_chunk=2)) or "")
    assert "whole warps" in (space.check(dict(base, nt=8, kw=2)) or "")
    assert "registers" in (space.check(dict(base, unroll=8)) or "")
    narrow = _nt(1, 3, 4096)
    assert "rows per group" in (skinny.space(narrow).check(dict(base, mt=1, unroll=8, nt=8, kw=32)) or "")
    assert "row groups" in (skinny.space(_nt(1, 40, 4096)).check(dict(base, mt=1, unroll=4, nt=32, kw=8)) or "")
    short = _nt(1, 4096, 40)
    assert "exceed k" in (skinny.space(short).check(dict(skinny.default_config(short), kw=8, vec=8)) or "")


def test_nt_tiles_are_rows_of_w() -> None:
    """An N x K tile is nt groups of `unroll` rows of W: N / (nt*unroll) tiles, whatever vec is."""
    problem = _nt(5, 1000, 4096)
    config = dict(skinny.default_config(problem), nt=32, kw=8, unroll=2, mt=4, split=1)
    assert skinny.tiles(problem, config) == (2, 16)
    launch = skinny.launch(problem, config, sm_count=132)
    assert launch.grid == (32, 1, 1) and launch.block == (256, 1, 1) and launch.shared_bytes == 0
    split = skinny.launch(problem, dict(config, split=4), sm_count=132)
    assert split.workspace_floats == 4 * 5 * 1000 and split.counters == 32
    assert split.shared_bytes == 0  # 256 threads for 4 x 64 outputs: one each, no partial sums to add
    assert skinny.launch(problem, dict(config, split=4, mt=1), sm_count=132).shared_bytes == 256 * 4
    clustered = skinny.launch(problem, dict(config, split=4, cluster=4), sm_count=132)
    assert clustered.workspace_floats == 0 and clustered.shared_bytes == 4 * 64 * 4


def test_nt_split_never_leaves_a_split_empty() -> None:
    for m, n, k in [(1, 4096, 4096), (16, 14336, 14336), *NT_SHAPES[20:]]:
        problem = _nt(m, n, k)
        for config in sampled(list(skinny.space(problem)), 100):
            if config["split"] > 1:
                assert (config["split"] - 1) * skinny._per_split(problem, config) < problem.k


@pytest.mark.parametrize("dtype", DTYPES)
def test_nt_configs_give_sane_launches(dtype: str) -> None:
    for m, n, k in [(16, 8192, 8192), (1, 256, 131072), (13, 1000, 999), (3, 5, 2)]:
        problem = _nt(m, n, k, dtype)
        for config in sampled(distinct_configs(skinny.space(problem), 20_000)):
            launch = skinny.launch(problem, config, sm_count=132)
            assert_within_limits(launch)
            m_tiles, n_tiles = skinny.tiles(problem, config)
            assert m_tiles * config["mt"] >= m and n_tiles * config["nt"] * config["unroll"] >= n
            assert launch.grid == (m_tiles * n_tiles, config["split"], 1)


def test_kernel_names_tell_the_layouts_apart() -> None:
    """The same config for B K x N and N x K: two kernels (the K x N name is the one records hold)."""
    config = {"nt": 32, "kw": 8, "vec": 8, "mt": 1, "unroll": 4, "a_chunk": 0, "policy": 1, "cluster": 1, "split": 1}
    kn, nt = _problem(1, 4096, 4096), _nt(1, 4096, 4096)
    assert skinny.kernel_name(kn, config) == "gemm_skinny_float16_n32_k8_v8_m1_u4_a0_p1_c1"
    assert skinny.kernel_name(nt, config) == "gemm_skinny_float16_n32_k8_v8_m1_u4_a0_p1_c1_nt"
    assert "at_skinny::skinny_body<__half, false, 32, 8, 8, 1, 4, 0, 1, 1>" in skinny.kernel_source(kn, config)
    source = skinny.kernel_source(nt, config)
    assert "at_skinny::skinny_body<__half, true, 32, 8, 8, 1, 4, 0, 1, 1>" in source
    assert "int M, int N, int K, int lda, int ldb, int ldc," in source
    m, n, k = 3, 1001, 999  # every name of both spaces of one shape: no name serves both layouts
    kn_names = {skinny.kernel_name(_problem(m, n, k), c) for c in skinny.space(_problem(m, n, k))}
    nt_names = {skinny.kernel_name(_nt(m, n, k), c) for c in skinny.space(_nt(m, n, k))}
    assert nt_names and not kn_names & nt_names


def test_more_than_16_rows_is_refused_with_a_reason() -> None:
    problem = _problem(4096, 4096, 4096)
    assert "m <= 16" in (skinny.space(problem).check(skinny.default_config(_problem(16, 4096, 4096))) or "")


def test_vector_width_needs_divisible_rows() -> None:
    assert skinny.space(_problem(1, 999, 64)).choices()["vec"] == (1,)
    # Scalar loads stay in every space: the launcher falls back to them for unaligned arrays.
    assert skinny.space(_problem(1, 4096, 64)).choices()["vec"] == (1, 4, 8)
    assert skinny.space(_problem(1, 4096, 64, "float32")).choices()["vec"] == (1, 2, 4)  # 16 bytes at most
    assert skinny.space(_problem(1, 4100, 64)).choices()["vec"] == (1, 2, 4)


def test_rows_per_thread_follow_m() -> None:
    assert skinny.space(_problem(1, 64, 64)).choices()["mt"] == (1,)
    assert skinny.space(_problem(5, 64, 64)).choices()["mt"] == (4, 8)
    assert skinny.space(_problem(16, 64, 64)).choices()["mt"] == (8, 16)


def test_constraints_name_the_problem() -> None:
    problem = _problem(16, 4096, 4096)
    space = skinny.space(problem)
    base = skinny.default_config(problem)
    assert "whole warps" in (space.check(dict(base, nt=8, kw=2)) or "")
    assert "not one of" in (space.check(dict(base, vec=3)) or "")
    assert "missing" in (space.check({"nt": 32}) or "")
    assert "registers" in (space.check(dict(base, mt=16, vec=8, unroll=4, a_chunk=0)) or "")
    small_k = _problem(16, 4096, 8)
    assert "exceed k" in (skinny.space(small_k).check(dict(skinny.default_config(small_k), kw=8)) or "")
    assert "without rows" in (skinny.space(_problem(1, 256, 100)).check(dict(base, mt=1, kw=4, split=64)) or "")


def test_split_never_leaves_a_split_empty() -> None:
    for m, n, k in SHAPES:
        problem = _problem(m, n, k)
        for config in sampled(list(skinny.space(problem))):
            if config["split"] > 1:
                per = skinny._per_split(problem, config)
                assert (config["split"] - 1) * per < problem.k


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_config_gives_a_sane_launch(dtype: str) -> None:
    for m, n, k in [(16, 8192, 8192), (1, 8192, 8192), (1, 256, 131072), (13, 1000, 999)]:
        problem = _problem(m, n, k, dtype)
        for config in sampled(distinct_configs(skinny.space(problem), 20_000)):
            launch = skinny.launch(problem, config, sm_count=132)
            assert_within_limits(launch)
            m_tiles, n_tiles = skinny.tiles(problem, config)
            assert m_tiles * config["mt"] >= m and n_tiles * config["nt"] * config["vec"] >= n
            assert launch.grid == (m_tiles * n_tiles, config["split"], 1)


def test_8192_cube_gives_a_launch_within_limits() -> None:
    """The shared geometry check: the family refuses m = 8192, but its launch arithmetic still holds."""
    problem = _problem(8192, 8192, 8192)
    for config in sampled(list(skinny.space(_problem(16, 8192, 8192)))):
        assert_within_limits(skinny.launch(problem, config, sm_count=132))


def test_split_k_workspace_and_counters() -> None:
    problem = _problem(16, 4096, 4096)
    config = dict(skinny.default_config(problem), split=8)
    launch = skinny.launch(problem, config, sm_count=132)
    assert launch.workspace_floats == 8 * 16 * 4096
    assert launch.counters == launch.grid[0] == 4096 // (32 * 8)
    assert skinny.launch(problem, skinny.default_config(problem), 132).workspace_floats == 0
    assert skinny.launch(problem, skinny.default_config(problem), 132).counters == 0


def test_cluster_split_needs_no_workspace() -> None:
    problem = _problem(16, 4096, 4096)
    config = dict(skinny.default_config(problem), cluster=8, split=8)
    assert skinny.space(problem).check(config) is None
    launch = skinny.launch(problem, config, sm_count=132)
    assert launch.grid[1] == 8 and launch.workspace_floats == 0 and launch.counters == 0
    assert "__cluster_dims__(1, 8, 1)" in skinny.kernel_source(problem, config)
    assert "__cluster_dims__" not in skinny.kernel_source(problem, skinny.default_config(problem))
    reason = skinny.space(problem).check(dict(config, split=4))
    assert reason is not None and "cluster=8" in reason and "split=4" in reason


def test_clusters_are_offered_only_where_every_gpu_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.core import fingerprint

    problem = _problem(1, 4096, 4096)
    for capabilities, offered in [((), (1, 2, 4, 8)), (("9.0",), (1, 2, 4, 8)), (("8.0", "9.0"), (1,))]:
        monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda c=capabilities: c)
        choices = {c["cluster"] for c in skinny.space(problem)}
        assert tuple(sorted(choices)) == offered, capabilities


def test_shared_memory_formula() -> None:
    # A chunks: 2 buffers of a_chunk * kw * unroll rows of mt floats.
    c = {"nt": 32, "kw": 4, "vec": 8, "mt": 16, "unroll": 2, "a_chunk": 8, "policy": 1, "cluster": 1, "split": 1}
    tree = (4 // 2) * 16 * 8 * 32 * 4
    assert skinny.shared_bytes(c) == max(2 * 8 * 4 * 2 * 16 * 4, tree)
    # Sub-warp column groups reduce by shuffles first: 8 groups of 16 threads are 4 warps, a tree of 4.
    c = {"nt": 16, "kw": 8, "vec": 8, "mt": 1, "unroll": 2, "a_chunk": 0, "policy": 1, "cluster": 1, "split": 1}
    assert skinny.shared_bytes(c) == 2 * 1 * 8 * 16 * 4
    # The last block's split reduction: one float per thread when threads outnumber outputs.
    c = {"nt": 32, "kw": 1, "vec": 1, "mt": 1, "unroll": 1, "a_chunk": 0, "policy": 1, "cluster": 1, "split": 4}
    assert skinny.shared_bytes(c) == 0
    c = dict(c, kw=32)
    assert skinny.shared_bytes(c) == max(16 * 1 * 1 * 32 * 4, 1024 * 4)
    # A cluster's block sums: mt x nt*vec floats.
    c = {"nt": 64, "kw": 1, "vec": 8, "mt": 1, "unroll": 1, "a_chunk": 0, "policy": 1, "cluster": 4, "split": 4}
    assert skinny.shared_bytes(c) == 64 * 8 * 4


def test_goal_configs_are_in_the_space() -> None:
    """The configs expected to win on an H200 (see the report in the kernel's module) are valid points."""
    expected = [
        ((1, 4096, 4096), dict(nt=32, kw=8, vec=8, mt=1, unroll=4, a_chunk=0, policy=1, cluster=1, split=16)),
        ((1, 14336, 14336), dict(nt=64, kw=8, vec=8, mt=1, unroll=2, a_chunk=0, policy=1, cluster=1, split=4)),
        ((4, 8192, 8192), dict(nt=32, kw=8, vec=8, mt=4, unroll=2, a_chunk=0, policy=1, cluster=1, split=4)),
        ((8, 4096, 4096), dict(nt=32, kw=4, vec=8, mt=8, unroll=2, a_chunk=8, policy=1, cluster=1, split=8)),
        ((16, 4096, 4096), dict(nt=32, kw=4, vec=8, mt=16, unroll=2, a_chunk=8, policy=1, cluster=1, split=8)),
        ((16, 14336, 14336), dict(nt=32, kw=4, vec=8, mt=16, unroll=2, a_chunk=8, policy=1, cluster=1, split=4)),
        ((1, 256, 131072), dict(nt=32, kw=32, vec=8, mt=1, unroll=2, a_chunk=0, policy=1, cluster=1, split=256)),
        ((1, 131072, 256), dict(nt=64, kw=4, vec=8, mt=1, unroll=4, a_chunk=0, policy=1, cluster=1, split=1)),
    ]
    for (m, n, k), config in expected:
        problem = _problem(m, n, k)
        assert skinny.space(problem).check(config) is None, ((m, n, k), skinny.space(problem).check(config))


def test_kernel_source_names_its_instance() -> None:
    problem = _problem(16, 4096, 4096, "bfloat16")
    config = skinny.default_config(problem)
    source = skinny.kernel_source(problem, config)
    name = skinny.kernel_name(problem, config)
    assert name.isidentifier() and f"{name}(" in source
    assert '#include "gemm/gemm_skinny.cu"' in source and "__nv_bfloat16" in source
    assert "__launch_bounds__(128)" in source
    other = skinny.kernel_name(problem, dict(config, split=4))
    assert other == name  # split is a launch parameter: one compiled kernel serves every split


# One config per feature: every dtype, vector width, sub-warp and multi-warp column groups, every
# rows-per-thread, A through the cache and staged, both load policies, the widest K trees.
COMPILE_SAMPLE = [
    ("float16", (16, 4096, 4096), dict(nt=32, kw=4, vec=8, mt=16, unroll=2, a_chunk=8, policy=1, cluster=1)),
    ("float16", (1, 4096, 4096), dict(nt=32, kw=8, vec=8, mt=1, unroll=4, a_chunk=0, policy=2, cluster=1)),
    ("float16", (1, 256, 131072), dict(nt=32, kw=32, vec=8, mt=1, unroll=2, a_chunk=0, policy=1, cluster=1)),
    ("float16", (3, 100, 4096), dict(nt=8, kw=16, vec=4, mt=4, unroll=2, a_chunk=2, policy=1, cluster=1)),
    ("bfloat16", (8, 14336, 14336), dict(nt=64, kw=2, vec=4, mt=8, unroll=2, a_chunk=2, policy=2, cluster=1)),
    ("bfloat16", (2, 999, 999), dict(nt=128, kw=2, vec=1, mt=2, unroll=4, a_chunk=0, policy=1, cluster=1)),
    ("float32", (16, 4096, 4096), dict(nt=32, kw=4, vec=4, mt=16, unroll=2, a_chunk=8, policy=1, cluster=1)),
    ("float32", (1, 64, 65536), dict(nt=16, kw=32, vec=4, mt=1, unroll=1, a_chunk=0, policy=2, cluster=1)),
    ("float32", (5, 4098, 512), dict(nt=64, kw=8, vec=2, mt=8, unroll=1, a_chunk=8, policy=1, cluster=1)),
    # Split-K in clusters: the block sums after a tree, after A chunks, and straight from a warp.
    ("float16", (1, 4096, 4096), dict(nt=32, kw=8, vec=8, mt=1, unroll=4, a_chunk=0, policy=1, cluster=8)),
    ("bfloat16", (16, 4096, 4096), dict(nt=32, kw=4, vec=8, mt=16, unroll=2, a_chunk=8, policy=1, cluster=4)),
    ("float32", (3, 1000, 999), dict(nt=32, kw=1, vec=4, mt=4, unroll=1, a_chunk=0, policy=2, cluster=2)),
]
# N x K: every dtype and load width, 1 to 32 lanes per row of W, 1 to 8 rows per group, every
# rows-per-thread, both load policies, the split sums straight from a group and in clusters.
NT_COMPILE_SAMPLE = [
    ("float16", (1, 4096, 4096), dict(nt=32, kw=8, vec=8, mt=1, unroll=4, a_chunk=0, policy=1, cluster=1)),
    ("float32", (16, 4096, 4096), dict(nt=32, kw=8, vec=4, mt=16, unroll=2, a_chunk=0, policy=2, cluster=1)),
    ("bfloat16", (3, 1001, 999), dict(nt=8, kw=32, vec=1, mt=4, unroll=4, a_chunk=0, policy=1, cluster=1)),
    ("float32", (5, 4096, 4100), dict(nt=64, kw=4, vec=4, mt=8, unroll=1, a_chunk=0, policy=1, cluster=1)),
    ("float32", (1, 131072, 256), dict(nt=128, kw=2, vec=2, mt=1, unroll=8, a_chunk=0, policy=2, cluster=1)),
    ("float16", (2, 7, 1), dict(nt=32, kw=1, vec=1, mt=2, unroll=2, a_chunk=0, policy=1, cluster=1)),
    ("float16", (1, 256, 131072), dict(nt=8, kw=32, vec=8, mt=1, unroll=1, a_chunk=0, policy=1, cluster=8)),
    ("bfloat16", (16, 14336, 4096), dict(nt=16, kw=16, vec=8, mt=16, unroll=2, a_chunk=0, policy=1, cluster=4)),
]


def _instances() -> list[tuple[Problem, Config]]:
    return [
        (_problem(*shape, dtype, trans), {**compiled, "split": compiled["cluster"]})
        for sample, trans in ((COMPILE_SAMPLE, False), (NT_COMPILE_SAMPLE, True))
        for dtype, shape, compiled in sample
    ]


def _compile_jobs() -> list[CompileJob]:
    return in_space_jobs(skinny, _instances())


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90() -> None:
    compile_in_space(skinny, _instances())


def _nt_default_instances() -> list[tuple[Problem, Config]]:
    """The N x K defaults of a one-row and a 16-row problem (the default run's only compiles here)."""
    problems = [_nt(1, 4096, 4096, "float16"), _nt(16, 1001, 999, "float32")]
    return [(p, skinny.default_config(p)) for p in problems]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # N x K instances: with the other architecture compiles, in .ci/run (time)
@pytest.mark.nvcc(jobs=lambda: in_space_jobs(skinny, _nt_default_instances()))
def test_nt_defaults_compile_for_sm_90() -> None:
    compile_in_space(skinny, _nt_default_instances())


# On the GPU machine (`pytest -m gpu`): results against float64 for both layouts of B, with tails in
# M, N and K, beta 0 (C poisoned with NaN, so it must not be read) and beta != 0, and rows with gaps
# (lda > K, ldb > its row, ldc > N; the gaps of C must keep what they held). Where a padding breaks
# 16-byte rows the configs run with vec = 1, as the launcher runs them.
GPU_CASES = [
    # dtype, (m, n, k), B stored N x K, extra elements per row of A, B and C
    ("float32", (1, 1, 1), True, (0, 0, 0)),
    ("float32", (3, 1001, 999), True, (0, 0, 0)),
    ("float32", (3, 1001, 999), False, (0, 0, 0)),
    ("float32", (16, 1000, 1024), True, (8, 4, 12)),
    ("float32", (5, 1000, 1024), True, (1, 3, 5)),
    ("float32", (16, 1000, 1000), False, (8, 4, 12)),
    ("float32", (7, 999, 1001), False, (1, 3, 5)),
    ("float32", (1, 131072, 256), True, (0, 0, 0)),
    ("float16", (1, 4096, 4096), True, (0, 0, 0)),
    ("float16", (1, 4096, 4096), False, (8, 16, 24)),
    ("float16", (7, 13, 5), True, (0, 0, 0)),
    ("float16", (2, 1001, 999), True, (3, 1, 7)),
    ("bfloat16", (12, 200, 4100), True, (4, 12, 8)),
    ("bfloat16", (1, 256, 131072), True, (0, 0, 0)),
    ("bfloat16", (9, 77, 8191), True, (2, 4, 2)),
]
_ROUNDING = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}  # of an output, with room


def _to_dtype(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(what the kernel reads: the values in `dtype`, bfloat16 as its 16-bit patterns; those values in float64)."""
    if dtype == "bfloat16":
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return bits, _from_dtype(bits, dtype)
    held = values.astype(np.float32 if dtype == "float32" else np.float16)
    return held, held.astype(np.float64)


def _from_dtype(held: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (held.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return held.astype(np.float64)


def _gpu_configs(problem: Problem, aligned: bool) -> list[Config]:
    """The default, the seeds, the default with its K split through the workspace and in clusters, and
    the default's scalar-load fit; all with vec = 1 where the rows are not 16-byte aligned."""
    default = skinny.default_config(problem)
    configs = [default, dict(default, vec=1), *skinny.seed_configs(problem)[:6]]
    configs += [dict(default, split=s, cluster=1) for s in (2, 3, 8)]
    configs += [dict(default, split=s, cluster=s) for s in (2, 8)]
    space = skinny.space(problem)
    picked: list[Config] = []
    for config in configs:
        config = config if aligned else dict(config, vec=1)
        if space.check(config) is None and config not in picked:
            picked.append(config)
    return picked


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", GPU_CASES, ids=lambda c: f"{c[0]}_{'x'.join(map(str, c[1]))}_{'nt' if c[2] else 'kn'}_{c[3]}"
)
def test_results_match_float64_on_the_gpu(
    case: tuple[str, tuple[int, int, int], bool, tuple[int, int, int]], tmp_path: Path
) -> None:
    from autotune.measure import pycuda_gpu

    dtype, (m, n, k), b_nk, (pad_a, pad_b, pad_c) = case
    cuda = pycuda_gpu.driver()
    info = pycuda_gpu.device_info()
    problem = _problem(m, n, k, dtype, trans=b_nk)
    lda, ldb, ldc = k + pad_a, (k if b_nk else n) + pad_b, n + pad_c
    per_16_bytes = 16 // (4 if dtype == "float32" else 2)
    aligned = all(ld % per_16_bytes == 0 for ld in (lda, ldb, ldc))
    rng = np.random.default_rng(m * n + k)
    a, a64 = _to_dtype(rng.standard_normal((m, lda)), dtype)
    b, b64 = _to_dtype(rng.standard_normal((n, ldb) if b_nk else (k, ldb)), dtype)
    c0, c064 = _to_dtype(rng.standard_normal((m, ldc)), dtype)
    w = b64[:, :k].T if b_nk else b64[:, :n]  # B as K x N
    exact = a64[:, :k] @ w
    scale = np.abs(a64[:, :k]) @ np.abs(w)
    a_gpu, b_gpu = cuda.to_device(a), cuda.to_device(b)
    kernels, scratch = pycuda_gpu.Kernels(), direct_launch.Scratch(cuda)
    configs = _gpu_configs(problem, aligned)
    assert configs
    for config in configs:
        name = skinny.kernel_name(problem, config)
        job = CompileJob(name, skinny.kernel_source(problem, config), info.arch, "t")
        compiled = compile_kernel(job, tmp_path)
        assert compiled.cubin is not None, compiled.message
        function = kernels.function(compiled.cubin, name, gemm_shared.ARG_TYPES)
        launch = skinny.launch(problem, config, sm_count=info.sm_count)
        direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
        workspace, counters = scratch.get(launch.workspace_floats, launch.counters)
        for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
            c_in = c0.copy()
            if beta == 0:
                c_in[:, :n] = _to_dtype(np.full((m, n), np.nan), dtype)[0]
            c_gpu = cuda.to_device(c_in)
            function.prepared_call(
                launch.grid, launch.block, a_gpu, b_gpu, c_gpu, m, n, k, lda, ldb, ldc,
                np.float32(alpha), np.float32(beta), workspace, counters, shared_size=launch.shared_bytes,
            )  # fmt: skip
            c_out = cuda.from_device_like(c_gpu, c_in)
            got = _from_dtype(c_out[:, :n], dtype)
            want = alpha * exact + beta * c064[:, :n]
            tol = (k + 2) * 2.0**-23 * (abs(alpha) * scale + abs(beta) * np.abs(c064[:, :n]))
            tol += _ROUNDING[dtype] * np.abs(want) + 1e-30
            where = (name, config, alpha, beta)
            assert np.isfinite(got).all(), where
            assert (np.abs(got - want) <= tol).all(), (*where, float(np.abs(got - want).max()))
            assert (c_out[:, n:] == c_in[:, n:]).all(), (*where, "the gaps between C's rows were written")
