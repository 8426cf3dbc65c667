"""The tensor-core skinny GEMM family: on the CPU dispatch, defaults, constraints, launch geometry,
the fragment relabellings it relies on (B K x N and N x K) and nvcc compiles; on the GPU (`-m gpu`)
exact results for both layouts of B with padded leading dimensions."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune.build.compiler import CompileJob, CompilePool
from autotune.core.fingerprint import file_hash
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.gpu import tma
from autotune.ops import gemm, source_hash
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.gemm import skinny_tc as tc
from tests import direct_launch, padded
from tests.limits import assert_within_limits, distinct_configs, sampled
from tests.nvcc import compile_in_space, in_space_jobs

DTYPES = ("float16", "bfloat16")
LAYOUTS = (False, True)  # B K x N, B N x K (a `trans` problem)
SHAPES = [(2, 1, 1), (16, 1001, 999), (7, 13, 5), (16, 4096, 4096), (4, 14336, 14336), (3, 5, 2), (16, 64, 131072)]


def _problem(m: int, n: int, k: int, dtype: str = "float16", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


def _layout(trans: bool) -> str:
    return "nk" if trans else "kn"


def test_dispatch_sends_half_precision_skinny_products_to_tensor_cores() -> None:
    assert gemm.family(_problem(16, 4096, 4096)) is tc
    assert gemm.family(_problem(gemm.TC_MIN_M, 4096, 4096, "bfloat16")) is tc
    assert gemm.family(_problem(1, 4096, 4096)) is gemm_skinny  # the transposed GEMV's family
    assert gemm.family(_problem(16, 4096, 4096, "float32")) is gemm_skinny
    assert gemm.family(_problem(17, 4096, 4096)).NAME == "wgmma"
    assert gemm.family(_problem(17, 4095, 4096)).NAME == "mma"


def test_source_hash_covers_the_shared_header() -> None:
    assert source_hash(_problem(16, 4096, 4096)) == file_hash("gemm_skinny_tc.cu")
    assert file_hash("gemm_skinny_tc.cu") != file_hash("gemm_skinny.cu")
    # A file without local includes hashes as before (shipped records of other families stay fresh).
    import hashlib

    from autotune.core.paths import kernels_dir

    text = (kernels_dir() / "gemm/gemm_simt.cu").read_bytes()
    assert file_hash("gemm_simt.cu") == hashlib.sha256(b"gemm_simt.cu\0" + text).hexdigest()[:16]
    text = (kernels_dir() / "gemv/gemv.cu").read_bytes()
    assert file_hash("gemv.cu") != hashlib.sha256(b"gemv.cu\0" + text).hexdigest()[:16]  # includes common.cuh


def test_local_includes_are_the_quoted_ones_at_a_line_start(tmp_path: Path) -> None:
    from autotune.core import fingerprint

    text = b'#include "a.cuh"\n  // #include "b.cuh"\n \t#  include  "c.cuh"\nx; #include "d.cuh"\n#include <e.h>\n'
    assert fingerprint.local_includes(text) == [b"a.cuh", b"c.cuh"]
    # An include resolves to the one folder holding a file of that name; two are an error.
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    (tmp_path / "one" / "x.cuh").write_text("1")
    (tmp_path / "one" / "y.cuh").write_text("2")
    (tmp_path / "two" / "y.cuh").write_text("3")
    assert fingerprint.kernel_path("x.cuh", tmp_path) == tmp_path / "one" / "x.cuh"
    assert fingerprint.kernel_path("one/y.cuh", tmp_path) == tmp_path / "one" / "y.cuh"
    with pytest.raises(FileNotFoundError, match=r"2 files named 'y\.cuh'"):
        fingerprint.kernel_path("y.cuh", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"0 files named 'z\.cuh'"):
        fingerprint.kernel_path("z.cuh", tmp_path)


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_is_valid_everywhere(dtype: str, trans: bool) -> None:
    for m, n, k in SHAPES:
        problem = _problem(m, n, k, dtype, trans)
        assert tc.space(problem).check(tc.default_config(problem)) is None, (m, n, k)


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
def test_default_config_is_valid_for_every_small_shape(trans: bool) -> None:
    sizes = (1, 2, 3, 8, 15, 16, 17, 24, 31, 32, 33, 1000, 4096)
    for m, n, k, dtype in itertools.product(range(1, 17), sizes, sizes, DTYPES):
        problem = _problem(m, n, k, dtype, trans)
        assert tc.space(problem).check(tc.default_config(problem)) is None, (m, n, k, dtype)


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
def test_seed_configs_are_valid_and_fill_the_gpu(trans: bool) -> None:
    for size in (4096, 8192, 14336):
        for m in (2, 4, 8, 16):
            problem = _problem(m, size, size, trans=trans)
            seeds = tc.seed_configs(problem)
            assert len(seeds) >= 3
            for config in seeds:
                assert tc.space(problem).check(config) is None, config
                blocks = tc.launch(problem, config, 132).grid
                # About two blocks per SM; a cluster's seed may take twice that (no workspace). A TMA
                # block keeps stages of 64 rows in flight, so fewer do (cuBLAS runs 96 at 4096^2).
                most = 528 if config["cluster"] > 1 else 264
                least = tc.TMA_SEED_LEAST_BLOCKS if config["stages"] else 132
                assert least <= blocks[0] * blocks[1] <= most, (size, config)


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
def test_seeds_include_cluster_reductions_of_their_splits(trans: bool) -> None:
    problem = _problem(16, 4096, 4096, trans=trans)
    seeds = tc.seed_configs(problem)
    clustered = [c for c in seeds if c["cluster"] > 1]
    assert clustered and all(c["split"] == c["cluster"] for c in clustered)
    # Split 4 within ~264 blocks; in a cluster also twice that (the H200's best at this shape).
    assert {c["cluster"] for c in clustered} == {4, 8}

    def tiling(c: dict[str, int]) -> dict[str, int]:
        return {key: value for key, value in c.items() if key not in ("cluster", "split")}

    for config in clustered:
        # Each beside the same tiling through the workspace (TMA configs reduce in clusters only).
        if not config["stages"]:
            assert any(tiling(other) == tiling(config) and other["cluster"] == 1 for other in seeds)
        launch = tc.launch(problem, config, 132)
        assert launch.workspace_floats == launch.counters == 0
        assert f"__cluster_dims__(1, {config['cluster']}, 1)" in tc.kernel_source(problem, config)


def test_other_problems_are_refused_with_a_reason() -> None:
    config = tc.default_config(_problem(16, 4096, 4096))
    assert "m <= 16" in (tc.space(_problem(17, 4096, 4096)).check(config) or "")
    assert "float32" in (tc.space(_problem(16, 4096, 4096, "float32")).check(config) or "")


def test_vector_width_needs_divisible_rows() -> None:
    assert tc.space(_problem(4, 999, 64)).choices()["vec"] == (1,)
    assert tc.space(_problem(4, 4096, 64)).choices()["vec"] == (1, 4, 8)
    assert tc.space(_problem(4, 4100, 64)).choices()["vec"] == (1, 2, 4)
    # B N x K: its rows, along which the vectors run, are K long.
    assert tc.space(_problem(4, 64, 999, trans=True)).choices()["vec"] == (1,)
    assert tc.space(_problem(4, 999, 4096, trans=True)).choices()["vec"] == (1, 4, 8)
    assert tc.space(_problem(4, 4096, 4100, trans=True)).choices()["vec"] == (1, 2, 4)


def test_an_n_by_k_slice_holds_32_rows_of_k_with_16_byte_loads() -> None:
    """Each lane loads 8 elements of a row of B at vec 8: two mma steps a slice, so the step and the
    per-split rows double, and the default's warps along K count 32-row slices."""
    kn, nk = _problem(16, 4096, 4096), _problem(16, 4096, 4096, trans=True)
    config = dict(tc.default_config(nk), unroll=2, kw=4)
    assert tc._step(kn, config) == 16 * 4 * 2 and tc._step(nk, config) == 32 * 4 * 2
    assert tc._step(nk, dict(config, vec=4)) == 16 * 4 * 2
    assert tc.slice_rows(nk, dict(config, stages=4)) == 32 and tc._step(nk, dict(config, stages=4)) == tc.TMA_ROWS
    for k, kw in ((16, 1), (40, 1), (64, 2), (96, 2), (128, 4), (4096, 4)):
        assert tc.default_config(_problem(16, 4096, k, trans=True))["kw"] == kw, k
    assert tc.default_config(_problem(16, 4096, 1000, trans=True))["vec"] == 8  # 1000 = 8 * 125
    assert "exceed k" in (tc.space(_problem(4, 64, 64, trans=True)).check(dict(config, kw=2, unroll=2)) or "")
    # The register estimate counts 8 rows of B per slice (and 8 words of A at vec 8).
    assert tc.registers(dict(config, unroll=1, prefetch=1), b_nk=True) == 48 + 32 + 2 * (32 + 8)
    assert tc.registers(dict(config, vec=4, unroll=1, prefetch=1), b_nk=True) == 48 + 32 + 2 * (16 + 4)


