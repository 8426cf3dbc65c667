"""The "wgmma" GEMM family on the CPU: space and constraints, launch geometry, the sm_90a compile arch,
and nvcc compiles of its kernels (register use and spills read from ptxas), for B stored K x N and
N x K (trans=True); on a Hopper GPU (`pytest -m gpu`), results against float64 in both layouts."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.build.compiler import INCLUDE_FOLDERS, CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops import gemm, gemv
from autotune.ops.gemm import mma as gemm_mma
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import wgmma as gemm_wgmma
from tests import direct_launch
from tests.limits import MAX_SHARED
from tests.nvcc import NvccDone, NvccRun, compile_all, run_nvcc

# Shapes the family serves (k and n multiples of 8): tiny, tails in m, the goal shapes.
SHAPES = [(1, 8, 8), (17, 24, 40), (1000, 1008, 1016), (4096, 4096, 4096), (8192, 8192, 8192), (64, 4096, 14336)]
# With B stored N x K (trans=True) only k must be a multiple of 8: any n, tails included.
NT_SHAPES = [*SHAPES, (1, 1, 8), (17, 3, 40), (1000, 1001, 1016), (4097, 4095, 4096), (300, 65, 8)]
GRID_X_MAX = 2**31 - 1


def _problem(m: int, n: int, k: int, dtype: str = "float16", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


def _config(**overrides: int) -> Config:
    base = dict(bm=128, bn=256, bk=64, wgs=2, stages=4, swizzle=8, layout=0, tma=0)
    return {**base, **overrides}


def test_default_config_is_valid_everywhere() -> None:
    cases = [(shape, False) for shape in SHAPES] + [(shape, True) for shape in NT_SHAPES]
    for ((m, n, k), trans), dtype in itertools.product(cases, gemm_wgmma.DTYPES):
        problem = _problem(m, n, k, dtype, trans)
        config = gemm_wgmma.default_config(problem)
        assert gemm_wgmma.space(problem).check(config) is None, (problem, config)


def test_problems_the_family_cannot_serve_say_why() -> None:
    config = _config(bm=128, bn=128, wgs=1, stages=3, swizzle=1)
    assert "k and n divisible by 8" in (gemm_wgmma.space(_problem(1000, 1001, 1016)).check(config) or "")
    assert "k=1020" in (gemm_wgmma.space(_problem(1000, 1008, 1020)).check(config) or "")
    assert "float32" in (gemm_wgmma.space(_problem(1000, 1008, 1016, "float32")).check(config) or "")
    assert gemm_wgmma.space(_problem(1000, 1008, 1016, "float32")).size() == 0
    # B stored n x k: its rows run along k, so only k must be a multiple of 8.
    assert gemm_wgmma.problem_reason(_problem(1000, 1001, 1016, trans=True)) is None
    assert gemm_wgmma.space(_problem(1000, 1001, 1016, trans=True)).check(config) is None
    assert "k=1020" in (gemm_wgmma.problem_reason(_problem(1000, 1008, 1020, trans=True)) or "")
    assert "float32" in (gemm_wgmma.problem_reason(_problem(1000, 1008, 1016, "float32", trans=True)) or "")


@pytest.mark.parametrize("trans", [False, True], ids=["kn", "nk"])
def test_seeds_are_valid_at_the_goal_shapes(trans: bool) -> None:
    for size, dtype in itertools.product((4096, 8192), gemm_wgmma.DTYPES):
        problem = _problem(size, size, size, dtype, trans)
        seeds = gemm_wgmma.seed_configs(problem)
        assert len(seeds) == 2 * len(gemm_wgmma._SEEDS)  # each tiling with cp.async and with TMA
        assert _config() in seeds and _config(bm=256, bn=128) in seeds
        assert all(gemm_wgmma.space(problem).check(c) is None for c in seeds)
        assert all(c["layout"] in gemm_wgmma.TUNED_LAYOUTS for c in seeds)


def test_constraints_say_why() -> None:
    space = gemm_wgmma.space(_problem(4096, 4096, 4096))
    assert "256 accumulators" in (space.check(_config(bm=256, bn=256)) or "")
    assert "256 accumulators" in (space.check(_config(wgs=1)) or "")
    assert "shared memory" in (space.check(_config(stages=5)) or "")
    assert "m64 slices for 2 warpgroups" in (space.check(_config(bm=64, bn=128)) or "")
    assert "layout=1 is not one of" in (space.check(_config(layout=1)) or "")
    small = gemm_wgmma.space(_problem(100, 104, 64))
    assert "larger than" in (small.check(_config(bm=256, bn=128, swizzle=1)) or "")
    assert "4 stages for 1 k-tiles" in (small.check(_config(bm=128, bn=128, swizzle=1)) or "")
    assert small.check(_config(bm=128, bn=128, bk=32, swizzle=1)) is None  # 2 k-tiles of 32
    assert "swizzle=8" in (small.check(_config(bm=128, bn=128, stages=3)) or "")


def test_shared_bytes_mirror_the_kernel() -> None:
    problem = _problem(4096, 4096, 4096)
    # STAGES * (BM * 64 + 64 * BN) * 2 + 1024 (the alignment pad)
    assert gemm_wgmma.shared_bytes(problem, _config()) == 4 * (128 * 64 + 64 * 256) * 2 + 1024
    assert gemm_wgmma.shared_bytes(problem, _config(bm=128, bn=128, stages=7)) == 7 * 32768 + 1024 <= MAX_SHARED
    assert gemm_wgmma.shared_bytes(problem, _config(bk=32, stages=9)) == 9 * (128 * 32 + 32 * 256) * 2 + 1024
    assert gemm_wgmma.shared_bytes(problem, _config(bk=32, stages=9)) <= MAX_SHARED
    # TMA instances add one 8-byte mbarrier a stage.
    assert gemm_wgmma.shared_bytes(problem, _config(tma=1)) == 4 * (128 * 64 + 64 * 256) * 2 + 1024 + 4 * 8
    assert gemm_wgmma.accumulators(_config()) == 128
    assert gemm_wgmma.accumulators(_config(bm=256, bn=128)) == 128
    assert gemm_wgmma.accumulators(_config(bm=128, bn=128, wgs=1)) == 128


def test_seeds_are_valid_with_tails_in_both_layouts() -> None:
    for (m, n, k), trans in itertools.product([(1000, 1001, 1016), (4097, 4095, 4096), (300, 65, 8)], (False, True)):
        if not trans and n % 8:
            continue
        problem = _problem(m, n, k, trans=trans)
        assert all(gemm_wgmma.space(problem).check(c) is None for c in gemm_wgmma.seed_configs(problem))


def test_space_is_small_and_names_are_unique() -> None:
    problem = _problem(4096, 4096, 4096)
    configs = list(gemm_wgmma.space(problem))
    assert 30 < len(configs) < 2500
    assert len({config_key(c) for c in configs}) == len(configs)
    assert len({gemm_wgmma.kernel_name(problem, c) for c in configs}) == len(configs)
    other = _problem(4096, 4096, 4096, "bfloat16")
    assert gemm_wgmma.kernel_name(problem, configs[0]) != gemm_wgmma.kernel_name(other, configs[0])
    # Layouts only the GPU check runs still get their own names.
    assert gemm_wgmma.kernel_name(problem, _config()) != gemm_wgmma.kernel_name(problem, _config(layout=1))
    assert gemm_wgmma.kernel_name(problem, _config()) != gemm_wgmma.kernel_name(problem, _config(tma=1))
    assert {c["tma"] for c in configs} == {0, 1}


def test_names_tell_the_layouts_apart() -> None:
    kn, nk = _problem(4096, 4096, 4096), _problem(4096, 4096, 4096, trans=True)
    nk_configs = list(gemm_wgmma.space(nk))
    assert nk_configs == list(gemm_wgmma.space(kn))  # the same space: only the stage layout of B differs
    kn_names = {gemm_wgmma.kernel_name(kn, c) for c in nk_configs}
    nk_names = {gemm_wgmma.kernel_name(nk, c) for c in nk_configs}
    assert len(nk_names) == len(nk_configs) and not kn_names & nk_names
    # K x N names are those the shipped records know; N x K ones end in "_nt".
    assert gemm_wgmma.kernel_name(kn, _config()) == "gemm_wgmma_float16_128x256x64_g2_s4_z8_l0_t0"
    assert gemm_wgmma.kernel_name(nk, _config()) == "gemm_wgmma_float16_128x256x64_g2_s4_z8_l0_t0_nt"


def test_tma_needs_the_swizzled_layout() -> None:
    kn, nk = _problem(4096, 4096, 4096), _problem(4096, 4096, 4096, trans=True)
    space = gemm_wgmma.space(kn)
    assert space.check(_config(tma=1)) is None
    # The tuned space holds layout 0 alone; the GPU check's layouts are ruled out for TMA by name.
    assert "layout 0" in (gemm_wgmma._loader_reason(kn, _config(tma=1, layout=2)) or "")
    assert gemm_wgmma._loader_reason(kn, _config(tma=0, layout=2)) is None
    # B stored n x k has one stage layout, whatever fills it.
    assert "one stage layout" in (gemm_wgmma._loader_reason(nk, _config(tma=0, layout=2)) or "")
    assert gemm_wgmma._loader_reason(nk, _config(tma=1)) is None


@pytest.mark.parametrize("trans", [False, True], ids=["kn", "nk"])
def test_geometry_of_every_config_is_launchable(trans: bool) -> None:
    for size in (1000, 8192):
        problem = _problem(size, size + (1 if trans else 8), size, trans=trans)
        for config in gemm_wgmma.space(problem):
            launch = gemm_wgmma.launch(problem, config, sm_count=132)
            assert launch.block == (128 * config["wgs"], 1, 1)
            assert launch.shared_bytes == gemm_wgmma.shared_bytes(problem, config) <= MAX_SHARED
            assert launch.grid[0] <= GRID_X_MAX and launch.grid[1:] == (1, 1)
            assert launch.grid[0] * config["bm"] * config["bn"] >= problem.m * problem.n
            assert launch.workspace_floats == 0 and launch.counters == 0
            assert gemm_wgmma.accumulators(config) <= 128
            maps = launch.operand_maps
            assert (maps is not None) == bool(config["tma"])
            if maps is not None:
                # One box of A covers a stage's BM x BK rows, swizzled as A's stage is; a K x N B's
                # stage is BN / 64 boxes of 64 columns, an N x K B's one box of BN rows of BK, like A's.
                # Boxes are at most 256 a side, and a swizzled box row fits its swizzle span
                # (cuTensorMapEncodeTiled's rules).
                assert (maps.a.rows, maps.a.cols, maps.a.swizzle) == (config["bm"], config["bk"], 2 * config["bk"])
                assert maps.b_nk == trans
                if trans:
                    assert (maps.b.rows, maps.b.cols, maps.b.swizzle) == (config["bn"], config["bk"], 2 * config["bk"])
                else:
                    assert (maps.b.rows, maps.b.cols, maps.b.swizzle) == (config["bk"], 64, 128)
                for box in (maps.a, maps.b):
                    assert max(box.rows, box.cols) <= 256 and box.cols * 2 <= box.swizzle


def test_source_instantiates_the_template() -> None:
    problem = _problem(4096, 4096, 4096, "bfloat16")
    source = gemm_wgmma.kernel_source(problem, _config())
    assert '#include "gemm/gemm_wgmma.cu"' in source
    assert "__launch_bounds__(256, 1)" in source
    assert "gemm_wgmma_body<__nv_bfloat16, false, 128, 256, 64, 2, 4, 8, 0, 0>" in source
    assert "gemm_wgmma_body<__nv_bfloat16, false, 128, 256, 64, 2, 4, 8, 0, 1>" in gemm_wgmma.kernel_source(
        problem, _config(tma=1)
    )
    assert gemm_wgmma.kernel_name(problem, _config()) in source
    assert "int M, int N, int K, int lda, int ldb, int ldc," in source
    assert "(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta, workspace, counters)" in source
    nt = _problem(4096, 4096, 4096, "bfloat16", trans=True)
    nt_source = gemm_wgmma.kernel_source(nt, _config(tma=1))
    assert "gemm_wgmma_body<__nv_bfloat16, true, 128, 256, 64, 2, 4, 8, 0, 1>" in nt_source
    assert f"void __launch_bounds__(256, 1)\n{gemm_wgmma.kernel_name(nt, _config(tma=1))}(" in nt_source


def test_compile_arch_is_sm_90a_on_hopper_only() -> None:
    assert gemm.family_compile_arch(gemm_wgmma, "sm_90") == "sm_90a"
    for arch in ("sm_80", "sm_89", "sm_100"):
        with pytest.raises(AutotuneError, match="sm_90"):
            gemm.family_compile_arch(gemm_wgmma, arch)
    assert gemm.family_compile_arch(gemm_mma, "sm_80") == "sm_80"
    # The dispatcher's other families build for the GPU's own arch.
    assert gemm.OP.compile_arch(_problem(4096, 4096, 4096), "sm_90") == "sm_90a"
    assert gemm.OP.compile_arch(_problem(4096, 4095, 4096), "sm_90") == "sm_90"
    assert gemm.OP.compile_arch(_problem(4096, 4096, 4096, "float32"), "sm_100") == "sm_100"
    assert gemv.OP.compile_arch(Problem("gemv", "float16", 4096, 4096), "sm_90") == "sm_90"


def test_wgmma_serves_half_precision_products_with_16_byte_rows() -> None:
    assert gemm.family_named("wgmma") is gemm_wgmma
    assert gemm.family_named("mma") is gemm_mma
    with pytest.raises(AutotuneError, match="unknown GEMM family"):
        gemm.family_named("tma")
    for (m, n, k), dtype in itertools.product(SHAPES, ("float32", "float16", "bfloat16")):
        problem = _problem(m, n, k, dtype)
        expected = dtype != "float32" and m > gemm.SKINNY_MAX_M and n % 8 == 0 and k % 8 == 0
        assert (gemm.family(problem) is gemm_wgmma) == expected, problem
        if not expected and m > gemm.SKINNY_MAX_M and dtype != "float32":
            assert gemm.family(problem) is gemm_mma
    # B stored n x k: the rows of A and B are k long, so any n.
    for (m, n, k), dtype in itertools.product(NT_SHAPES, ("float16", "bfloat16")):
        problem = _problem(m, n, k, dtype, trans=True)
        assert (gemm.family(problem) is gemm_wgmma) == (m > gemm.SKINNY_MAX_M), problem
    assert gemm.family(_problem(1000, 1008, 1020, trans=True)) is gemm_mma


# Every layout, both k-depths, both warpgroup counts, every wgmma N, stage counts from 3 to 9, both
# dtypes, both loaders.
COMPILE_SAMPLE = [
    ("float16", _config(tma=1)),
    ("bfloat16", _config(bm=256, bn=128, bk=32, stages=8, tma=1)),
    ("float16", _config(bm=64, bn=64, bk=32, wgs=1, stages=3, swizzle=1, tma=1)),
    ("float16", _config(bk=32, stages=9)),
    ("bfloat16", _config(bm=256, bn=128, bk=32, stages=8, layout=2)),
    ("float16", _config(bm=64, bn=64, bk=32, wgs=1, stages=3, swizzle=1, layout=3)),
    ("float16", _config()),
    ("bfloat16", _config()),
    ("float16", _config(bm=256, bn=128)),
    ("bfloat16", _config(bm=128, bn=128, wgs=1, stages=7, swizzle=1)),
    ("float16", _config(bm=64, bn=64, wgs=1, stages=3, swizzle=1, layout=1)),
    ("bfloat16", _config(bm=128, bn=256, stages=3, swizzle=16, layout=2)),
    ("float16", _config(bm=64, bn=256, wgs=1, stages=4, swizzle=4, layout=3)),
    ("bfloat16", _config(bm=256, bn=64, wgs=1, stages=5, swizzle=1)),
]
# B stored n x k (one stage layout): both k-depths and loaders, every wgmma N, one and two warpgroups.
NT_COMPILE_SAMPLE = [
    ("bfloat16", _config(bm=128, bn=64, bk=32, stages=5, swizzle=1, tma=1)),
    ("float16", _config(bm=64, bn=256, wgs=1, stages=4, swizzle=4)),
    ("bfloat16", _config(bm=256, bn=64, bk=32, wgs=1, stages=9, swizzle=16)),
    ("float16", _config(bm=128, bn=128, wgs=1, stages=7, swizzle=1, tma=1)),
]


SPILL_PROBLEM = _problem(8192, 8192, 8192)
NT_SPILL_PROBLEM = _problem(8192, 8192, 8192, trans=True)


def _seed_sources(problem: Problem = SPILL_PROBLEM) -> list[str]:
    return [gemm_wgmma.kernel_source(problem, config) for config in gemm_wgmma.seed_configs(problem)]


def _compile_jobs() -> list[CompileJob]:
    """COMPILE_SAMPLE but the seeds' kernels, which test_seed_kernels_do_not_spill compiles."""
    source_file = kernels_dir() / gemm_wgmma.KERNEL_FILE
    depends = hashlib.sha256(source_file.read_bytes()).hexdigest()[:16]
    arch = gemm.family_compile_arch(gemm_wgmma, "sm_90")
    seeds = set(_seed_sources()) | set(_seed_sources(NT_SPILL_PROBLEM))
    jobs = []
    samples = [(dtype, config, False) for dtype, config in COMPILE_SAMPLE]
    samples += [(dtype, config, True) for dtype, config in NT_COMPILE_SAMPLE]
    for dtype, config, trans in samples:
        problem = _problem(4096, 4096, 4096, dtype, trans)
        source = gemm_wgmma.kernel_source(problem, config)
        if source not in seeds:
            jobs.append(CompileJob(gemm_wgmma.kernel_name(problem, config), source, arch, depends))
    return jobs


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90a() -> None:
    compile_all(_compile_jobs())


