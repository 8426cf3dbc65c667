"""The "wgmma" GEMM family on the CPU: space and constraints, launch geometry, the sm_90a compile arch,
and nvcc compiles of its kernels (register use and spills read from ptxas)."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil

import pytest

from autotune.build.compiler import INCLUDE_FOLDERS, CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops import gemm, gemv
from autotune.ops.gemm import mma as gemm_mma
from autotune.ops.gemm import wgmma as gemm_wgmma
from tests.limits import MAX_SHARED
from tests.nvcc import NvccRun, compile_all, run_nvcc

# Shapes the family serves (k and n multiples of 8): tiny, tails in m, the goal shapes.
SHAPES = [(1, 8, 8), (17, 24, 40), (1000, 1008, 1016), (4096, 4096, 4096), (8192, 8192, 8192), (64, 4096, 14336)]
GRID_X_MAX = 2**31 - 1


def _problem(m: int, n: int, k: int, dtype: str = "float16") -> Problem:
    return Problem("gemm", dtype, m, n, k)


def _config(**overrides: int) -> Config:
    base = dict(bm=128, bn=256, bk=64, wgs=2, stages=4, swizzle=8, layout=0, tma=0)
    return {**base, **overrides}


def test_default_config_is_valid_everywhere() -> None:
    for (m, n, k), dtype in itertools.product(SHAPES, gemm_wgmma.DTYPES):
        problem = _problem(m, n, k, dtype)
        config = gemm_wgmma.default_config(problem)
        assert gemm_wgmma.space(problem).check(config) is None, (problem, config)


def test_problems_the_family_cannot_serve_say_why() -> None:
    config = _config(bm=128, bn=128, wgs=1, stages=3, swizzle=1)
    assert "k and n divisible by 8" in (gemm_wgmma.space(_problem(1000, 1001, 1016)).check(config) or "")
    assert "k=1020" in (gemm_wgmma.space(_problem(1000, 1008, 1020)).check(config) or "")
    assert "float32" in (gemm_wgmma.space(_problem(1000, 1008, 1016, "float32")).check(config) or "")
    assert gemm_wgmma.space(_problem(1000, 1008, 1016, "float32")).size() == 0


def test_seeds_are_valid_at_the_goal_shapes() -> None:
    for size, dtype in itertools.product((4096, 8192), gemm_wgmma.DTYPES):
        problem = _problem(size, size, size, dtype)
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


def test_tma_needs_the_swizzled_layout() -> None:
    space = gemm_wgmma.space(_problem(4096, 4096, 4096))
    assert space.check(_config(tma=1)) is None
    # The tuned space holds layout 0 alone; the GPU check's layouts are ruled out for TMA by name.
    assert "layout 0" in (gemm_wgmma._loader_reason(_config(tma=1, layout=2)) or "")
    assert gemm_wgmma._loader_reason(_config(tma=0, layout=2)) is None


def test_geometry_of_every_config_is_launchable() -> None:
    for size in (1000, 8192):
        problem = _problem(size, size + 8, size)
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
                # One box of A covers a stage's BM x BK rows, swizzled as A's stage is; B's stage is
                # BN / 64 boxes of 64 columns. Boxes are at most 256 a side, and a swizzled box row
                # fits its swizzle span (cuTensorMapEncodeTiled's rules).
                assert (maps.a.rows, maps.a.cols, maps.a.swizzle) == (config["bm"], config["bk"], 2 * config["bk"])
                assert (maps.b.rows, maps.b.cols, maps.b.swizzle) == (config["bk"], 64, 128)
                for box in (maps.a, maps.b):
                    assert max(box.rows, box.cols) <= 256 and box.cols * 2 <= box.swizzle


def test_source_instantiates_the_template() -> None:
    problem = _problem(4096, 4096, 4096, "bfloat16")
    source = gemm_wgmma.kernel_source(problem, _config())
    assert '#include "gemm/gemm_wgmma.cu"' in source
    assert "__launch_bounds__(256, 1)" in source
    assert "gemm_wgmma_body<__nv_bfloat16, 128, 256, 64, 2, 4, 8, 0, 0>" in source
    assert "gemm_wgmma_body<__nv_bfloat16, 128, 256, 64, 2, 4, 8, 0, 1>" in gemm_wgmma.kernel_source(
        problem, _config(tma=1)
    )
    assert gemm_wgmma.kernel_name(problem, _config()) in source


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


SPILL_PROBLEM = _problem(8192, 8192, 8192)


def _seed_sources() -> list[str]:
    return [gemm_wgmma.kernel_source(SPILL_PROBLEM, config) for config in gemm_wgmma.seed_configs(SPILL_PROBLEM)]


def _compile_jobs() -> list[CompileJob]:
    """COMPILE_SAMPLE but the seeds' kernels, which test_seed_kernels_do_not_spill compiles."""
    source_file = kernels_dir() / gemm_wgmma.KERNEL_FILE
    depends = hashlib.sha256(source_file.read_bytes()).hexdigest()[:16]
    arch = gemm.family_compile_arch(gemm_wgmma, "sm_90")
    seeds = set(_seed_sources())
    jobs = []
    for dtype, config in COMPILE_SAMPLE:
        problem = _problem(4096, 4096, 4096, dtype)
        source = gemm_wgmma.kernel_source(problem, config)
        if source not in seeds:
            jobs.append(CompileJob(gemm_wgmma.kernel_name(problem, config), source, arch, depends))
    return jobs


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90a() -> None:
    compile_all(_compile_jobs())


def _ptxas_runs() -> list[NvccRun]:
    """The seeds compiled for sm_90a with ptxas's report of registers and spills (-Xptxas -v)."""
    includes = [arg for folder in INCLUDE_FOLDERS for arg in ("-I", str(kernels_dir() / folder))]
    flags = ("--cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v", *includes)
    return [NvccRun(flags, source, ".cubin") for source in _seed_sources()]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_ptxas_runs)
def test_seed_kernels_do_not_spill() -> None:
    """128 accumulators a thread fit: ptxas reports no spills and no serialized wgmma for every seed."""
    seeds = gemm_wgmma.seed_configs(SPILL_PROBLEM)
    for config, done in zip(seeds, run_nvcc(_ptxas_runs()), strict=True):
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
    from autotune.ops import tma

    box = tma.Box(128, 64, 128)
    with pytest.raises(AutotuneError, match="16-byte aligned"):
        tma.encode(0x1002, "float16", 64, 64, box)
    with pytest.raises(AutotuneError, match="16-byte aligned"):
        tma.encode(0x1000, "float16", 64, 60, box)  # rows of 120 bytes
