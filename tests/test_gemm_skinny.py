"""The skinny GEMM family on the CPU: defaults, constraints, launch geometry, and nvcc compiles."""

from __future__ import annotations

import itertools
import shutil

import pytest

from autotune.build.compiler import CompileJob
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.ops.gemm import skinny as skinny
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


def _problem(m: int, n: int, k: int, dtype: str = "float16") -> Problem:
    return Problem("gemm", dtype, m, n, k)


@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_is_valid_everywhere(dtype: str) -> None:
    for m, n, k in SHAPES:
        problem = _problem(m, n, k, dtype)
        assert skinny.space(problem).check(skinny.default_config(problem)) is None, (m, n, k)


def test_default_config_is_valid_for_every_small_shape() -> None:
    for m, n, k, dtype in itertools.product(range(1, 17), (1, 2, 3, 8, 24, 4096), (1, 2, 3, 5, 8, 1000), DTYPES):
        problem = _problem(m, n, k, dtype)
        assert skinny.space(problem).check(skinny.default_config(problem)) is None, (m, n, k, dtype)


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


def _instances() -> list[tuple[Problem, Config]]:
    return [
        (_problem(*shape, dtype), {**compiled, "split": compiled["cluster"]})
        for dtype, shape, compiled in COMPILE_SAMPLE
    ]


def _compile_jobs() -> list[CompileJob]:
    return in_space_jobs(skinny, _instances())


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90() -> None:
    compile_in_space(skinny, _instances())