def _ptxas_runs(problem: Problem = SPILL_PROBLEM) -> list[NvccRun]:
    """The seeds compiled for sm_90a with ptxas's report of registers and spills (-Xptxas -v)."""
    includes = [arg for folder in INCLUDE_FOLDERS for arg in ("-I", str(kernels_dir() / folder))]
    flags = ("--cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v", *includes)
    return [NvccRun(flags, source, ".cubin") for source in _seed_sources(problem)]


def _nt_ptxas_runs() -> list[NvccRun]:
    return _ptxas_runs(NT_SPILL_PROBLEM)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # ptxas on every seed: with the other compiles, in .ci/run (time)
@pytest.mark.nvcc(jobs=_ptxas_runs)
def test_seed_kernels_do_not_spill() -> None:
    _assert_no_spills(SPILL_PROBLEM, run_nvcc(_ptxas_runs()))


@pytest.mark.arch  # the seeds again with B stored n x k: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_nt_ptxas_runs)
def test_nt_seed_kernels_do_not_spill() -> None:
    _assert_no_spills(NT_SPILL_PROBLEM, run_nvcc(_nt_ptxas_runs()))


def _nt_default_jobs() -> list[CompileJob]:
    """The default config with B stored n x k, filled by the TMA and by cp.async, at a shape with tails
    (n odd): two small instances, compiled in the default run."""
    problem = _problem(1000, 1001, 1016, trans=True)
    depends = hashlib.sha256((kernels_dir() / gemm_wgmma.KERNEL_FILE).read_bytes()).hexdigest()[:16]
    arch = gemm.family_compile_arch(gemm_wgmma, "sm_90")
    configs = [{**gemm_wgmma.default_config(problem), "tma": tma} for tma in (1, 0)]
    assert all(gemm_wgmma.space(problem).check(c) is None for c in configs)
    return [
        CompileJob(gemm_wgmma.kernel_name(problem, c), gemm_wgmma.kernel_source(problem, c), arch, depends)
        for c in configs
    ]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # N x K instances: with the other architecture compiles, in .ci/run (time)
