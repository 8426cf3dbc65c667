"""What the GEMM kernel families share: their kernel arguments, the instance source, split-K rules, seeds."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from autotune.core.dtypes import CUDA_TYPE
from autotune.core.errors import AutotuneError
from autotune.core.limits import MAX_GRID_Y, MAX_SHARED_BYTES_OPT_IN
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config
from autotune.gpu.geometry import cluster_choices, cluster_declaration
from autotune.ops.base import DeviceReference

# Kernel arguments in PyCUDA's prepare() notation: A, B, C, M, N, K, lda, ldb, ldc, alpha, beta,
# workspace, counters. The leading dimensions are runtime arguments so that a view with gaps between
# its rows (a slice of columns of a wider matrix) runs in place.
ARG_TYPES = "PPPiiiiiiffPP"


def b_is_n_by_k(problem: Problem) -> bool:
    """Whether a GEMM problem stores B as N x K row-major (K contiguous: an nn.Linear's weight, C = A Wᵀ)
    rather than K x N. A GEMM problem's `trans` names this layout."""
    return problem.op == "gemm" and problem.trans


def layout_suffix(problem: Problem) -> str:
    """What a kernel name adds for B's layout: nothing for K x N, "_nt" for N x K."""
    return "_nt" if b_is_n_by_k(problem) else ""


def contiguous_sizes(problem: Problem) -> tuple[int, int, int, int, int, int]:
    """The kernels' sizes (M, N, K, lda, ldb, ldc) of a problem whose matrices have no gaps between
    their rows (what the tuner measures)."""
    m, n, k = problem.m, problem.n, problem.k
    return (m, n, k, k, k if b_is_n_by_k(problem) else n, n)


REFERENCE_TILE = 64  # kernels/measure/support.cu: at_gemm_reference's tile of C


def device_reference(problem: Problem) -> DeviceReference:
    """at_gemm_reference: C (M x N) = A B in float64, a block per 64 x 64 tile of C; B is read N x K
    where the problem stores it so (at_gemm_reference_nt)."""
    tiles_m = math.ceil(problem.m / REFERENCE_TILE)
    if tiles_m > MAX_GRID_Y:
        raise AutotuneError(f"{problem}: M={problem.m} is past what the float64 reference kernel covers")
    grid = (math.ceil(problem.n / REFERENCE_TILE), tiles_m, 1)
    kernel = "at_gemm_reference_nt" if b_is_n_by_k(problem) else "at_gemm_reference"
    return DeviceReference(f"{kernel}_{problem.dtype}", "PPPPiii", grid, (256, 1, 1))


def instance_source(
    kernel_file: str,
    name: str,
    dtype: str,
    launch_bounds: str,
    body: str,
    template_args: Iterable[int],
    *,
    cluster: int = 1,
    split_k: bool = True,
    b_nk: bool = False,
) -> str:
    """A translation unit with one extern "C" instance of a family's template (a stable, unmangled
    name) taking the GEMM kernel arguments: it calls `body`<T, B_NK, template_args...> (T: the dtype's
    CUDA type; B_NK: B is stored N x K, see b_is_n_by_k) with them, the split-K workspace and counters
    left out where `split_k` is False. cluster > 1
    declares the kernel with thread-block clusters of that many blocks along the grid's y (the K
    splits), fixed at compile time so that a plain launch runs it in clusters."""
    t = CUDA_TYPE[dtype]
    args = ", ".join([t, "true" if b_nk else "false", *map(str, template_args)])
    call_args = "A, B, C, M, N, K, lda, ldb, ldc, alpha, beta" + (", workspace, counters" if split_k else "")
    return (
        f'#include "{kernel_file}"\n'
        f'extern "C" __global__ void {cluster_declaration(cluster)}__launch_bounds__({launch_bounds})\n'
        f"{name}(const {t}* A, const {t}* B, {t}* C, int M, int N, int K, int lda, int ldb, int ldc,\n"
        f"    float alpha, float beta, float* workspace, unsigned int* counters) {{\n"
        f"  {body}<{args}>({call_args});\n"
        f"}}\n"
    )


def pow2_ceil(value: int) -> int:
    """The smallest power of two not below `value` (1 for 1 and less)."""
    return 1 << max(0, value - 1).bit_length()


def tile_count(size: int, tile: int) -> int:
    """Tiles of `tile` that cover `size`."""
    return math.ceil(size / tile)


def output_tile_reason(problem: Problem, config: Mapping[str, int], shared_bytes: int) -> str | None:
    """Why a tiled family's bm x bn tile of C with `shared_bytes` of shared memory is not one to
    build for `problem`, or None. Shared by the tensor-core families (mma, wgmma)."""
    c = config
    if shared_bytes > MAX_SHARED_BYTES_OPT_IN:
        return f"{shared_bytes} bytes of shared memory exceed {MAX_SHARED_BYTES_OPT_IN // 1024} KiB"
    # Tiles far beyond the problem only add idle work (and duplicate smaller tiles' results).
    if c["bm"] > max(64, pow2_ceil(problem.m)) or c["bn"] > max(64, pow2_ceil(problem.n)):
        return f"a {c['bm']}x{c['bn']} tile is larger than the {problem.m}x{problem.n} output needs"
    return None


def swizzle_reason(swizzle: int, tiles_m: int) -> str | None:
    """Why grouping `swizzle` rows of tiles (of `tiles_m`) in the kernel's tile order is pointless, or
    None. Shared by the tensor-core families (mma, wgmma)."""
    if swizzle > 1 and swizzle > pow2_ceil(tiles_m):
        return f"swizzle={swizzle} groups more tile rows than the {tiles_m} there are"
    return None


# Blocks that give several waves on any current GPU: a streaming kernel split further only adds partials.
ENOUGH_BLOCKS = 1024


# Blocks a skinny family's seed configs aim for: about two per SM of an H100/H200.
SEED_BLOCKS = 264


def seed_vec(vecs: tuple[int, ...], narrower: bool) -> int:
    """A skinny seed's load width: the widest the problem allows, or with `narrower` the next one
    (8 bytes for 16-bit types), which the H200 sweeps often preferred."""
    return vecs[-2] if narrower and len(vecs) > 2 else vecs[-1]


def skinny_seeds(
    tilings: Iterable[tuple[Config, int]], splits: tuple[int, ...], check: Callable[[Config], str | None]
) -> list[Config]:
    """Seed configs of a skinny family from (tiling, output tiles) pairs: each tiling (cluster 1) with
    the largest split that keeps its grid within SEED_BLOCKS and passes `check` (the space's
    constraint), then the same tiling with its splits reduced in a cluster, as many as one cluster
    holds, and in a cluster up to twice that (a cluster needs no workspace, so twice the blocks cost
    less: 16x4096x4096 ran 15.5 us with 4 splits in a cluster, 14.5 us with 8); only those that pass
    `check`, each once."""
    seeds: list[Config] = []
    for config, tiles in tilings:
        valid = [s for s in splits if tiles * s <= SEED_BLOCKS and check({**config, "split": s}) is None]
        split = max(valid or [1])
        sizes = {max([c for c in cluster_choices() if c <= most] or [1]) for most in (split, 2 * split)}
        candidates = [{**config, "cluster": 1, "split": split}]
        candidates += [{**config, "cluster": size, "split": size} for size in sorted(sizes) if size > 1]
        seeds += [c for c in candidates if check(c) is None and c not in seeds]
    return seeds


def rows_per_split(k: int, split: int, step: int) -> int:
    """Rows of K each split of a streaming (skinny) kernel gets: a whole number of its steps."""
    return math.ceil(math.ceil(k / split) / step) * step


def split_k_reason(problem: Problem, split: int, step: int, tiles: int, cluster: int = 1) -> str | None:
    """Why a skinny kernel (B streamed once, `step` rows of K per block step, `tiles` output tiles)
    should not split K `split` ways, reducing the splits in clusters of `cluster` blocks (1: through
    a workspace in global memory), or None. Shared by the skinny families."""
    if cluster > 1 and split != cluster:
        return f"cluster={cluster} reduces exactly that many splits, not split={split}"
    if split == 1:
        return None
    if (split - 1) * rows_per_split(problem.k, split, step) >= problem.k:
        return f"split={split} leaves a split without rows (k={problem.k}, {step} rows per step)"
    if cluster > 1:
        return None  # the partials stay in shared memory: the costs below are those of the workspace
    if tiles * (split // 2) >= ENOUGH_BLOCKS:
        return f"split={split}: half of it already gives {ENOUGH_BLOCKS} blocks or more"
    # Each split writes, reads back and zeroes M*N floats: past the bytes of B that is a loss.
    if 12 * split * problem.m > problem.k * ITEMSIZE[problem.dtype]:
        return f"split={split}: the partial sums would move more bytes than B"
    return None
