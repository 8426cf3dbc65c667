"""Tensor-core GEMM family "wgmma" (Hopper wgmma.mma_async, half/bfloat16; stages filled by cp.async
or by the tensor memory accelerator): space, geometry, source.

Built for sm_90a only (ARCH_SUFFIX): wgmma exists on compute capability 9.0 alone, and such a cubin
loads on no other GPU. The dispatcher (gemm.family) picks it for half-precision products with 16-byte
rows on machines whose GPUs are all Hopper; scripts/check_wgmma.py checks its B layouts on a GPU.

B is K x N or, for a trans=True problem (gemm_shared.b_is_n_by_k), N x K: then B's stage is K-major
like A's (the kernel's B_NK), wgmma reads it untransposed, and a TMA box of B is BN rows of BK.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch
from autotune.gpu.tma import Box, OperandMaps
from autotune.ops.gemm import shared as gemm_shared

NAME = "wgmma"
KERNEL_FILE = "gemm/gemm_wgmma.cu"  # under kernels/, beside this folder's mirror
DTYPES = ("float16", "bfloat16")
# Kernel arguments in PyCUDA's prepare() notation: A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
# workspace, counters.
ARG_TYPES = gemm_shared.ARG_TYPES
# The only GPU architecture this family compiles for, and the suffix nvcc needs for wgmma ("sm_90a").
ARCH = "sm_90"
ARCH_SUFFIX = "a"

MAX_ACCUMULATORS = 128  # float accumulators a thread: more leaves too few of the 255 registers (spills)
# k-depth of a stage: 64 (A's rows of 128 bytes, 128-byte swizzle) or 32 (64-byte rows and swizzle:
# half the shared memory a stage, so twice the stages and a deeper prefetch fit).
_BKS = (32, 64)
ALIGN_PAD = 1024  # the kernel rounds its shared base up to 1024 bytes
VEC = 8  # elements of one 16-byte cp.async: the rows of A and B (K, and N for a K x N B) multiples of it
_TILES = (64, 128, 256)
_WARPGROUPS = (1, 2)
_STAGES = (3, 4, 5, 6, 7, 8, 9)
_SWIZZLES = (1, 4, 8, 16)
# Layouts of a K x N B's shared stage and its descriptor (see LayoutB in gemm_wgmma.cu). The GPU check
# runs all of LAYOUTS; the tuner only those expected correct (TUNED_LAYOUTS) until the check says
# otherwise. An N x K B has one layout (A's): its configs name layout 0.
LAYOUTS = (0, 1, 2, 3)
TUNED_LAYOUTS = (0,)
# How stages are filled: 0 every thread's cp.async, 1 the tensor memory accelerator (TMA: one thread
# issues a few bulk tensor copies a stage, which complete on an mbarrier; needs layout 0).
_LOADERS = (0, 1)
MBARRIER_BYTES = 8  # one "full" mbarrier a stage in TMA instances
B_ATOM_COLUMNS = 64  # B's stage is 64-column atoms of 128-byte rows: one TMA box each


def threads(config: Mapping[str, int]) -> int:
    return 128 * config["wgs"]


def accumulators(config: Mapping[str, int]) -> int:
    """Float accumulators a thread holds: its warpgroup's m64 slices times BN / 2."""
    return config["bm"] // config["wgs"] // 64 * config["bn"] // 2


def shared_bytes(problem: Problem, config: Mapping[str, int]) -> int:
    """Mirrors gemm_wgmma.cu: SHARED_BYTES = STAGES * (BM * BK + BK * BN) * sizeof(T) + 1024, plus an
    mbarrier a stage with TMA."""
    c = config
    stages = c["stages"] * (c["bm"] * c["bk"] + c["bk"] * c["bn"]) * ITEMSIZE[problem.dtype]
    return stages + ALIGN_PAD + (c["stages"] * MBARRIER_BYTES if c["tma"] else 0)


def problem_reason(problem: Problem, family: str = NAME) -> str | None:
    """Why this family (or `family`, which reads A and B as it does: ws) cannot serve the problem at
    all, or None. The rows of A and B must be whole 16-byte pieces: A's are K long, B's N (K x N) or K
    (N x K, a trans=True problem)."""
    if problem.dtype not in DTYPES:
        return f"the {family} family serves {' and '.join(DTYPES)}, not {problem.dtype}"
    if gemm_shared.b_is_n_by_k(problem):
        if problem.k % VEC:
            return (
                f"the {family} family needs k divisible by {VEC} (16-byte rows of A and of B stored n x k), "
                f"got k={problem.k}"
            )
        return None
    if problem.k % VEC or problem.n % VEC:
        return (
            f"the {family} family needs k and n divisible by {VEC} (16-byte rows of A and B), "
            f"got k={problem.k}, n={problem.n}"
        )
    return None


def _tile_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if c["bm"] % (64 * c["wgs"]):
        return f"bm={c['bm']} does not split into m64 slices for {c['wgs']} warpgroups"
    if accumulators(c) > MAX_ACCUMULATORS:
        return f"{accumulators(c)} accumulators a thread (a {c['bm']}x{c['bn']} tile on {c['wgs']} warpgroups) spill"
    return gemm_shared.output_tile_reason(problem, c, shared_bytes(problem, c))


def _loader_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    if gemm_shared.b_is_n_by_k(problem) and c["layout"] != 0:
        return f"B stored n x k has one stage layout (A's, named 0), not layout {c['layout']}"
    if c["tma"] and c["layout"] != 0:
        return f"the TMA writes B's stage in layout 0 (128-byte swizzled atoms), not layout {c['layout']}"
    return None


