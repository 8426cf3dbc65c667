"""The GEMV search space: constraints hold before compiling, geometry matches the kernel's rules."""

from __future__ import annotations

import functools
import itertools

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, config_key
from autotune.ops import gemv

SHAPES = [(1, 1), (7, 7), (1001, 999), (4096, 8192), (256, 131072), (131072, 256)]


def _problem(m: int, n: int, dtype: str = "float16") -> Problem:
    return Problem("gemv", dtype, m, n)


@functools.cache
def _spread(m: int, n: int) -> list[Config]:
    """The valid configs among every 97th point of the space's product of choices: some 20,000 from
    all over the space, where enumerating it all checks ten million points (a minute)."""
    space = gemv.OP.space(_problem(m, n))
    points = itertools.islice(itertools.product(*space.choices().values()), 0, None, 97)
    return [c for c in (dict(zip(space.names, p, strict=True)) for p in points) if space.check(c) is None]


def test_default_config_is_valid_everywhere() -> None:
    for (m, n), dtype in itertools.product(SHAPES, ("float32", "float16", "bfloat16")):
        assert gemv.OP.space(_problem(m, n, dtype)).check(gemv.DEFAULT_CONFIG) is None


def test_vector_width_needs_divisible_rows() -> None:
    assert gemv.OP.space(_problem(7, 999)).choices()["vec"] == (1,)
    assert gemv.OP.space(_problem(4, 8192)).choices()["vec"] == (1, 2, 4, 8)
    assert gemv.OP.space(_problem(4, 8192, "float32")).choices()["vec"] == (1, 2, 4)  # 16 bytes at most


def test_constraints_name_the_problem() -> None:
    space = gemv.OP.space(_problem(4096, 8192))
    bad = dict(gemv.DEFAULT_CONFIG, lanes=512, block=128)
    assert "lanes" in (space.check(bad) or "")
    assert "not one of" in (space.check(dict(gemv.DEFAULT_CONFIG, vec=3)) or "")
    assert "missing" in (space.check({"block": 128}) or "")
    spills = dict(gemv.DEFAULT_CONFIG, vec=8, unroll=8, rows=4)
    assert "in flight" in (space.check(spills) or "")


def test_configs_all_over_the_space_have_sane_geometry() -> None:
    problem = _problem(1001, 1000)
    space = gemv.OP.space(problem)
    assert all(len(set(choices)) == len(choices) for choices in space.choices().values())  # no config twice
    assert all(space.check(config) is None for config in itertools.islice(space, 2000))
    configs = _spread(1001, 1000)
    assert len(configs) > 1000
    for config in configs:
        launch = gemv.OP.launch(problem, config, sm_count=132)
        rows_per_block = config["block"] // config["lanes"] * config["rows"]
        assert launch.grid[0] * rows_per_block >= problem.m or config["persist"] > 0
        assert launch.grid[1] == config["split"]
        assert launch.shared_bytes <= gemv.MAX_SHARED_BYTES


def test_split_k_workspace_and_counters() -> None:
    problem = _problem(256, 131072)
    config = dict(gemv.DEFAULT_CONFIG, split=16, vec=8)
    launch = gemv.OP.launch(problem, config, sm_count=132)
    assert launch.workspace_floats == 16 * 256
    assert launch.counters == 256 // 4  # 4 warps of one row each per block
    assert gemv.OP.launch(problem, gemv.DEFAULT_CONFIG, 132).workspace_floats == 0


def test_cluster_split_needs_no_workspace() -> None:
    problem = _problem(256, 131072)
    config = dict(gemv.DEFAULT_CONFIG, split=8, cluster=8, vec=8)
    assert gemv.OP.space(problem).check(config) is None
    launch = gemv.OP.launch(problem, config, sm_count=132)
    assert launch.grid[1] == 8 and launch.workspace_floats == 0 and launch.counters == 0
    assert "__cluster_dims__(1, 8, 1)" in gemv.OP.kernel_source(problem, config)
    assert "__cluster_dims__" not in gemv.OP.kernel_source(problem, gemv.DEFAULT_CONFIG)
    reason = gemv.OP.space(problem).check(dict(config, split=4))
    assert reason is not None and "cluster=8" in reason and "split=4" in reason


