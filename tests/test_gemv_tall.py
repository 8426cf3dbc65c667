"""The tall family of the transposed GEMV on the CPU: which shapes it serves, its space, launch geometry,
programmatic launch, and nvcc compiles for sm_90 (correctness against float64 runs on the GPU:
test_gpu_gemm.py)."""

from __future__ import annotations

import shutil

import pytest

from autotune.build.compiler import CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config
from autotune.ops import for_problem
from autotune.ops.gemv import tall, transposed
from tests.nvcc import compile_all, in_space_jobs

DTYPES = ("float32", "float16", "bfloat16")


def _t(m: int, n: int, dtype: str = "float16") -> Problem:
    return Problem("gemv", dtype, m, n, trans=True)


@pytest.mark.parametrize("shape", [(262144, 8), (16384, 7), (65536, 1), (4096, 1), (100003, 3), (1, 1), (3, 2)])
def test_transposed_gemvs_of_up_to_8_columns_run_in_the_tall_family_with_pdl(shape: tuple[int, int]) -> None:
    problem = _t(*shape)
    op = for_problem(problem)
    assert op.kernel_file(problem) == tall.KERNEL_FILE
    assert op.family(problem, op.default_config(problem)) == tall.NAME
    assert op.waits_for_prior_grid(problem)


def test_the_skinny_family_stays_measurable_by_name_on_tall_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _t(65536, 1)
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "skinny")
    assert transposed.family_of(problem) is transposed._OneRowGemm
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "tall")
    assert transposed.family_of(problem) is tall and transposed.family_of(_t(4096, 4096)).NAME == "narrow"
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, "flat")
    with pytest.raises(AutotuneError, match="choose narrow, strips, tall, skinny"):
        transposed.family_of(problem)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(65536, 1), (4099, 3), (262144, 8), (16384, 7), (3, 2), (1, 1)])
def test_default_and_seeds_are_in_the_space_and_fill_16_byte_loads_where_rows_allow(
    shape: tuple[int, int], dtype: str
) -> None:
    problem = _t(*shape, dtype)
    op = for_problem(problem)
    space = op.space(problem)
    configs = [op.default_config(problem), *op.seed_configs(problem)]
    assert len(configs) >= 3
    for config in configs:
        assert space.check(config) is None, config
    if problem.m >= 8:  # 8 rows of 2 bytes or 4 of 4 make 16 bytes at any n
        assert configs[0]["rows"] * problem.n * ITEMSIZE[dtype] % 16 == 0


def test_the_space_holds_a_threads_loads_to_its_registers_and_chunks_to_the_rows() -> None:
    problem = _t(262144, 8)
    check = tall.space(problem).check
    base = tall.default_config(problem)
    assert check({**base, "rows": 8, "unroll": 1}) is None  # 144 bytes of A and x in flight
    assert "bytes in flight" in str(check({**base, "rows": 8, "unroll": 2}))
    short = _t(3, 2)
    assert "already cover m=3" in str(tall.space(short).check({**tall.default_config(short), "rows": 8}))
    assert "n <= 8" in str(tall.space(_t(4096, 9)).check(base))


@pytest.mark.parametrize("sm_count", [1, 78, 132])
def test_launch_gives_about_depth_chunks_a_thread_within_one_wave_and_asks_workspace_only_when_split(
    sm_count: int,
) -> None:
    for problem in (_t(262144, 8), _t(65536, 1), _t(4096, 1), _t(3, 2)):
        for config in [tall.default_config(problem), *tall.seed_configs(problem)]:
            launch = tall.launch(problem, config, sm_count)
            if config["cluster"] > 1:  # one cluster along y, no workspace
                assert launch.grid == (1, config["cluster"], 1) and launch.workspace_floats == launch.counters == 0
                continue
            blocks = launch.grid[0]
            chunks = max(1, problem.m // config["rows"])
            assert launch.grid[1:] == (1, 1) and launch.block == (config["block"], 1, 1)
            assert 1 <= blocks <= sm_count * 2048 // config["block"]
            per_block = config["block"] * config["depth"]
            assert blocks == 1 or (blocks - 1) * per_block < chunks
            if blocks > 1:
                assert (launch.workspace_floats, launch.counters) == (blocks * problem.n, 1)
            else:
                assert (launch.workspace_floats, launch.counters) == (0, 0)
    one = tall.launch(_t(4096, 1), {**tall.default_config(_t(4096, 1)), "depth": 64}, 132)
    assert one.grid == (1, 1, 1)


def test_a_kernel_is_compiled_for_its_columns_and_the_depth_is_a_launch_parameter() -> None:
    problem = _t(65536, 3)
    base = tall.default_config(problem)
    assert tall.kernel_name(problem, base) == tall.kernel_name(problem, {**base, "depth": 64})
    assert tall.kernel_name(problem, base) != tall.kernel_name(_t(65536, 4), base)
    source = tall.kernel_source(problem, base)
    assert '#include "gemv/gemv_t_tall.cu"' in source and "at_tall::tall_body<__half, false, 3, 256, 8, " in source


def _instances() -> list[tuple[Problem, Config]]:
    """Each dtype's default at 1, 3 and 8 columns (16-byte, 48-byte and 2-byte-multiple chunks), and
    the widest unroll the registers allow on a dot product."""
    picked = [(_t(65536, n, d), tall.default_config(_t(65536, n, d))) for d in DTYPES for n in (1, 3, 8)]
    dot = _t(65536, 1)
    picked += [(dot, {**tall.default_config(dot), "unroll": 8, "block": 1024, "prefetch": 0})]
    odd = _t(65536, 5, "bfloat16")
    picked += [(odd, {**tall.default_config(odd), "rows": 1})]  # 10-byte chunks: 2-byte loads
    return picked


def _jobs() -> list[CompileJob]:
    return in_space_jobs(tall, _instances())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_jobs)
def test_instances_compile_for_sm_90() -> None:
    for result in compile_all(_jobs()):
        assert result.cubin is not None and result.cubin.read_bytes()[:4] == b"\x7fELF", result.message


def test_unaligned_or_strided_arrays_run_the_tuned_config_as_it_is() -> None:
    """The kernel reads row by row where the matrix is not one aligned flat array: no scalar refit."""
    from autotune.runtime.launcher import scalar_loads

    problem = _t(65536, 3)
    config = {**tall.default_config(problem), "depth": 16}
    op, runs = scalar_loads(problem, config)
    assert runs == config and op.loads_as_aligned(problem)
    assert not op.loads_as_aligned(_t(4096, 4096))


def test_a_config_from_before_cluster_reads_as_the_grid_it_ran() -> None:
    problem = _t(65536, 1)
    config = tall.default_config(problem)
    before = {k: v for k, v in config.items() if k != "cluster"}
    assert config["cluster"] == 1 and for_problem(problem).stored_config(problem, before) == config
    clustered = {**config, "depth": 1, "cluster": 8}
    assert for_problem(problem).stored_config(problem, clustered) == clustered