@pytest.mark.nvcc(jobs=_nt_default_jobs)
def test_nt_default_instances_compile_for_sm_90a() -> None:
    compile_all(_nt_default_jobs())


def _assert_no_spills(problem: Problem, runs: list[NvccDone]) -> None:
    """128 accumulators a thread fit: ptxas reports no spills and no serialized wgmma for every seed."""
    seeds = gemm_wgmma.seed_configs(problem)
    for config, done in zip(seeds, runs, strict=True):
        text = done.output
        assert done.returncode == 0, (config, text)
        assert "0 bytes spill stores, 0 bytes spill loads" in text, (config, text)
        registers = int(re.search(r"Used (\d+) registers", text).group(1))  # type: ignore[union-attr]
        assert registers <= 255, (config, text)
        # ptxas warns ("Potential Performance Loss: wgmma.mma_async instructions are serialized ...") when
        # it must wait for every wgmma, e.g. because accumulators are touched while one is in flight.
        assert "serialized" not in text and "Performance Loss" not in text, (config, text)


def test_machines_without_hopper_gpus_get_the_mma_family(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.core import fingerprint

    square = _problem(4096, 4096, 4096)
    for capabilities, expected in [
        ((), gemm_wgmma),
        (("9.0",), gemm_wgmma),
        (("9.0", "9.0"), gemm_wgmma),
        (("8.0",), gemm_mma),
        (("9.0", "10.0"), gemm_mma),
    ]:
        monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda c=capabilities: c)
        assert gemm.family(square) is expected, capabilities
        assert gemm.OP.compile_arch(square, "sm_90" if expected is gemm_wgmma else "sm_80").startswith("sm_")