def test_the_layouts_build_different_kernels() -> None:
    for m, n, k in [(16, 4096, 4096), (3, 1001, 999), (5, 1000, 1016)]:
        kn, nk = _problem(m, n, k), _problem(m, n, k, trans=True)
        for config in [tc.default_config(nk), *tc.seed_configs(nk)]:
            assert tc.space(nk).check(config) is None, config
            name = tc.kernel_name(nk, config)
            assert name == tc.kernel_name(kn, config) + "_nt"
            source = tc.kernel_source(nk, config)
            assert f"at_skinny_tc::skinny_tc_body<__half, true, {config['wn']}, " in source
            assert "int lda, int ldb, int ldc," in source
        kn_default = tc.kernel_source(kn, tc.default_config(kn))
        assert "at_skinny_tc::skinny_tc_body<__half, false, " in kn_default


def test_constraints_name_the_problem() -> None:
    problem = _problem(16, 4096, 4096)
    space = tc.space(problem)
    base = tc.default_config(problem)
    assert "1024 threads" in (space.check(dict(base, wn=4, kw=16)) or "")
    assert "registers" in (space.check(dict(base, wn=2, kw=8, unroll=4)) or "")
    assert "cover n" in (tc.space(_problem(4, 64, 4096)).check(dict(base, wn=2)) or "")
    small_k = _problem(16, 4096, 40)
    assert "exceed k" in (tc.space(small_k).check(dict(tc.default_config(small_k), kw=4)) or "")
    assert "without rows" in (space.check(dict(base, kw=16, unroll=1, split=256)) or "")
    assert "more bytes than B" in (tc.space(_problem(16, 4096, 64)).check(dict(base, kw=1, split=4)) or "")


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_config_gives_a_sane_launch(dtype: str, trans: bool) -> None:
    for m, n, k in [(16, 8192, 8192), (2, 8192, 8192), (16, 64, 131072), (13, 1000, 999)]:
        problem = _problem(m, n, k, dtype, trans)
        for config in sampled(distinct_configs(tc.space(problem), 10_000)):
            launch = tc.launch(problem, config, sm_count=132)
            assert_within_limits(launch)
            assert launch.grid[0] * tc.columns(config) >= n
            assert (config["split"] - 1) * tc._per_split(problem, config) < k or config["split"] == 1
            if config["cluster"] > 1:
                assert config["split"] == config["cluster"] and launch.workspace_floats == launch.counters == 0
            elif config["split"] > 1:
                assert launch.workspace_floats == config["split"] * m * n and launch.counters == launch.grid[0]