def test_cluster_sums_share_the_shared_memory_budget() -> None:
    # 512 single-lane rows x 8 rows of float sums is 16 KiB; with x (over 32 KiB here) it does not fit.
    problem = _problem(64, 16448, "float32")
    config = dict(gemv.DEFAULT_CONFIG, block=512, lanes=1, rows=8, split=2, cluster=2, x_smem=1)
    assert "48 KiB" in (gemv.OP.space(problem).check(config) or "")
    assert gemv.OP.space(problem).check(dict(config, x_smem=0)) is None


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_seed_configs_are_valid_distinct_and_use_wide_loads(dtype: str) -> None:
    for m, n in SHAPES:
        problem = _problem(m, n, dtype)
        seeds = gemv.OP.seed_configs(problem)
        assert seeds, (m, n)
        assert len({config_key(c) for c in seeds}) == len(seeds)
        for config in seeds:
            assert gemv.OP.space(problem).check(config) is None
            if n % 8 == 0:
                assert config["vec"] * ITEMSIZE[dtype] == 16


def test_persistent_grid_is_capped_by_the_sm_count() -> None:
    launch = gemv.OP.launch(_problem(131072, 256), dict(gemv.DEFAULT_CONFIG, persist=2), sm_count=132)
    assert launch.grid[0] == 264


@pytest.mark.parametrize(
    "family", ["thread_per_row", "subwarp_per_row", "warp_per_row", "multiwarp_per_row", "block_per_row"]
)
def test_every_family_is_in_the_space(family: str) -> None:
    assert any(gemv.OP.family(_problem(4096, 8192), c) == family for c in _spread(4096, 8192))


def test_kernel_source_names_its_instance() -> None:
    problem = _problem(4096, 8192, "bfloat16")
    source = gemv.OP.kernel_source(problem, gemv.DEFAULT_CONFIG)
    assert gemv.OP.kernel_name(problem, gemv.DEFAULT_CONFIG) in source
    assert "__nv_bfloat16, 128, 32, 1, 4, 1, 0, 0" in source


def test_the_kernels_and_the_reference_take_lda_after_the_sizes() -> None:
    """The kernels take (A, x, y, M, N, lda, alpha, beta, workspace, counters): the tuner measures
    contiguous rows (lda == N), the launcher passes a view's row stride; the float64 reference takes
    the same sizes. A strided lda below N is refused."""
    problem = _problem(1000, 1021)
    operands = gemv.OP.operands(problem)
    assert operands.sizes == (1000, 1021, 1021)
    assert gemv.OP.strided_sizes(problem, (1024,)) == (1000, 1021, 1024)
    with pytest.raises(AutotuneError, match="lda=1020"):
        gemv.OP.strided_sizes(problem, (1020,))
    assert gemv.OP.arg_types == "P" * (len(operands.inputs) + 1) + "i" * len(operands.sizes) + "ffPP"
    reference = gemv.OP.device_reference(problem)
    assert reference.arg_types == "P" * (len(operands.inputs) + 2) + "i" * len(operands.sizes)
    source = gemv.OP.kernel_source(problem, gemv.DEFAULT_CONFIG)
    assert "int M, int N, int lda," in source and "(A, x, y, M, N, lda, alpha, beta, partial, counters)" in source
    # The transposed GEMV (a one-row GEMM: x, A, y, 1, N, M, lda, ldb, ldc) passes A's row stride as ldb.
    transposed = Problem("gemv", "float16", 1000, 1021, trans=True)
    assert gemv.OP.serving(transposed).strided_sizes(transposed, (1024,)) == (1, 1021, 1000, 1000, 1024, 1021)
    with pytest.raises(AutotuneError, match="lda=1020"):
        gemv.OP.serving(transposed).strided_sizes(transposed, (1020,))