def test_tensor_maps_need_16_byte_aligned_matrices() -> None:
    from autotune.gpu import tma

    box = tma.Box(128, 64, 128)
    with pytest.raises(AutotuneError, match="16-byte aligned"):
        tma.encode(0x1002, "float16", 64, 64, box)
    with pytest.raises(AutotuneError, match="16-byte aligned"):
        tma.encode(0x1000, "float16", 64, 60, box)  # rows of 120 bytes


# On a Hopper GPU (`pytest -m gpu`): results against float64 in both layouts of B, with tails in M, N
# and K, beta 0 (C poisoned with NaN, so it must not be read) and beta != 0, and rows with gaps between
# them (lda > K, ldb > B's row, ldc > N; the gaps hold NaN, and C's must be left as they were). This
# family runs only on 16-byte rows, so every padded leading dimension stays a multiple of 8; only an
# N x K B's C may have odd rows (ldc = N, as the tuner measures it).
# (m, n, k, trans, dtype, extra): extra = elements added to (lda, ldb, ldc) past the row length rounded
# up to 8, or None for rows without gaps (contiguous_sizes).
GPU_CASES = [
    (128, 128, 64, False, "float16", None),
    (1000, 1008, 1016, False, "bfloat16", None),
    (257, 384, 4104, False, "float16", (8, 24, 16)),
    (128, 128, 64, True, "float16", None),
    (1000, 1001, 1016, True, "bfloat16", None),
    (300, 65, 8, True, "float16", None),
    (257, 383, 4104, True, "float16", (16, 8, 24)),
    (520, 264, 1000, True, "bfloat16", (8, 8, 8)),
]
_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
_NAN_BITS = {"float16": 0x7E00, "bfloat16": 0x7FC0}
_SENTINEL = -1152.0  # exact in both dtypes