def test_fragment_relabelling_gives_the_product() -> None:
    """The kernel's lane mapping, replayed with the mma.m16n8k16 fragment layouts of the PTX ISA:
    lane (g, t) holds rows 4t..4t+3 and columns 8g..8g+7 of a 16 x 64 slice of B, mma j takes column
    8g + j of each lane group, and accumulator e of mma j lands in row g + 8*(e // 2), column
    16t + 8*(e % 2) + j. The result must be A @ B for the slice."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 64))
    out = np.zeros((16, 64))
    lanes = [(lane // 4, lane % 4) for lane in range(32)]
    for j in range(8):
        a_logical, b_logical = np.zeros((16, 16)), np.zeros((16, 8))
        for g, t in lanes:
            # Registers a0/a2 hold row g, a1/a3 row g + 8; k 4t..4t+3 stand for 2t, 2t+1, 2t+8, 2t+9.
            for h in range(2):
                a_logical[g + 8 * h, [2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9]] = a[g + 8 * h, 4 * t : 4 * t + 4]
            b_logical[[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9], g] = b[4 * t : 4 * t + 4, 8 * g + j]
        d = a_logical @ b_logical
        for g, t in lanes:
            for e, (row, col) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
                out[g + 8 * (e // 2), 16 * t + 8 * (e % 2) + j] += d[row, col]
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("vec", [1, 2, 4, 8])
def test_n_by_k_fragments_give_the_product(vec: int) -> None:
    """The N x K register mainloop's lane mapping, replayed: with KCH = max(4, vec), lane (g, t) holds
    elements KCH*t .. KCH*t + KCH-1 of a slice of 4*KCH k, of row 8j + g of B (tile j) and of rows g
    and g + 8 of A; mma step p takes its elements 4p .. 4p+3 as the mma's k 2t, 2t+1, 2t+8, 2t+9
    (b0, b1 and a0..a3 straight from the loaded words), and accumulator e of mma j lands in row
    g + 8*(e // 2), column 8j + 2t + e % 2 (the natural layout). The result must be A Bᵀ (B: 64 x
    slice, N x K) for the slice."""
    kch = max(4, vec)
    rng = np.random.default_rng(vec)
    a, w = rng.standard_normal((16, 4 * kch)), rng.standard_normal((64, 4 * kch))
    out = np.zeros((16, 64))
    for j, p in itertools.product(range(8), range(kch // 4)):
        a_frag, b_frag = np.zeros((16, 16)), np.zeros((16, 8))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            base = kch * t + 4 * p
            for h in range(2):  # a0/a2 row g, a1/a3 row g + 8
                a_frag[g + 8 * h, 2 * t : 2 * t + 2] = a[g + 8 * h, base : base + 2]
                a_frag[g + 8 * h, 2 * t + 8 : 2 * t + 10] = a[g + 8 * h, base + 2 : base + 4]
            b_frag[2 * t : 2 * t + 2, g] = w[8 * j + g, base : base + 2]  # b0
            b_frag[2 * t + 8 : 2 * t + 10, g] = w[8 * j + g, base + 2 : base + 4]  # b1
        d = a_frag @ b_frag
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for e in range(4):
                out[g + 8 * (e // 2), 8 * j + 2 * t + e % 2] += d[g + 8 * (e // 2), 2 * t + e % 2]
    np.testing.assert_allclose(out, a @ w.T, rtol=1e-12, atol=1e-12)


def test_shared_memory_holds_the_partial_sums_and_what_a_cluster_pushes() -> None:
    """kernels/gemm/gemm_skinny_tc.cu: KW slices of 16 x COLS floats, and one more where the other blocks
    of a cluster push their sums in."""
    base = dict(wn=2, kw=4, vec=8, unroll=1, policy=1, prefetch=1, cluster=1, split=1, stages=0)
    assert tc.shared_bytes(base) == 4 * 16 * 128 * 4
    assert tc.shared_bytes(dict(base, cluster=8, split=8)) == 5 * 16 * 128 * 4
    launch = tc.launch(_problem(16, 4096, 4096), dict(base, cluster=8, split=8), 132)
    assert launch.shared_bytes == 5 * 16 * 128 * 4


def _red_at(row: int, col: int, cols: int) -> int:
    """kernels/gemm/gemm_skinny_tc.cu's red_at(): float offset of (row, col) in a warp's partial sums."""
    chunk = (col >> 2) ^ ((col >> 5) & 1) ^ ((row & 1) << 1)
    return row * cols + chunk * 4 + (col & 3)


@pytest.mark.parametrize("wn", [1, 2, 4])
def test_partial_sum_layout_is_a_permutation_without_bank_conflicts(wn: int) -> None:
    cols = 64 * wn
    for row in range(16):
        offsets = sorted(_red_at(row, col, cols) for col in range(cols))
        assert offsets == list(range(row * cols, (row + 1) * cols))

    def banks(offsets: list[int]) -> int:  # distinct 16-byte banks of 128 bytes that the offsets hit
        return len({offset * 4 % 128 // 16 for offset in offsets})

    # The register layout's float4 stores: lane (g, t) writes columns 16t + 8*half + 4q of rows g and
    # g + 8; 16-byte accesses are served 8 lanes at a time.
    for w, h, half, q, phase in itertools.product(range(wn), range(2), range(2), range(2), range(4)):
        lanes = [(lane // 4, lane % 4) for lane in range(8 * phase, 8 * phase + 8)]
        assert banks([_red_at(g + 8 * h, 64 * w + 16 * t + 8 * half + 4 * q, cols) for g, t in lanes]) == 8
    # The readers: 8 consecutive chunks of 4 columns (float4), or 32 consecutive columns (float).
    for row, start in itertools.product(range(16), range(0, cols, 32)):
        assert banks([_red_at(row, col, cols) for col in range(start, start + 32, 4)]) == 8
        assert len({_red_at(row, col, cols) % 32 for col in range(start, start + 32)}) == 32


def test_kernel_source_names_its_instance() -> None:
    problem = _problem(16, 4096, 4096, "bfloat16")
    config = tc.default_config(problem)
    source = tc.kernel_source(problem, config)
    name = tc.kernel_name(problem, config)
    assert name.isidentifier() and f"{name}(" in source
    assert '#include "gemm/gemm_skinny_tc.cu"' in source and "__nv_bfloat16" in source
    assert "__launch_bounds__(128)" in source
    assert tc.kernel_name(problem, dict(config, split=4)) == name  # split is a launch parameter


# One config per feature: both dtypes, every load width, warps along N and K, every unroll, both policies.
COMPILE_SAMPLE = [
    ("float16", (16, 4096, 4096), dict(wn=1, kw=4, vec=8, unroll=2, policy=1, prefetch=1, cluster=1)),
    ("float16", (16, 4096, 4096), dict(wn=1, kw=2, vec=8, unroll=4, policy=2, prefetch=1, cluster=1)),
    ("bfloat16", (8, 14336, 14336), dict(wn=2, kw=8, vec=8, unroll=1, policy=1, prefetch=1, cluster=1)),
    ("float16", (3, 1001, 999), dict(wn=1, kw=2, vec=1, unroll=2, policy=1, prefetch=1, cluster=1)),
    ("bfloat16", (2, 1002, 999), dict(wn=4, kw=1, vec=2, unroll=2, policy=2, prefetch=1, cluster=1)),
    ("float16", (4, 1004, 999), dict(wn=1, kw=16, vec=4, unroll=1, policy=1, prefetch=1, cluster=1)),
    ("float16", (16, 14336, 14336), dict(wn=1, kw=8, vec=4, unroll=2, policy=1, prefetch=0, cluster=1)),
    # Split-K in clusters of 2, 4 and 8 blocks.
    ("float16", (16, 4096, 4096), dict(wn=1, kw=4, vec=8, unroll=2, policy=1, prefetch=1, cluster=4)),
    ("bfloat16", (2, 1002, 999), dict(wn=1, kw=2, vec=2, unroll=1, policy=2, prefetch=1, cluster=2)),
    ("float16", (8, 14336, 14336), dict(wn=2, kw=4, vec=8, unroll=1, policy=1, prefetch=1, cluster=8)),
    # TMA stages: every warp count along N and K, with and without a cluster, tails in M, N and K.
    ("float16", (16, 4096, 4096), dict(wn=1, kw=4, vec=8, unroll=1, policy=1, prefetch=0, cluster=4, stages=4)),
    ("bfloat16", (5, 1000, 1016), dict(wn=2, kw=2, vec=8, unroll=1, policy=1, prefetch=0, cluster=1, stages=3)),
    ("float16", (8, 14336, 14336), dict(wn=4, kw=1, vec=8, unroll=1, policy=1, prefetch=0, cluster=8, stages=6)),
]
# B N x K (trans problems): every load width along K (vec 8: 32-row slices), warps along N and K,
# unrolls, policies, prefetch on and off, split-K in clusters, TMA with and without a cluster.
COMPILE_SAMPLE_NK = [
    ("float16", (16, 4096, 4096), dict(wn=1, kw=4, vec=8, unroll=1, policy=1, prefetch=1, cluster=1)),
    ("bfloat16", (8, 14336, 4096), dict(wn=1, kw=8, vec=4, unroll=2, policy=2, prefetch=0, cluster=1)),
    ("float16", (3, 1001, 999), dict(wn=1, kw=2, vec=1, unroll=2, policy=1, prefetch=1, cluster=1)),
    ("bfloat16", (2, 1002, 998), dict(wn=4, kw=1, vec=2, unroll=1, policy=2, prefetch=1, cluster=1)),
    ("float16", (16, 4096, 4096), dict(wn=2, kw=4, vec=8, unroll=1, policy=1, prefetch=1, cluster=8)),
    ("float16", (16, 4096, 4096), dict(wn=1, kw=4, vec=8, unroll=1, policy=1, prefetch=0, cluster=4, stages=4)),
    ("bfloat16", (5, 1001, 1016), dict(wn=2, kw=2, vec=8, unroll=1, policy=1, prefetch=0, cluster=1, stages=3)),
]


def _instances() -> list[tuple[Problem, Config]]:
    return [
        (_problem(*shape, dtype, trans), {"stages": 0, **compiled, "split": compiled["cluster"]})
        for trans, sample in ((False, COMPILE_SAMPLE), (True, COMPILE_SAMPLE_NK))
        for dtype, shape, compiled in sample
    ]


def _compile_jobs() -> list[CompileJob]:
    return in_space_jobs(tc, _instances())


@pytest.mark.arch  # many instances: with the other architecture compiles, in .ci/run
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_compile_jobs)
def test_representative_instances_compile_for_sm_90() -> None:
    compile_in_space(tc, _instances())


def _n_by_k_defaults() -> list[tuple[Problem, Config]]:
    """A few N x K instances the default run compiles: the default config (16-byte loads, and scalar
    loads on odd K) and a TMA seed."""
    big, odd = _problem(16, 4096, 4096, trans=True), _problem(3, 1001, 999, "bfloat16", trans=True)
    tma_seeds = [c for c in tc.seed_configs(big) if c["stages"]]
    return [(big, tc.default_config(big)), (odd, tc.default_config(odd)), (big, tma_seeds[0])]


def _n_by_k_jobs() -> list[CompileJob]:
    return in_space_jobs(tc, _n_by_k_defaults())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # N x K instances: with the other architecture compiles, in .ci/run (time)
@pytest.mark.nvcc(jobs=_n_by_k_jobs)
def test_n_by_k_defaults_compile_for_sm_90() -> None:
    compile_in_space(tc, _n_by_k_defaults())


def test_tma_stages_are_offered_for_16_byte_rows_on_hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.gpu import geometry

    aligned, odd = _problem(5, 1000, 1016), _problem(5, 1001, 1016)
    assert set(tc.space(aligned).choices()["stages"]) == {0, 2, 3, 4, 6, 8}
    assert tc.space(odd).choices()["stages"] == (0,)
    # B N x K: its rows are K long, so N needs no multiple of 8.
    assert set(tc.space(_problem(5, 1001, 1016, trans=True)).choices()["stages"]) == {0, 2, 3, 4, 6, 8}
    assert tc.space(_problem(5, 1000, 1012, trans=True)).choices()["stages"] == (0,)
    monkeypatch.setattr(geometry, "clusters_run_here", lambda: False)
    assert tc.space(aligned).choices()["stages"] == (0,)


@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
def test_tma_configs_pin_the_register_parameters_and_reduce_in_clusters(trans: bool) -> None:
    problem = _problem(16, 4096, 4096, trans=trans)
    tma = dict(wn=2, kw=2, vec=8, unroll=1, policy=1, prefetch=0, cluster=4, split=4, stages=4)
    space = tc.space(problem)
    assert space.check(tma) is None
    assert "unroll does not apply" in (space.check(dict(tma, unroll=2)) or "")
    assert "needs cluster=4" in (space.check(dict(tma, cluster=1)) or "")
    assert "at most 4 warps along K" in (space.check(dict(tma, wn=1, kw=8)) or "")
    launch = tc.launch(problem, tma, 132)
    assert launch.workspace_floats == launch.counters == 0 and launch.grid == (32, 4, 1)
    assert launch.operand_maps is not None and launch.operand_maps.b_nk == trans
    assert (launch.operand_maps.a.rows, launch.operand_maps.a.cols) == (16, 64)
    # B's box: 64 rows of K x 64 columns, or for N x K 64 rows of B (columns of C) x 64 of K.
    assert (launch.operand_maps.b.rows, launch.operand_maps.b.cols) == (64, 64)
    assert launch.shared_bytes == 1024 + 4 * (2048 + 2 * 8192)
    assert tc.launch(problem, dict(tma, stages=0, prefetch=1), 132).operand_maps is None


def test_n_by_k_tensor_maps_take_b_as_it_lies() -> None:
    """B's map of an N x K problem: N rows of K elements, rows ldb apart (autotune/gpu/tma.py)."""
    problem = _problem(5, 1001, 1016, trans=True)
    config = {**tc.default_config(problem), "stages": 3, "unroll": 1, "prefetch": 0}
    assert tc.space(problem).check(config) is None
    maps = tc.launch(problem, config, 132).operand_maps
    assert maps is not None
    a_map, b_map = tma.operand_tiled_maps(maps, "float16", (5, 1001, 1016, 1024, 1032, 1008))
    assert a_map.dims == (1016, 5) and a_map.stride_bytes == 1024 * 2
    assert b_map.dims == (1016, 1001) and b_map.stride_bytes == 1032 * 2 and b_map.box == (64, 64)