def test_every_instance_waits_for_its_predecessor_first() -> None:
    # Launchers use programmatic dependent launch for GEMVs: the wait must come before the body.
    problem = _problem(4096, 8192)
    config = dict(gemv.DEFAULT_CONFIG, vec=8, prefetch=1)
    source = gemv.OP.kernel_source(problem, config)
    assert gemv.OP.programmatic_launch
    start = source.index("at_gemv::programmatic_start<__half, 128, 32, 8, 1, 1>(A, M, N, lda);")
    assert start < source.index("gemv_body")
    assert gemv.OP.kernel_name(problem, config) != gemv.OP.kernel_name(problem, dict(config, prefetch=0))


def test_the_bulk_prefetch_needs_16_byte_vectors_and_the_per_thread_ones_do_not() -> None:
    space = gemv.OP.space(_problem(4096, 8192))
    assert space.check(dict(gemv.DEFAULT_CONFIG, vec=8, prefetch=1)) is None
    assert "16-byte vectors" in (space.check(dict(gemv.DEFAULT_CONFIG, vec=4, prefetch=1)) or "")
    assert space.check(dict(gemv.DEFAULT_CONFIG, vec=4, prefetch=1)) is not None
    f32 = gemv.OP.space(_problem(4096, 8192, "float32"))
    assert f32.check(dict(gemv.DEFAULT_CONFIG, vec=4, prefetch=1)) is None
    odd = gemv.OP.space(_problem(1001, 999))  # scalar loads only
    for prefetch in (2, 3):
        assert odd.check(dict(gemv.DEFAULT_CONFIG, prefetch=prefetch)) is None
        source = gemv.OP.kernel_source(_problem(1001, 999), dict(gemv.DEFAULT_CONFIG, prefetch=prefetch))
        assert f"programmatic_start<__half, 128, 32, 1, 1, {prefetch}>" in source


def test_leader_variants_are_the_same_tiling_with_every_other_prefetch() -> None:
    problem = _problem(4096, 8192)
    leader = dict(gemv.DEFAULT_CONFIG, vec=8, lanes=128, rows=2, policy=1, order=1)
    variants = gemv.OP.leader_variants(problem, leader)
    assert variants == [{**leader, "prefetch": p} for p in (1, 2, 3)]
    # Scalar loads: the bulk prefetch is out, the per-thread ones stay.
    scalar = dict(gemv.DEFAULT_CONFIG, prefetch=2)
    assert gemv.OP.leader_variants(_problem(1001, 999), scalar) == [{**scalar, "prefetch": p} for p in (0, 3)]


def test_fitting_treats_prefetch_as_a_kind_not_a_size() -> None:
    """Space.fit moves a config that loses its 16-byte loads off the bulk prefetch to none (the
    smaller of the choices one change away), not to the per-thread prefetch because 2 is near 1."""
    tuned = dict(gemv.DEFAULT_CONFIG, vec=8, lanes=128, rows=2, prefetch=1)
    assert gemv.OP.space(_problem(1001, 999)).fit(tuned) == {**tuned, "vec": 1, "prefetch": 0}


def test_bytes_moved() -> None:
    assert gemv.OP.bytes_moved(_problem(4096, 8192)) == (4096 * 8192 + 8192 + 4096) * 2


def test_configs_are_shown_in_the_order_of_the_space() -> None:
    from autotune import ops

    problem = Problem("gemv", "float16", 4096, 8192)
    stored = dict(sorted({**gemv.DEFAULT_CONFIG, "retired": 1}.items()))  # as records keep them
    shown = ops.in_space_order(problem, stored)
    assert list(shown) == [*gemv.OP.space(problem).names, "retired"] and shown == stored


def test_order_is_compiled_and_needs_more_than_one_vector_a_step() -> None:
    problem = _problem(4096, 8192)
    space = gemv.OP.space(problem)
    ordered = dict(gemv.DEFAULT_CONFIG, vec=8, unroll=4, rows=2, order=1)
    assert space.check(ordered) is None
    assert gemv.OP.kernel_name(problem, ordered) != gemv.OP.kernel_name(problem, dict(ordered, order=0))
    assert gemv.OP.kernel_source(problem, ordered).count(", 1>(A, x, y,") == 1
    single = dict(ordered, unroll=1, rows=1)
    assert "order=1" in (space.check(single) or "")
    assert space.check(dict(single, order=0)) is None
