"""The "ws" GEMM family (persistent, warp-specialized, Hopper) on the CPU: space and constraints, launch
geometry, the sm_90a compile arch and nvcc compiles of its kernels (registers and spills read from
ptxas), for B stored K x N and N x K, and the stream-K schedule's invariants; on a Hopper GPU (`pytest -m
gpu`), results against float64 in both layouts with tails, beta 0 (C poisoned with NaN) and beta != 0,
and rows with gaps between them, stream-K configs launched twice on one scratch (its flags come back
zero) and through the launch path, eager and in a CUDA graph."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.build.compiler import INCLUDE_FOLDERS, CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.paths import kernels_dir
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.ops import gemm
from autotune.ops.gemm import shared as gemm_shared
from autotune.ops.gemm import wgmma as gemm_wgmma
from autotune.ops.gemm import ws as gemm_ws
from tests.limits import MAX_SHARED
from tests.nvcc import NvccRun, compile_all, run_nvcc
from tests.test_gemm_wgmma import GPU_CASES, check_family_against_float64

SHAPES = [(65, 72, 40), (1000, 1008, 1016), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096)]


def _problem(m: int, n: int, k: int, dtype: str = "float16", trans: bool = False) -> Problem:
    return Problem("gemm", dtype, m, n, k, trans=trans)


def _config(**overrides: int) -> Config:
    return {**dict(bm=128, bn=256, stages=3, group=8, cluster=1, sk=0), **overrides}


def test_the_family_is_reachable_by_name_and_not_yet_picked() -> None:
    assert gemm.family_named("ws") is gemm_ws
    # The wgmma family serves Hopper, whose shipped records are its (ws.py says why).
    assert gemm.family(_problem(4096, 4096, 4096)) is gemm_wgmma
    assert gemm.family_compile_arch(gemm_ws, "sm_90") == "sm_90a"


def test_the_family_can_be_named_for_sweeps_and_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    """AUTOTUNE_GEMM_FAMILY=ws: the dispatcher takes it where it serves the problem on Hopper (the tuning
    worker inherits the variable); elsewhere the usual family; an unknown name is a one-line error."""
    from autotune.core import fingerprint

    monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda: ("9.0",))
    monkeypatch.setenv(gemm.FAMILY_VARIABLE, "ws")
    assert gemm.family(_problem(4096, 4096, 4096)) is gemm_ws
    assert gemm.OP.kernel_file(_problem(4096, 4096, 4096)) == gemm_ws.KERNEL_FILE  # its own records
    unaligned = gemm.OP.for_unaligned(_problem(4096, 4096, 4096))  # whole 16-byte chunks: mma stands in
    assert unaligned.kernel_file(_problem(4096, 4096, 4096)) == "gemm/gemm_mma.cu"
    assert gemm.family(_problem(64, 4096, 4096)) is gemm_wgmma  # tiles of 128: not for 64 rows
    assert gemm.family(_problem(8, 4096, 4096)).NAME == "skinny_tc"
    assert gemm.family(_problem(4096, 4096, 4096, "float32")).NAME == "simt"
    monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda: ("8.0",))
    assert gemm.family(_problem(4096, 4096, 4096)).NAME == "mma"
    monkeypatch.setenv(gemm.FAMILY_VARIABLE, "mma")
    assert gemm.family(_problem(4096, 4096, 4096)).NAME == "mma"
    monkeypatch.setenv(gemm.FAMILY_VARIABLE, "fast")
    with pytest.raises(AutotuneError, match="AUTOTUNE_GEMM_FAMILY='fast': choose ws, wgmma, mma"):
        gemm.family(_problem(4096, 4096, 4096))


def test_default_config_and_seeds_are_valid_where_the_family_serves() -> None:
    for ((m, n, k), trans), dtype in itertools.product(itertools.product(SHAPES, (False, True)), gemm_ws.DTYPES):
        problem = _problem(m, n, k, dtype, trans)
        space = gemm_ws.space(problem)
        assert space.check(gemm_ws.default_config(problem)) is None, problem
        assert all(space.check(seed) is None for seed in gemm_ws.seed_configs(problem)), problem
    assert gemm_ws.seed_configs(_problem(4096, 4096, 4096))[0] == _config(group=32)  # a whole column of tiles
    # Fewer tile rows than a seed's group: the widest group there is (300 rows: 3 of 128, 2 of 256).
    groups = [(seed["bm"], seed["cluster"], seed["group"]) for seed in gemm_ws.seed_configs(_problem(300, 4096, 4096))]
    assert groups == [(128, 1, 4), (128, 2, 1), (128, 1, 4), (128, 1, 4), (256, 1, 1)]
    assert "k and n divisible by 8" in (gemm_ws.space(_problem(1000, 1001, 1016)).check(_config()) or "")
    assert "ws family" in (gemm_ws.problem_reason(_problem(1000, 1008, 1016, "float32")) or "")
    assert gemm_ws.problem_reason(_problem(1000, 1001, 1016, trans=True)) is None
    assert "above 64" in (gemm_ws.problem_reason(_problem(64, 4096, 4096)) or "")


def test_shared_memory_and_accumulators() -> None:
    problem = _problem(4096, 4096, 4096)
    # Three stages of 128 x 64 and 256 x 64, alignment, mbarriers and C's 128 x 256 staging.
    assert gemm_ws.shared_bytes(problem, _config()) == 3 * 384 * 64 * 2 + 1024 + 1024 + 128 * 256 * 2 <= MAX_SHARED
    space = gemm_ws.space(problem)
    assert "exceed" in (space.check(_config(stages=4)) or "")  # 4 stages of 48 KiB and C do not fit
    assert space.check(_config(bm=128, bn=128, stages=6)) is None
    assert "spill" in (space.check(_config(bm=256, bn=256, stages=2)) or "")
    assert gemm_ws.accumulators(_config()) == 128 == gemm_ws.accumulators(_config(bm=256, bn=128))


@pytest.mark.parametrize("trans", [False, True], ids=["kn", "nk"])
def test_geometry_of_every_config_is_launchable(trans: bool) -> None:
    for size in (1000, 8192):
        problem = _problem(size, size + (1 if trans else 8), size, trans=trans)
        configs = list(gemm_ws.space(problem))
        assert configs and len({gemm_ws.kernel_name(problem, c) for c in configs}) == len(configs)
        for config in configs:
            launch = gemm_ws.launch(problem, config, sm_count=132)
            pair = config["cluster"]
            units = gemm_shared.tile_count(gemm_shared.tile_count(problem.m, config["bm"]), pair)
            units *= gemm_shared.tile_count(problem.n, config["bn"])
            assert launch.grid == (min(units, 132 // pair) * pair, 1, 1) and launch.block == (384, 1, 1)
            assert launch.cluster_dims == ((pair, 1, 1) if pair > 1 else None)
            assert launch.shared_bytes == gemm_ws.shared_bytes(problem, config) <= MAX_SHARED
            blocks = launch.grid[0]
            flags = -(-2 * blocks // 32) * 32  # a flag a consumer, 32-word aligned partial slots
            assert launch.counters == (flags + blocks * config["bm"] * config["bn"] if config["sk"] else 0)
            assert launch.workspace_floats == 0  # the workspace argument carries the tensor maps
            maps = launch.operand_maps
            assert maps is not None and maps.b_nk == trans
            assert (maps.a.rows, maps.a.cols, maps.a.swizzle) == (config["bm"], 64, 128)
            if trans:
                assert (maps.b.rows, maps.b.cols, maps.b.swizzle) == (config["bn"] // pair, 64, 128)
            else:
                assert (maps.b.rows, maps.b.cols, maps.b.swizzle) == (64, 64, 128)


def test_source_instantiates_the_template() -> None:
    nk = _problem(4096, 4096, 4096, "bfloat16", trans=True)
    source = gemm_ws.kernel_source(nk, _config())
    assert '#include "gemm/gemm_ws.cu"' in source and "__launch_bounds__(384, 1)" in source
    assert "at_ws::gemm_ws_body<__nv_bfloat16, true, 128, 256, 3, 8, 1>" in source
    assert gemm_ws.kernel_name(nk, _config()) == "gemm_ws_bfloat16_128x256_s3_g8_c1_nt"
    assert gemm_ws.kernel_name(_problem(4096, 4096, 4096), _config(cluster=2)) == "gemm_ws_float16_128x256_s3_g8_c2"
    # The cluster is given at launch (Launch.cluster_dims), not compiled in.
    assert "__cluster_dims__" not in gemm_ws.kernel_source(nk, _config(cluster=2))
    # SK is given only where it is 1: an sk=0 instance is the source it was before SK existed.
    assert "at_ws::gemm_ws_body<__nv_bfloat16, true, 128, 256, 3, 8, 1, 1>" in gemm_ws.kernel_source(nk, _config(sk=1))
    assert gemm_ws.kernel_name(nk, _config(sk=1)) == "gemm_ws_bfloat16_128x256_s3_g8_c1_sk_nt"


def test_stream_k_is_for_blocks_alone_and_sized_for_the_grid() -> None:
    problem = _problem(4096, 4096, 4096)
    space = gemm_ws.space(problem)
    assert space.check(_config(sk=1)) is None
    assert "not in clusters" in (space.check(_config(sk=1, cluster=2)) or "")
    launch = gemm_ws.launch(problem, _config(sk=1), sm_count=132)  # 512 tiles: 3.88 waves
    assert launch.grid == (132, 1, 1) and launch.counters == 288 + 132 * 128 * 256
    small = gemm_ws.launch(_problem(1000, 1008, 1016), _config(sk=1), sm_count=132)  # 32 tiles, 32 blocks
    assert small.grid == (32, 1, 1) and small.counters == 64 + 32 * 128 * 256
    assert not any(seed["sk"] for seed in gemm_ws.seed_configs(problem))  # it lost every sweep


def _stream_k_pieces(tiles: int, k_tiles: int, blocks: int, b: int) -> list[tuple[int, int, int]]:
    """Block b's (tile, kb, ke) pieces as gemm_ws.cu's StreamK walks them."""
    waves = tiles // blocks
    dp_tiles = (waves - 1) * blocks if waves > 1 else 0
    pieces = [(tile, 0, k_tiles) for tile in range(b, dp_tiles, blocks)]
    total = (tiles - dp_tiles) * k_tiles
    begin, end = total * b // blocks, total * (b + 1) // blocks
    mine = len(pieces)
    for piece in range(mine, mine + (end - 1) // k_tiles - begin // k_tiles + 1):
        tile = begin // k_tiles + piece - mine
        kb = begin - tile * k_tiles if piece == mine else 0
        pieces.append((dp_tiles + tile, kb, min(k_tiles, end - tile * k_tiles)))
    return pieces


def test_the_stream_k_schedule_covers_every_k_tile_once_in_whole_tiles_or_head_and_tail_pairs() -> None:
    """What the kernel's stream-K relies on: every (tile, k-tile) in exactly one piece; a tile is whole
    in one block or split once, block b's head (k-tiles from 0, b's last piece) and block b + 1's tail
    (to the end, b + 1's first stream-K piece), so a block writes one partial at most and reads its
    neighbour's; no tile of a whole wave but the last two is split."""
    for tiles, k_tiles, blocks in itertools.product(
        (1, 5, 32, 131, 132, 133, 263, 264, 512, 1024), (1, 2, 16, 64, 128), (3, 4, 132)
    ):
        blocks = min(blocks, tiles)  # the launch's grid
        covered: dict[int, list[tuple[int, int, int]]] = {}
        for b in range(blocks):
            pieces = _stream_k_pieces(tiles, k_tiles, blocks, b)
            assert pieces, (tiles, k_tiles, blocks, b)
            for tile, kb, ke in pieces:
                assert 0 <= kb < ke <= k_tiles
                covered.setdefault(tile, []).append((kb, ke, b))
            for i, (_tile, kb, ke) in enumerate(pieces):
                if kb > 0:  # a tail: the first piece after the data-parallel tiles, to the end
                    assert ke == k_tiles and all(p[1:] == (0, k_tiles) for p in pieces[:i])
                if ke < k_tiles:  # a head: the last piece
                    assert kb == 0 and i == len(pieces) - 1
        assert sorted(covered) == list(range(tiles))
        for tile, parts in covered.items():
            parts.sort()
            assert [p[:2] for p in parts] in ([(0, k_tiles)], [(0, parts[0][1]), (parts[0][1], k_tiles)]), parts
            if len(parts) == 2:
                assert parts[1][2] == parts[0][2] + 1  # the tail's block follows the head's
                assert tile >= tiles - min(tiles, 2 * blocks)


def test_clusters_pair_tile_rows_where_there_are_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two blocks a cluster take vertically adjacent tiles: a problem of one tile row has no pair, an odd
    count leaves the last unit's second tile past M (zero filled, not stored); a GPU without clusters
    runs none."""
    space = gemm_ws.space(_problem(4096, 4096, 4096))
    assert space.check(_config(cluster=2)) is None
    assert "one 128-row tile" in (gemm_ws.space(_problem(100, 4096, 4096)).check(_config(cluster=2)) or "")
    odd = _problem(5 * 128, 4096, 4096)  # 5 tile rows: 3 units of two
    assert gemm_ws.launch(odd, _config(cluster=2), sm_count=132).grid == (3 * 16 * 2, 1, 1)
    big = _problem(8192, 8192, 8192)  # 1024 units: as many clusters as the SMs hold, whole ones
    assert gemm_ws.launch(big, _config(cluster=2), sm_count=131).grid == (130, 1, 1)
    from autotune.core import fingerprint

    monkeypatch.setattr(fingerprint, "local_compute_capabilities", lambda: ("8.0",))
    assert "no thread-block clusters" in (gemm_ws.space(_problem(4096, 4096, 4096)).check(_config(cluster=2)) or "")


def _seed_jobs() -> list[CompileJob]:
    """The seeds in both layouts and dtypes, at a shape with tails."""
    depends = hashlib.sha256((kernels_dir() / gemm_ws.KERNEL_FILE).read_bytes()).hexdigest()[:16]
    arch = gemm.family_compile_arch(gemm_ws, "sm_90")
    jobs = []
    for trans, dtype in itertools.product((False, True), gemm_ws.DTYPES):
        problem = _problem(1000, 1001 if trans else 1008, 1016, dtype, trans)
        for config in gemm_ws.seed_configs(problem):
            jobs.append(
                CompileJob(gemm_ws.kernel_name(problem, config), gemm_ws.kernel_source(problem, config), arch, depends)
            )
    return jobs


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.arch  # twelve sm_90a instances: with the other architecture compiles, in .ci/run
@pytest.mark.nvcc(jobs=_seed_jobs)
def test_seed_instances_compile_for_sm_90a() -> None:
    compile_all(_seed_jobs())


def _ptxas_runs() -> list[NvccRun]:
    includes = [arg for folder in INCLUDE_FOLDERS for arg in ("-I", str(kernels_dir() / folder))]
    flags = ("--cubin", "-arch=sm_90a", "-O3", "-Xptxas", "-v", *includes)
    problem = _problem(8192, 8192, 8192, trans=True)
    # The 128 x 256 tile (128 accumulators a thread, the most), alone, in a cluster and with stream-K:
    # the other seeds hold fewer accumulators or differ in stages and tile order (the arch run compiles
    # them all), and compiles cost the README's test run its time.
    configs = [_config(), _config(cluster=2), _config(sk=1)]
    return [NvccRun(flags, gemm_ws.kernel_source(problem, c), ".cubin") for c in configs]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.nvcc(jobs=_ptxas_runs)
def test_seed_kernels_do_not_spill() -> None:
    """The consumers' 128 accumulators fit in the registers setmaxnreg gives them (ptxas counts the
    block's 384 threads: 168 a thread), and no wgmma is serialized."""
    for done in run_nvcc(_ptxas_runs()):
        text = done.output
        assert done.returncode == 0, text
        assert "0 bytes spill stores, 0 bytes spill loads" in text, text
        assert int(re.search(r"Used (\d+) registers", text).group(1)) <= 168, text  # type: ignore[union-attr]
        assert "serialized" not in text and "Performance Loss" not in text, text


def _gpu_configs(problem: Problem, sk: int = 0) -> list[Config]:
    """The default, the seeds and a two-stage square tile in groups of 4, where each fits; those with
    `sk` as given (stream-K needs counters, which check_family_against_float64 does not pass)."""
    space = gemm_ws.space(problem)
    picked = [
        gemm_ws.default_config(problem),
        *gemm_ws.seed_configs(problem),
        _config(bn=128, stages=2, group=4),
        _config(bn=128, stages=2, group=4, cluster=2),
        _config(sk=1),
        _config(bn=128, stages=6, group=16, sk=1),
        _config(bn=128, stages=2, group=4, sk=1),
        _config(bm=256, bn=128, stages=2, group=1, sk=1),
    ]
    return list({config_key(c): c for c in picked if space.check(c) is None and c["sk"] == sk}.values())


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}_{'nk' if c[3] else 'kn'}_{c[4]}")
def test_results_match_float64_on_the_gpu(case: tuple, tmp_path: Path) -> None:
    """The wgmma family's cases and checks (test_gemm_wgmma.GPU_CASES), with a grid made for 3 SMs so
    that every block walks several tiles."""
    check_family_against_float64(gemm_ws, case, _gpu_configs, tmp_path, sm_count=3)