def _to_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values as the dtype's 16-bit patterns (round to nearest even)."""
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _padded(rows: int, cols: int, ld: int, dtype: str, values: np.ndarray, gap: float) -> np.ndarray:
    """A rows x ld array of 16-bit patterns holding `values` in its first cols columns, `gap` after them."""
    out = np.full((rows, ld), _to_bits(np.array([gap], np.float32), dtype)[0], np.uint16)
    out[:, :cols] = _to_bits(values, dtype)
    return out


def _gpu_configs(problem: Problem) -> list[Config]:
    """The default (TMA and cp.async), a two-warpgroup BN 64 tile at BK 32 (both loaders) where it fits,
    and the seeds valid for the problem."""
    space = gemm_wgmma.space(problem)
    default = gemm_wgmma.default_config(problem)
    picked = [{**default, "tma": tma} for tma in (1, 0)]
    picked += [_config(bm=128, bn=64, bk=32, stages=5, swizzle=1, tma=tma) for tma in (1, 0)]
    picked += gemm_wgmma.seed_configs(problem)
    unique = {config_key(c): c for c in picked if space.check(c) is None}
    return list(unique.values())


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}_{'nk' if c[3] else 'kn'}_{c[4]}")
def test_results_match_float64_on_the_gpu(case: tuple, tmp_path: Path) -> None:
    check_family_against_float64(gemm_wgmma, case, _gpu_configs, tmp_path)