def _schedule_reason(problem: Problem, c: Mapping[str, int]) -> str | None:
    k_tiles = gemm_shared.tile_count(problem.k, c["bk"])
    # STAGES - 2 tiles (STAGES - 1 with TMA) load ahead: more stages than k-tiles only take shared memory.
    if c["stages"] > max(3, k_tiles + 2):
        return f"{c['stages']} stages for {k_tiles} k-tiles"
    return gemm_shared.swizzle_reason(c["swizzle"], gemm_shared.tile_count(problem.m, c["bm"]))


def space(problem: Problem) -> Space:
    def constraint(c: Mapping[str, int]) -> str | None:
        return (
            problem_reason(problem)
            or _tile_reason(problem, c)
            or _loader_reason(problem, c)
            or _schedule_reason(problem, c)
        )

    return Space(
        params=(
            Param("bm", _TILES),
            Param("bn", _TILES),
            Param("bk", _BKS),
            Param("wgs", _WARPGROUPS),
            Param("stages", _STAGES),
            Param("swizzle", _SWIZZLES),
            Param("layout", TUNED_LAYOUTS),
            Param("tma", _LOADERS),
        ),
        constraint=constraint,
    )


def default_config(problem: Problem) -> Config:
    """Valid for every problem the family serves (k, and n for a K x N B, multiples of 8), in both
    layouts: one warpgroup, tiles no larger than the output, three stages filled by the TMA (faster
    than cp.async on the H200)."""
    return {
        "bm": 128 if problem.m > 64 else 64,
        "bn": 128 if problem.n > 64 else 64,
        "bk": 64,
        "wgs": 1,
        "stages": 3,
        "swizzle": 1,
        "layout": TUNED_LAYOUTS[0],
        "tma": 1,
    }


def kernel_name(problem: Problem, config: Mapping[str, int]) -> str:
    c = config
    tile = f"{c['bm']}x{c['bn']}x{c['bk']}"
    schedule = f"g{c['wgs']}_s{c['stages']}_z{c['swizzle']}_l{c['layout']}_t{c['tma']}"
    return f"gemm_wgmma_{problem.dtype}_{tile}_{schedule}{gemm_shared.layout_suffix(problem)}"


def kernel_source(problem: Problem, config: Mapping[str, int]) -> str:
    """A translation unit with one extern "C" instance of the template (a stable, unmangled name)."""
    c = config
    body = "at_wgmma::gemm_wgmma_body"
    args = [c[k] for k in ("bm", "bn", "bk", "wgs", "stages", "swizzle", "layout", "tma")]
    # One block a multiprocessor (its shared memory alone sees to that): ptxas may give a thread up to
    # 255 registers, which 128 accumulators need.
    bounds = f"{threads(c)}, 1"
    return gemm_shared.instance_source(
        KERNEL_FILE, kernel_name(problem, c), problem.dtype, bounds, body, args, b_nk=gemm_shared.b_is_n_by_k(problem)
    )


def operand_maps(problem: Problem, config: Mapping[str, int]) -> OperandMaps | None:
    """The TMA boxes of a stage (None for cp.async instances): A's BM x BK rows, swizzled over their
    2 * BK bytes as A's stage is (LayoutA), and of a K x N B one 64-column atom of BK k-rows (LayoutB
    0), of an N x K B its BN x BK rows, swizzled as A's (B's map is then of the N x K matrix)."""
    c = config
    if not c["tma"]:
        return None
    row_bytes = 2 * c["bk"]
    a = Box(c["bm"], c["bk"], row_bytes)
    if gemm_shared.b_is_n_by_k(problem):
        return OperandMaps(a=a, b=Box(c["bn"], c["bk"], row_bytes), b_nk=True)
    return OperandMaps(a=a, b=Box(c["bk"], B_ATOM_COLUMNS, 128))


def launch(problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
    """One block per output tile on grid x (the kernel remaps it); no split-K. TMA instances get
    their tensor maps in the workspace argument."""
    c = config
    tiles = gemm_shared.tile_count(problem.m, c["bm"]) * gemm_shared.tile_count(problem.n, c["bn"])
    return Launch(
        grid=(tiles, 1, 1),
        block=(threads(c), 1, 1),
        shared_bytes=shared_bytes(problem, c),
        workspace_floats=0,
        counters=0,
        operand_maps=operand_maps(problem, c),
    )


# Tilings of the Hopper GEMMs this family imitates: 128x256 / 256x128 on two warpgroups (128
# accumulators a thread, 48 KiB a stage at bk 64, 24 KiB at bk 32), and 128x128 on one or two.
# Measured first by the tuner.
_SEEDS = (
    dict(bm=128, bn=256, bk=64, wgs=2, stages=4, swizzle=8),
    dict(bm=256, bn=128, bk=64, wgs=2, stages=4, swizzle=8),
    dict(bm=128, bn=256, bk=32, wgs=2, stages=8, swizzle=8),
    dict(bm=256, bn=128, bk=32, wgs=2, stages=8, swizzle=8),
    dict(bm=128, bn=128, bk=64, wgs=2, stages=6, swizzle=8),
    dict(bm=128, bn=128, bk=64, wgs=1, stages=6, swizzle=8),
)


def seed_configs(problem: Problem) -> list[Config]:
    """Known-good configs valid for this problem, each with TMA loads (first: at 4096^3 on the H200,
    226 us against 271 with cp.async for the same tiling) and with cp.async."""
    candidates = [{**seed, "layout": TUNED_LAYOUTS[0], "tma": tma} for tma in (1, 0) for seed in _SEEDS]
    return [c for c in candidates if space(problem).check(c) is None]