# Stream-K cases: tails in M and N, K with a partial last k-tile, rows with gaps, both layouts.
_STREAM_K_CASES = [
    (1000, 1008, 1016, False, "bfloat16", None),
    (257, 383, 4104, True, "float16", (16, 8, 24)),
    (520, 264, 1000, True, "bfloat16", (8, 8, 8)),
    (777, 1000, 2056, False, "float16", (8, 16, 8)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", _STREAM_K_CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}_{'nk' if c[3] else 'kn'}_{c[4]}")
def test_stream_k_matches_float64_twice_on_one_scratch(case: tuple, tmp_path: Path) -> None:
    """sk=1 configs on grids made for 3, 4 and 7 SMs (tiles split between blocks in every way the
    schedule has: whole waves then stream-K, all stream-K), against float64 with alpha and beta, C's
    gaps and the row after it left as they were; each launched twice on one scratch, which comes back
    zero each time, flags and partials (the second launch finds it so, as would any split-K kernel
    sharing the stream's scratch)."""
    from autotune.build.compiler import compile_kernel
    from autotune.gpu import tma
    from autotune.measure import pycuda_gpu
    from tests import direct_launch
    from tests.test_gemm_wgmma import c_before, check_output, hopper_operands

    cuda = pycuda_gpu.driver()
    pycuda_gpu.context()
    operands = hopper_operands(cuda, gemm_ws, case)
    problem, (m, n, k, lda, ldb, ldc) = operands.problem, operands.sizes
    a_gpu, b_gpu = operands.a_gpu, operands.b_gpu
    kernels = pycuda_gpu.Kernels()
    arch = gemm.family_compile_arch(gemm_ws, "sm_90")
    configs = _gpu_configs(problem, sk=1)
    assert len(configs) >= 2, configs
    for config in configs:
        name = gemm_ws.kernel_name(problem, config)
        compiled = compile_kernel(CompileJob(name, gemm_ws.kernel_source(problem, config), arch, "t"), tmp_path)
        assert compiled.cubin is not None, compiled.message
        function = kernels.function(compiled.cubin, name, gemm_ws.ARG_TYPES)
        for sm_count in (3, 4, 7):
            launch = gemm_ws.launch(problem, config, sm_count=sm_count)
            direct_launch.opt_in_shared(cuda, function, launch.shared_bytes)
            flag_words = launch.counters - launch.grid[0] * config["bm"] * config["bn"]
            counters = cuda.mem_alloc(launch.counters * 4)
            cuda.memset_d32(counters, 0, launch.counters)
            maps = tma.encode_operands(launch.operand_maps, problem.dtype, operands.sizes, int(a_gpu), int(b_gpu))
            maps_gpu = cuda.to_device(np.frombuffer(maps, np.uint8).copy())
            for alpha, beta in ((1.5, 0.0), (0.5, -2.0), (1.0, 0.0)):
                c_in = c_before(operands, beta)
                c_gpu = cuda.to_device(c_in)
                for launched in (1, 2):
                    cuda.memcpy_htod(c_gpu, c_in)
                    function.prepared_call(
                        launch.grid, launch.block, a_gpu, b_gpu, c_gpu, m, n, k, lda, ldb, ldc,
                        np.float32(alpha), np.float32(beta), maps_gpu, counters, shared_size=launch.shared_bytes,
                    )  # fmt: skip
                    cuda.Context.synchronize()
                    where = f"{name} on {sm_count} SMs alpha={alpha} beta={beta} launch {launched}"
                    scratch = np.empty(launch.counters, np.uint32)
                    cuda.memcpy_dtoh(scratch, counters)
                    assert not scratch[:flag_words].any(), where  # the flags
                    assert not scratch.any(), where  # and the partials
                    check_output(operands, c_in, cuda.from_device_like(c_gpu, c_in), alpha, beta, where)
            counters.free()


@pytest.mark.gpu
def test_stream_k_through_the_launch_path_eager_and_in_a_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream-K config run by the launch path (its counters from the stream's scratch) on the GPU's
    own SMs: 2000 x 2008 x 1000 in 128 x 128 tiles is 256 tiles, all of them stream-K on 132 SMs; called
    twice eagerly with beta 0 and != 0, then twice in one captured graph (the second call on the scratch
    the first left) replayed twice."""
    torch = pytest.importorskip("torch")
    from autotune.runtime.launcher import Runtime
    from autotune.select.choose import Choice

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the ws family needs a Hopper GPU (sm_90)")
    monkeypatch.setenv(gemm.FAMILY_VARIABLE, "ws")
    config = _config(bn=128, stages=5, group=8, sk=1)
    runtime = Runtime(lambda p, device, db: Choice(p, device.gpu.name, config, "measured"))
    A = torch.empty(2000, 1000, device="cuda", dtype=torch.float16)
    B = torch.empty(1000, 2008, device="cuda", dtype=torch.float16)
    C1, C2 = (torch.empty(2000, 2008, device="cuda", dtype=torch.float16) for _ in range(2))

    def check(c: Any, beta: float = 0.0, c0: Any = None) -> None:
        want = 1.5 * (A.double() @ B.double()) + (beta * c0.double() if c0 is not None else 0.0)
        scale = (A.double().abs() @ B.double().abs()).max().item()
        assert bool(c.double().isfinite().all())
        assert (c.double() - want).abs().max().item() <= 1e-2 * scale

    for _ in range(2):
        for t in (A, B):
            t.uniform_(-1, 1)
        C1.fill_(float("nan"))
        runtime.gemm(A, B, C1, alpha=1.5)
        torch.cuda.synchronize()
        check(C1)
        C2.uniform_(-1, 1)
        c0 = C2.clone()
        runtime.gemm(A, B, C2, alpha=1.5, beta=-0.5)
        torch.cuda.synchronize()
        check(C2, -0.5, c0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        runtime.gemm(A, B, C1, alpha=1.5)
        runtime.gemm(A, B, C2, alpha=1.5)
    for _ in range(2):
        for t in (A, B):
            t.copy_(torch.rand_like(t) * 2 - 1)
        C1.fill_(float("nan"))
        C2.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(C1)
        check(C2)


@pytest.mark.shipped_records
def test_a_named_family_meets_the_shipped_records_with_a_one_line_way_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The shipped GEMM records hold wgmma configs, which ws's space refuses: importing them under
    AUTOTUNE_GEMM_FAMILY=ws says to sweep into a database of its own, and such a database opens. (One
    records file of its own folder: tests/shipped_copies.py serves the whole set from a copy.)"""
    from autotune.core.paths import db_dir
    from autotune.store import open_store

    folder = tmp_path / "records"
    folder.mkdir()
    shutil.copy(db_dir() / "records" / "nvidia-h200-gemm-nt.jsonl", folder)
    monkeypatch.setenv(gemm.FAMILY_VARIABLE, "ws")
    way_out = r"AUTOTUNE_GEMM_FAMILY=ws names a GEMM family .* --no-shipped"
    with (
        open_store(str(tmp_path / "shared.db"), import_shipped=False) as store,
        pytest.raises(AutotuneError, match=way_out),
    ):
        store.import_shipped(folder)
    open_store(str(tmp_path / "own.db"), decline_shipped=True).close()
