"""The strips family of the transposed GEMV on the CPU, reached by name (narrow serves its shapes
otherwise): which shapes it serves, its space, launch geometry, and nvcc compiles for sm_90
(correctness against float64 runs on the GPU: test_gpu_gemm.py)."""

from __future__ import annotations

import shutil

import pytest

from autotune.build.compiler import CompileJob
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config
from autotune.ops import for_problem
from autotune.ops.gemv import strips, transposed
from tests.nvcc import compile_all, in_space_jobs

DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(autouse=True)
def _strips_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(transposed.FAMILY_VARIABLE, strips.NAME)


def _t(m: int, n: int, dtype: str = "float16") -> Problem:
    return Problem("gemv", dtype, m, n, trans=True)


@pytest.mark.parametrize("shape", [(131072, 256), (65536, 1024), (100003, 255), (4096, 64)])
def test_tall_narrow_transposed_gemvs_run_in_strips(shape: tuple[int, int]) -> None:
    problem = _t(*shape)
    op = for_problem(problem)
    assert op.kernel_file(problem) == strips.KERNEL_FILE
    assert op.family(problem, op.default_config(problem)) == strips.NAME


@pytest.mark.parametrize(
    "shape", [(4096, 4096), (28672, 4096), (1024, 65536), (65536, 1025), (65535, 1024), (262144, 8), (8192, 63)]
)
def test_every_other_transposed_gemv_keeps_its_usual_family(shape: tuple[int, int]) -> None:
    problem = _t(*shape)
    usual = transposed.tall.KERNEL_FILE if problem.n <= 8 else transposed.narrow.KERNEL_FILE
    assert for_problem(problem).kernel_file(problem) == usual


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(131072, 256), (65536, 1024), (100003, 255), (4096, 64), (70000, 1000)])
def test_default_and_seeds_are_in_the_space_and_fall_back_to_scalar_loads(shape: tuple[int, int], dtype: str) -> None:
    problem = _t(*shape, dtype)
    op = for_problem(problem)
    space = op.space(problem)
    configs = [op.default_config(problem), *op.seed_configs(problem)]
    for config in configs:
        assert space.check(config) is None, config
        scalar = space.fit(config, {"vec": 1})  # what the launcher runs on unaligned arrays
        assert scalar is not None and scalar["vec"] == 1, config
    if problem.n % 8 == 0:
        assert configs[0]["vec"] * ITEMSIZE[dtype] == 8  # the sweeps' 8-byte loads where the rows allow them


def test_the_space_rules_out_strips_wider_than_needed_and_teams_a_block_cannot_hold() -> None:
    problem = _t(131072, 256)
    check = strips.space(problem).check
    base = {**strips.default_config(problem), "vec": 8}
    assert check({**base, "width": 256}) is None
    assert check({**base, "width": 512}) is not None  # half of it already covers n = 256
    assert check({**base, "block": 256, "width": 2048, "vec": 1}) is not None  # 2048 threads a row
    assert "registers" in str(check({**base, "block": 1024, "unroll": 8}))  # spills at 64 registers


@pytest.mark.parametrize("sm_count", [1, 78, 132])
def test_launch_splits_rows_over_the_sms_and_asks_workspace_only_when_split(sm_count: int) -> None:
    for problem in (_t(131072, 256), _t(65536, 1024), _t(4096, 64)):
        for config in [strips.default_config(problem), *strips.seed_configs(problem)]:
            launch = strips.launch(problem, config, sm_count)
            strip_count = -(-problem.n // config["width"])
            split = launch.grid[1]
            teams = config["block"] * config["vec"] // config["width"]
            assert launch.grid[0] == strip_count and launch.block == (config["block"], 1, 1)
            assert 1 <= split <= max(1, problem.m // (teams * config["unroll"]))
            assert split <= max(1, config["per_sm"] * sm_count // strip_count)
            if split > 1:
                assert (launch.workspace_floats, launch.counters) == (split * problem.n, strip_count)
            else:
                assert (launch.workspace_floats, launch.counters) == (0, 0)


def _instances(whole: bool = False) -> list[tuple[Problem, Config]]:
    """float16's default on the tall shape and scalar loads on an odd width; `whole` (under `-m arch`,
    about 2 s of nvcc an instance) adds the other dtypes' defaults, the narrowest strips with two teams
    a warp, and every load policy."""
    tall, odd = _t(131072, 256), _t(100003, 255)
    picked = [(tall, strips.default_config(tall)), (odd, strips.default_config(odd))]
    if not whole:
        return picked
    picked += [(_t(131072, 256, d), strips.default_config(_t(131072, 256, d))) for d in DTYPES if d != tall.dtype]
    base = strips.default_config(tall)
    picked += [(tall, {**base, "block": 256, "width": 64, "unroll": 8, "policy": 0})]
    picked += [(tall, {**base, "block": 512, "unroll": 8, "policy": 2})]
    return picked


def _jobs(whole: bool = False) -> list[CompileJob]:
    """Asked of the strips module itself: the background compile (tests/nvcc.py) collects these jobs
    without this file's fixture."""
    return in_space_jobs(strips, _instances(whole))


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