@dataclass
class HopperOperands:
    """One of GPU_CASES on the GPU: A and B with NaN in their rows' gaps, C's first values with
    sentinels in its gaps and one row of them after it (stores past C show there), and the float64
    product with its bound."""

    problem: Problem
    sizes: tuple[int, int, int, int, int, int]  # m, n, k, lda, ldb, ldc
    a_gpu: Any
    b_gpu: Any
    c0_bits: np.ndarray
    c0: np.ndarray
    exact: np.ndarray
    scale: np.ndarray


def hopper_operands(cuda: Any, family: Any, case: tuple) -> HopperOperands:
    """The operands of `case` for a Hopper GEMM family (skips where the GPU is not an sm_90 one)."""
    m, n, k, trans, dtype, extra = case
    if cuda.Device(0).compute_capability() != (9, 0):
        pytest.skip(f"the {family.NAME} family needs a Hopper GPU (sm_90)")
    problem = _problem(m, n, k, dtype, trans)
    assert family.problem_reason(problem) is None
    _, _, _, lda, ldb, ldc = gemm_shared.contiguous_sizes(problem)
    if extra is not None:
        lda, ldb, ldc = (-(-length // 8) * 8 + more for length, more in zip((lda, ldb, ldc), extra, strict=True))
    rng = np.random.default_rng(m * n + k)
    b_rows, b_cols = (n, k) if trans else (k, n)
    a_bits = _padded(m, k, lda, dtype, rng.standard_normal((m, k)).astype(np.float32), np.nan)
    b_bits = _padded(b_rows, b_cols, ldb, dtype, rng.standard_normal((b_rows, b_cols)).astype(np.float32), np.nan)
    a = _from_bits(a_bits[:, :k], dtype)
    b = _from_bits(b_bits[:, :b_cols], dtype)
    b_kn = b.T if trans else b
    # One row of sentinels after C catches stores past it; C's own gaps hold them too.
    c0_bits = _padded(m + 1, n, ldc, dtype, rng.standard_normal((m + 1, n)).astype(np.float32), _SENTINEL)
    c0_bits[m] = _to_bits(np.full(ldc, _SENTINEL, np.float32), dtype)
    return HopperOperands(
        problem,
        (m, n, k, lda, ldb, ldc),
        cuda.to_device(a_bits),
        cuda.to_device(b_bits),
        c0_bits,
        _from_bits(c0_bits[:m, :n], dtype),
        a @ b_kn,
        np.abs(a) @ np.abs(b_kn),
    )


def c_before(operands: HopperOperands, beta: float) -> np.ndarray:
    """C's bits before a launch: its first values, or NaN where beta is 0 (so C must not be read)."""
    m, n = operands.sizes[:2]
    c_in = operands.c0_bits.copy()
    if beta == 0:
        c_in[:m, :n] = _NAN_BITS[operands.problem.dtype]
    return c_in


def check_output(
    operands: HopperOperands, c_in: np.ndarray, c_bits: np.ndarray, alpha: float, beta: float, where: str
) -> None:
    """alpha A B + beta C against float64 within float32 accumulation and one rounding; nothing
    outside the M x N output changed (C's gaps and the row after it)."""
    m, n, k = operands.sizes[:3]
    dtype = operands.problem.dtype
    got = _from_bits(c_bits[:m, :n], dtype)
    want = alpha * operands.exact + beta * operands.c0
    bound = abs(alpha) * operands.scale + abs(beta) * np.abs(operands.c0)
    # float32 accumulation over k, then one rounding to the output dtype.
    tol = (k * 2.0**-22 + 2 * _ROUNDOFF[dtype]) * bound + 1e-6
    assert np.isfinite(got).all(), where
    err = np.abs(got - want)
    assert (err <= tol).all(), (where, np.unravel_index(int(np.argmax(err - tol)), err.shape), float(err.max()))
    outside = np.ones(c_bits.shape, bool)
    outside[:m, :n] = False
    assert (c_bits[outside] == c_in[outside]).all(), where


def check_family_against_float64(
    family: Any, case: tuple, configs: Callable[[Problem], list[Config]], tmp_path: Path, sm_count: int = 132
) -> None:
    """A Hopper GEMM family (wgmma, ws) on one of GPU_CASES: every config `configs` gives for the problem,
    launched directly on a grid made for `sm_count` SMs, against float64 with alpha and beta, C's gaps
    and the row after it left as they were."""
    from autotune.build.compiler import compile_kernel
    from autotune.gpu import tma
    from autotune.measure import pycuda_gpu

    cuda = pycuda_gpu.driver()
    pycuda_gpu.context()
    operands = hopper_operands(cuda, family, case)
    problem, (m, n, k, lda, ldb, ldc) = operands.problem, operands.sizes
    a_gpu, b_gpu = operands.a_gpu, operands.b_gpu

    kernels = pycuda_gpu.Kernels()
    arch = gemm.family_compile_arch(family, "sm_90")
    for config in configs(problem):
        name = family.kernel_name(problem, config)
        compiled = compile_kernel(CompileJob(name, family.kernel_source(problem, config), arch, "t"), tmp_path)
        assert compiled.cubin is not None, compiled.message
        launch = family.launch(problem, config, sm_count=sm_count)
        if launch.cluster_dims is None:
            function = kernels.function(compiled.cubin, name, family.ARG_TYPES)
            direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
        else:  # clusters given at launch, which PyCUDA's launches cannot give
            cubin = compiled.cubin.read_bytes()
            function = direct_launch.ClusterFunction(
                cubin, name, family.ARG_TYPES, launch.shared_bytes, launch.cluster_dims
            )
        maps_gpu = None
        if launch.operand_maps is not None:
            maps = tma.encode_operands(launch.operand_maps, problem.dtype, operands.sizes, int(a_gpu), int(b_gpu))
            maps_gpu = cuda.to_device(np.frombuffer(maps, np.uint8).copy())
        for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
            c_in = c_before(operands, beta)
            c_gpu = cuda.to_device(c_in)
            function.prepared_call(
                launch.grid, launch.block, a_gpu, b_gpu, c_gpu, m, n, k, lda, ldb, ldc,
                np.float32(alpha), np.float32(beta), maps_gpu if maps_gpu is not None else 0, 0,
                shared_size=launch.shared_bytes,
            )  # fmt: skip
            cuda.Context.synchronize()
            c_bits = cuda.from_device_like(c_gpu, c_in)
            check_output(operands, c_in, c_bits, alpha, beta, f"{name} alpha={alpha} beta={beta} lds={(lda, ldb, ldc)}")
