"""Other GPUs than Hopper: every family's defaults and seeds compile for the architectures it runs on
(sm_80 A100, sm_89 L40S, sm_90 H100/H200, sm_100 B200), and the selector never hands a GPU a family
it lacks (wgmma on 9.0 only; clusters, and the tensor-memory copies of TMA, from 9.0 on).

The compile test takes a few minutes on two cores: it carries the `arch` marker, which the README's
test command leaves out and `.ci/run` runs (`pytest -m arch`)."""

from __future__ import annotations

import shutil

import pytest

from autotune import ops
from autotune.build.compiler import CompileJob
from autotune.core.problem import DTYPES, Problem
from autotune.core.target import target_capabilities, targeting
from autotune.ops import make_problem
from autotune.select.choose import choose
from tests.nvcc import compile_all

# (compute capability, nvcc's -arch for the families without architecture-specific instructions)
ARCHITECTURES = (("8.0", "sm_80"), ("8.9", "sm_89"), ("9.0", "sm_90"), ("10.0", "sm_100"))
# One problem per family and layout: a GEMV and its transpose (narrow; tall where 8 columns or fewer),
# a one-row GEMM (skinny), a few-row GEMM (skinny_tc in half precision), a square GEMM (simt in float32;
# wgmma on 9.0, mma elsewhere).
SHAPES = (
    ("gemv", 4096, 8192, 0, False),
    ("gemv", 4096, 8192, 0, True),
    ("gemv", 131072, 256, 0, True),
    ("gemv", 65536, 3, 0, True),
    ("gemm", 1, 4096, 4096, False),
    ("gemm", 8, 4096, 4096, False),
    ("gemm", 4096, 4096, 4096, False),
)


# The int4 op (tensor-core MMAs of 16-bit weights: sm_80 and up), one GEMV and one skinny problem; the
# int4 dequantization in the same dtypes and variants.
INT4 = (("float16", 1, "g128"), ("bfloat16", 16, "g64a"))
# The 8-bit op (both kernels, one stage or rings, at M = 1 and 8), int8 everywhere, float8 e4m3 from sm_89 on (its
# space refuses older GPUs).
INT8 = (("float16", 1, "int8"), ("bfloat16", 8, "int8"))
FP8 = (("float16", 1, "fp8"), ("bfloat16", 8, "fp8"))


def _problems() -> list[Problem]:
    plain = [Problem(op, dtype, m, n, k, trans) for dtype in DTYPES for op, m, n, k, trans in SHAPES]
    int4 = [make_problem("qgemm", dtype, m, 4096, 4096, variant=variant) for dtype, m, variant in INT4]
    dequant = [make_problem("qdequant", dtype, 4096, 4096, variant=variant) for dtype, _, variant in INT4]
    ada = all(tuple(map(int, cc.split("."))) >= (8, 9) for cc in target_capabilities())
    eight_bit = [make_problem("q8gemm", dtype, m, 4096, 4096, variant=kind) for dtype, m, kind in INT8 + FP8 * ada]
    return plain + int4 + dequant + eight_bit


def _jobs_for(capability: str, arch: str) -> list[CompileJob]:
    """The default and every seed config of each problem, as the GPU of that capability compiles them."""
    jobs: dict[tuple[str, str], CompileJob] = {}
    with targeting(capability):
        for problem in _problems():
            op = ops.for_problem(problem)
            for config in [op.default_config(problem), *op.seed_configs(problem)]:
                job = ops.compile_job(problem, config, arch)
                jobs.setdefault((job.name, job.arch), job)
    return list(jobs.values())


def _all_jobs() -> list[CompileJob]:
    return [job for capability, arch in ARCHITECTURES for job in _jobs_for(capability, arch)]


@pytest.mark.arch
@pytest.mark.nvcc(jobs=_all_jobs)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize(("capability", "arch"), ARCHITECTURES, ids=[a for _, a in ARCHITECTURES])
def test_every_familys_defaults_and_seeds_compile_for(capability: str, arch: str) -> None:
    jobs = _jobs_for(capability, arch)
    assert len(jobs) >= 100
    compile_all(jobs)


@pytest.mark.parametrize(("capability", "arch"), ARCHITECTURES, ids=[a for _, a in ARCHITECTURES])
def test_the_selector_never_returns_a_family_the_target_lacks(capability: str, arch: str) -> None:
    hopper = capability == "9.0"
    with targeting(capability):
        for problem in _problems():
            op = ops.for_problem(problem)
            for config in [choose(problem, "GPU", None, []).config, *op.seed_configs(problem)]:
                family = op.family(problem, config)
                job = ops.compile_job(problem, config, arch)
                assert (family == "wgmma") <= hopper, (capability, problem, family)
                assert job.arch == (arch + "a" if family == "wgmma" else arch)
                assert config.get("cluster", 1) == 1 or capability in ("9.0", "10.0"), (capability, problem, config)
                assert config.get("tma", 0) == 0 or hopper, (capability, problem, config)