def _swizzled(row: int, chunk: int) -> int:
    """kernels/gemm/gemm_skinny_tc.cu's swizzled(): byte offset of a 16-byte chunk in a 128-byte-swizzled box."""
    return row * 128 + ((chunk ^ (row % 8)) << 4)


@pytest.mark.parametrize("b_nk", [False, True], ids=["kn", "nk"])
def test_tma_fragments_give_the_product(b_nk: bool) -> None:
    """The TMA path's ldmatrix addressing, replayed: the copy engine writes A's 16 x 64 box and B's
    64 x 64 box (K x N: rows of k; N x K: rows of n) with the 128-byte swizzle; lane l addresses row
    l % 8 of matrix l / 8; ldmatrix.x4 hands lane (g, t) elements (g, 2t), (g, 2t+1) of each matrix,
    .trans (K x N's B) elements (2t, g), (2t+1, g); mma.m16n8k16 then takes a0..a3 and b0, b1 as the
    PTX ISA lays them out, and accumulator e of mma j must land at row g + 8 (e // 2), column
    8j + 2t + e % 2. The result must be A @ B."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 64)), rng.standard_normal((64, 64))
    stored = b.T if b_nk else b  # the box as it lies in memory: B(k, n) at [n][k] for N x K
    smem_a, smem_b = np.zeros(16 * 64), np.zeros(64 * 64)  # in 2-byte elements
    for r in range(16):
        for c in range(8):
            smem_a[_swizzled(r, c) // 2 : _swizzled(r, c) // 2 + 8] = a[r, 8 * c : 8 * c + 8]
    for r in range(64):
        for c in range(8):
            smem_b[_swizzled(r, c) // 2 : _swizzled(r, c) // 2 + 8] = stored[r, 8 * c : 8 * c + 8]

    def ldmatrix_x4(smem: np.ndarray, row0: int, chunk0: int, trans: bool, by_rows: bool = False) -> np.ndarray:
        """[lane, register, pair]: register i of each lane from matrix i; lane l addresses row
        row0 + l % 8 + 8 (l / 8 % 2), chunk chunk0 + l / 16, as the kernel does for A and K x N's B,
        or with `by_rows` (N x K's B) row row0 + l % 8 + 8 (l / 16), chunk chunk0 + l / 8 % 2."""

        def address(lane: int) -> int:
            if by_rows:
                return _swizzled(row0 + (lane & 7) + 8 * (lane >> 4), chunk0 + ((lane >> 3) & 1)) // 2
            return _swizzled(row0 + (lane & 7) + 8 * ((lane >> 3) & 1), chunk0 + (lane >> 4)) // 2

        rows = [[smem[address(8 * i + r) : address(8 * i + r) + 8] for r in range(8)] for i in range(4)]
        out = np.zeros((32, 4, 2))
        for lane in range(32):
            g, t = lane // 4, lane % 4
            for i in range(4):
                m = np.array(rows[i])
                out[lane, i] = m[2 * t : 2 * t + 2, g] if trans else m[g, 2 * t : 2 * t + 2]
        return out

    acc = np.zeros((32, 8, 4))
    for kk in range(4):
        a_regs = ldmatrix_x4(smem_a, 0, 2 * kk, trans=False)
        for jj in range(4):
            if b_nk:  # rows 16 jj .. 16 jj + 15 of B (two n8 tiles), k chunks 2 kk and 2 kk + 1
                b_regs = ldmatrix_x4(smem_b, 16 * jj, 2 * kk, trans=False, by_rows=True)
            else:
                b_regs = ldmatrix_x4(smem_b, 16 * kk, 2 * jj, trans=True)
            for half in range(2):
                j = 2 * jj + half
                a_frag, b_frag = np.zeros((16, 16)), np.zeros((16, 8))
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    for i, (row, col) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
                        a_frag[row, col : col + 2] = a_regs[lane, i]
                    b_frag[2 * t : 2 * t + 2, g] = b_regs[lane, 2 * half]
                    b_frag[2 * t + 8 : 2 * t + 10, g] = b_regs[lane, 2 * half + 1]
                d = a_frag @ b_frag
                for lane in range(32):
                    g, t = lane // 4, lane % 4
                    for e in range(4):
                        acc[lane, j, e] += d[g + 8 * (e // 2), 2 * t + e % 2]
    out = np.zeros((16, 64))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(8):
            for e in range(4):
                out[g + 8 * (e // 2), 8 * j + 2 * t + e % 2] = acc[lane, j, e]
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


# On the GPU machine (`pytest -m gpu`): both layouts of B, with tails in M, N and K (5 x 1000 x 1016
# and 16 x 1001 x 1016 have 16-byte rows of K: the TMA stages serve them, for K x N the first only),
# each with contiguous operands (what the tuner measures) and with gaps between the rows of A, B and
# C: odd gaps and arrays one element off 16 bytes for scalar loads (what the launcher runs on such
# arrays), gaps that keep rows 16-byte aligned for vector loads and the TMA.
GPU_SHAPES = [(2, 1, 1), (7, 13, 5), (3, 1001, 999), (5, 1000, 1016), (16, 1001, 1016), (12, 200, 4100), (4, 72, 8192)]


def _gpu_configs(problem: Problem) -> list[Config]:
    """The default, the seeds and each one's scalar-load fit (what the launcher runs on arrays that
    are not 16-byte aligned), each once."""
    space = tc.space(problem)
    configs = [tc.default_config(problem), *tc.seed_configs(problem)]
    configs += [fit for fit in (space.fit(c, {"vec": 1}) for c in configs) if fit is not None]
    return list({tuple(sorted(c.items())): c for c in configs}.values())


def _strides(problem: Problem, config: Config) -> list[tuple[int, int, int, int]]:
    """(lda, ldb, ldc, offset in elements of each array's start): contiguous, then with gaps, odd ones
    and arrays one element off 16 bytes where the config loads one element at a time, else gaps that
    keep every row 16-byte aligned (the launcher's condition for vector loads and the TMA)."""
    _, _, _, lda, ldb, ldc = gemm_shared.contiguous_sizes(problem)
    if config["vec"] == 1 and not config["stages"]:
        return [(lda, ldb, ldc, 0), (lda + 3, ldb + 5, ldc + 7, 1)]
    up = [-(-ld // 8) * 8 for ld in (lda, ldb, ldc)]
    return [(lda, ldb, ldc, 0), (up[0] + 8, up[1] + 16, up[2] + 24, 0)]


@pytest.mark.gpu
@pytest.mark.parametrize("trans", LAYOUTS, ids=_layout)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_results_are_exact_on_the_gpu(dtype: str, shape: tuple[int, int, int], trans: bool) -> None:
    """Small integers, whose products and float32 sums are exact: every output within the rounding of
    the result to 16 bits. The gaps between rows hold NaN (a load of one would show) and so does C
    where beta is 0 (it must not be read); C's gaps must stay NaN (nothing written past N). Each
    launch runs twice, so the split-K workspace and counters must be left zeroed."""
    from autotune.measure import pycuda_gpu

    cuda = pycuda_gpu.driver()
    pycuda_gpu.context()
    kernels = pycuda_gpu.Kernels()
    problem = _problem(*shape, dtype, trans)
    m, n, k = shape
    rng = np.random.default_rng(sum(shape) + trans)
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    b = rng.integers(-2, 3, (n, k) if trans else (k, n)).astype(np.float32)
    c0 = rng.integers(-3, 4, (m, n)).astype(np.float32)
    exact = a.astype(np.float64) @ (b.T if trans else b).astype(np.float64)
    ulp = 2.0**-8 if dtype == "bfloat16" else 2.0**-11  # one rounding to the 16-bit output

    def device(x: np.ndarray, ld: int, offset: int) -> tuple[object, int]:
        return padded.to_device(cuda, x, dtype, ld, offset)

    def from_device(address: int, rows: int, ld: int) -> np.ndarray:
        return padded.from_device(cuda, address, dtype, rows, ld)

    configs = _gpu_configs(problem)
    with CompilePool() as pool:
        jobs = [
            pool.submit(
                CompileJob(tc.kernel_name(problem, c), tc.kernel_source(problem, c), "sm_90", source_hash(problem))
            )
            for c in configs
        ]
        compiled = [job.result() for job in jobs]
    for config, result in zip(configs, compiled, strict=True):
        assert tc.space(problem).check(config) is None, config
        assert result.cubin is not None, result.message
        name = tc.kernel_name(problem, config)
        function = kernels.function(result.cubin, name, tc.ARG_TYPES)
        launch = tc.launch(problem, config, sm_count=132)
        direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
        for lda, ldb, ldc, offset in _strides(problem, config):
            a_owner, a_at = device(a, lda, offset)
            b_owner, b_at = device(b, ldb, offset)
            workspace: object = 0
            counters: object = 0
            if launch.operand_maps is not None:  # the TMA's tensor maps take the workspace's place
                maps = tma.encode_operands(launch.operand_maps, dtype, (m, n, k, lda, ldb, ldc), a_at, b_at)
                workspace = cuda.to_device(np.frombuffer(maps, np.uint8).copy())
            elif launch.workspace_floats:
                workspace = cuda.to_device(np.zeros(launch.workspace_floats, np.float32))
                counters = cuda.to_device(np.zeros(launch.counters, np.uint32))
            for alpha, beta in ((1.5, 0.0), (0.5, -2.0)):
                c_in = np.full_like(c0, np.nan) if beta == 0 else c0
                for _ in range(2):
                    c_owner, c_at = device(c_in, ldc, offset)
                    function.prepared_call(
                        launch.grid, launch.block, a_at, b_at, c_at, m, n, k, lda, ldb, ldc,
                        np.float32(alpha), np.float32(beta), workspace, counters, shared_size=launch.shared_bytes,
                    )  # fmt: skip
                    cuda.Context.synchronize()
                    stored = from_device(c_at, m, ldc)
                    got, want = stored[:, :n], alpha * exact + beta * c0.astype(np.float64)
                    what = (name, (lda, ldb, ldc, offset), alpha, beta)
                    assert np.isfinite(got).all(), what
                    assert (np.abs(got - want) <= ulp * np.abs(want)).all(), (*what, float(np.abs(got - want).max()))
                    assert np.isnan(stored[:, n:]).all(), what
                    del c_owner
            if launch.workspace_floats:
                left = np.empty((launch.workspace_floats,), np.float32)
                cuda.memcpy_dtoh(left, workspace)
                assert not left.any(), name
                count = np.empty((launch.counters,), np.uint32)
                cuda.memcpy_dtoh(count, counters)
                assert not count.any(), name
            del a_owner, b_owner
