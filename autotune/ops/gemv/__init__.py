"""GEMV (y = alpha*A*x + beta*y, A row-major M x N with rows lda >= N elements apart): parameters,
constraints, launch geometry, source, operands and reference. The transposed product (y = Aᵀx) is
transposed.py's."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.core.arrays import DeviceArray
from autotune.core.dtypes import CUDA_TYPE
from autotune.core.errors import AutotuneError
from autotune.core.limits import DEFAULT_SHARED_BYTES, MAX_THREADS_PER_SM
from autotune.core.problem import ITEMSIZE, Problem
from autotune.core.space import Config, Param, Space
from autotune.gpu.geometry import Launch, cluster_choices, cluster_declaration
from autotune.ops.base import DeviceReference, Op, Operands
from autotune.ops.call import Bound, Reroute
from autotune.ops.gemv import call
from autotune.ops.gemv.transposed import TRANSPOSED

NAME = "gemv"
KERNEL_FILE = "gemv/gemv.cu"  # under kernels/, the mirror of this folder
# Open models' decode projections beyond the standard set (scripts/bench_gemv.py --set llm).
LLM_SHAPES_FILE = Path(__file__).with_name("llm_shapes.txt")

MAX_SHARED_BYTES = DEFAULT_SHARED_BYTES  # the launch path never opts a GEMV in to more
# Bytes of A a thread loads per step (vec * itemsize * unroll * rows). At 256, instances that issue a
# step's loads together (order=1) take up to 128 registers; at 512 they reach ptxas's limit of 255.
# 256 lets a thread load a whole 8192-element float16 row pair in one step: float16 4096x8192 in
# 16.76 us against 17.08 at 128 bytes on the H200, in a grid over rows, unroll, order and lanes.
MAX_BYTES_IN_FLIGHT = 256
_BLOCKS = (64, 128, 256, 512)
_LANES = (1, 4, 8, 16, 32, 64, 128, 256, 512)
_VECS = (1, 2, 4, 8)
_ROWS = (1, 2, 4, 8)
_SPLITS = (1, 2, 4, 8, 16, 32)

# Valid for every shape and dtype: one warp per row, scalar loads, no split.
DEFAULT_CONFIG: Config = {
    "block": 128,
    "lanes": 32,
    "vec": 1,
    "unroll": 4,
    "rows": 1,
    "x_smem": 0,
    "policy": 0,
    "cluster": 1,
    "split": 1,
    "persist": 0,
    "prefetch": 0,
    "order": 0,
}


def _vectors(problem: Problem, vec: int) -> int:
    return problem.n // vec


def _per_split_vectors(problem: Problem, config: Mapping[str, int]) -> int:
    # Mirrors the kernel: each split gets a whole number of LANES-wide steps.
    nvec = _vectors(problem, config["vec"])
    per = math.ceil(nvec / config["split"])
    return math.ceil(per / config["lanes"]) * config["lanes"]


def _cluster_sum_bytes(config: Mapping[str, int]) -> int:
    """Static shared memory of a cluster's row sums: one float per row of the block's tile."""
    return (config["block"] // config["lanes"]) * config["rows"] * 4 if config["cluster"] > 1 else 0


# Tilings measured first on every problem (those the problem allows, with 16-byte loads), so that a
# sweep starts from the known good regions instead of finding them by chance: short rows (a few
# lanes and many rows per group), long rows (warps or blocks per row), and short wide matrices
# (split-K, reduced in a cluster or through the workspace). They come from the H200 sweeps and
# scripts/try_configs.py runs (131072x256 float16: 18.8 us with the first, 23.9 us with what an
# 80-trial sweep had found; 256x131072 float16: 19.6 us with the last, 20.5 us with the sweep's).
_SEED_TILINGS: tuple[dict[str, int], ...] = (
    dict(block=256, lanes=8, unroll=2, rows=4, policy=2, persist=2),
    dict(block=512, lanes=16, unroll=1, rows=4, policy=2, persist=2),
    dict(block=256, lanes=8, unroll=1, rows=8, policy=2, persist=2),
    # Found by a 100-trial sweep without patience on the H200 (docs/findings.md, sweep patience):
    # bfloat16 131072x256 in 16.13 us against 18.08 for the pick before; float16 had not been swept with it.
    dict(block=512, lanes=8, unroll=4, rows=2, policy=1, persist=1, prefetch=1, order=1),
    dict(block=128, lanes=128, unroll=4, rows=2, policy=1, persist=0),
    dict(block=256, lanes=64, unroll=2, rows=2, policy=1, persist=0),
    dict(block=256, lanes=256, unroll=2, rows=4, policy=1, persist=0),
    dict(block=128, lanes=64, unroll=4, rows=1, policy=1, persist=0, split=8, cluster=8),
    dict(block=64, lanes=64, unroll=4, rows=1, policy=1, persist=4, split=16),
    dict(block=64, lanes=64, unroll=4, rows=2, policy=1, persist=4, split=16),
    # A block per row and no split at all: on the H200, 256x131072 float16 in 17.65-17.85 us against
    # 19.58 with the split-K pick the sweeps had found; its 256 blocks of 512 threads run two to an SM
    # in one wave, and it ends with a block reduction, not a hand-off between blocks.
    dict(block=512, lanes=512, unroll=2, rows=1, policy=1, persist=0),
    # The same with 4 steps a thread and every load of a step issued first, found by a grid around the
    # pick on the H200: 17.71 us against 17.89 for the above in the same run; the 16-bit sweeps had not
    # tried it.
    dict(block=512, lanes=512, unroll=4, rows=1, policy=1, persist=0, order=1),
    # Small matrices (experiments/gemv_pdl.cu on the H200): with L2 prefetches before the wait for the
    # kernel before, float16 1024^2 took 2.51-2.68 us against 2.56-3.07 without them.
    dict(block=128, lanes=128, unroll=4, rows=2, policy=1, persist=0, prefetch=1),
    dict(block=64, lanes=64, unroll=2, rows=1, policy=1, persist=0, prefetch=1),
    # Half-block rows (a grid over block, lanes, unroll and rows on the H100): float32 1024^2 in
    # 2.92 us against 3.13-3.17 for the picks a 150-trial sweep had kept.
    dict(block=512, lanes=256, unroll=4, rows=2, policy=1, persist=0, prefetch=1),
    # Every load of a step before its FMAs, on the H200: float16 4096^2 in 9.56 us against 9.81,
    # 6144x4096 13.28 against 13.62, with the tiling most shapes pick.
    dict(block=128, lanes=128, unroll=4, rows=2, policy=1, persist=0, order=1),
    # 256 bytes of A a thread per step, every load issued first (a grid on the H200): float16
    # 4096x8192 in 16.76 us and 8192^2 in 31.32 against 17.08 and 31.61 for the picks shipped before;
    # 4096^2 and 6144x4096 with 64 lanes a row, 0.4-0.5% faster.
    dict(block=128, lanes=128, unroll=8, rows=2, policy=1, persist=0, order=1),
    dict(block=128, lanes=64, unroll=8, rows=2, policy=1, persist=0, order=1),
)


class Gemv(Op):
    """y = alpha*A*x + beta*y with A row-major M x N, one kernel template (kernels/gemv/gemv.cu); a
    problem with `trans` (y = Aᵀx) is served by the transposed variant (transposed.py).

    The kernels take A's row stride lda (in elements) after M and N, so a view of some columns of a
    wider matrix runs in place. The space is that of contiguous rows (lda == N, what the tuner
    measures); the launcher runs a config's scalar-load fit where lda breaks 16-byte alignment."""

    name = NAME
    transposable = True
    # A, x, y, M, N, lda, alpha, beta, partial sums, counters
    arg_types = "PPPiiiffPP"
    # Every instance runs griddepcontrol.wait before reading anything (gemv.cu: programmatic_start).
    programmatic_launch = True
    shapes_file = Path(__file__).with_name("shapes.txt")
    input_names = ("A", "x")
    output_name = "y"
    torch_schema = "(Tensor A, Tensor x, float alpha=1.0, bool trans=False) -> Tensor"

    def bind(self, arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound | Reroute:
        return call.bind(arrays, out, options)

    def torch_fake(self, *args: Any) -> Any:
        return call.torch_fake(*args)

    def serving(self, problem: Problem) -> Op:
        return TRANSPOSED if problem.trans else self

    def kernel_file(self, problem: Problem) -> str:
        return KERNEL_FILE

    def default_config(self, problem: Problem) -> Config:
        return dict(DEFAULT_CONFIG)

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        """The tiling family a config belongs to (for people: the kernel is one template)."""
        lanes, block = config["lanes"], config["block"]
        if lanes == 1:
            return "thread_per_row"
        if lanes < 32:
            return "subwarp_per_row"
        if lanes == 32:
            return "warp_per_row"
        return "block_per_row" if lanes == block else "multiwarp_per_row"

    def space(self, problem: Problem) -> Space:
        itemsize = ITEMSIZE[problem.dtype]
        vecs = tuple(v for v in _VECS if v * itemsize <= 16 and (v == 1 or problem.n % v == 0))

        def constraint(c: Mapping[str, int]) -> str | None:
            if c["lanes"] > c["block"]:
                return f"lanes={c['lanes']} exceeds block={c['block']}"
            if c["vec"] * itemsize * c["unroll"] * c["rows"] > MAX_BYTES_IN_FLIGHT:
                return f"more than {MAX_BYTES_IN_FLIGHT} bytes of A in flight per thread (runs out of registers)"
            if c["split"] > 1 and c["split"] * c["lanes"] > _vectors(problem, c["vec"]):
                return f"split={c['split']} leaves splits without a full step of {c['lanes']} lanes"
            if c["cluster"] > 1 and c["split"] != c["cluster"]:
                return f"cluster={c['cluster']} reduces exactly that many splits, not split={c['split']}"
            x_bytes = _per_split_vectors(problem, c) * c["vec"] * itemsize if c["x_smem"] else 0
            if x_bytes + _cluster_sum_bytes(c) > MAX_SHARED_BYTES:
                return "x slice and cluster sums do not fit 48 KiB of shared memory"
            if c["prefetch"] == 1 and c["vec"] * itemsize != 16:
                return "prefetch=1 needs 16-byte vectors (bulk L2 prefetches of whole row segments)"
            if c["order"] and c["unroll"] * c["rows"] == 1:
                return "order=1 orders the loads of a step: it needs unroll or rows above 1"
            return None

        return Space(
            params=(
                Param("block", _BLOCKS),
                Param("lanes", _LANES),
                Param("vec", vecs),
                Param("unroll", (1, 2, 4, 8)),
                Param("rows", _ROWS),
                Param("x_smem", (0, 1)),
                Param("policy", (0, 1, 2)),
                Param("cluster", cluster_choices()),
                Param("split", _SPLITS, compiled=False),
                Param("persist", (0, 1, 2, 4), compiled=False),
                # L2 prefetches before the wait for the kernel before (gemv.cu: programmatic_start):
                # none, the block's whole first tile, or each thread's first 1 or 2 vectors of each row.
                Param("prefetch", (0, 1, 2, 3), categorical=True),
                Param("order", (0, 1)),
            ),
            constraint=constraint,
        )

    def seed_configs(self, problem: Problem) -> list[Config]:
        """The seeds this problem allows, with 16-byte loads (or the widest its N divides)."""
        check = self.space(problem).check
        vec = max(v for v in _VECS if v * ITEMSIZE[problem.dtype] <= 16 and problem.n % v == 0)
        seeds = []
        for tiling in _SEED_TILINGS:
            config = {**DEFAULT_CONFIG, "vec": vec, **tiling}
            if check(config) is None and config not in seeds:
                seeds.append(config)
        return seeds

    def leader_variants(self, problem: Problem, config: Mapping[str, int]) -> list[Config]:
        """Configs a sweep measures early beside a leader of the problem: its tiling with every other
        prefetch the space allows. How much of the matrix to prefetch before the wait barely depends on
        the tiling, and a sampler reaches the right value late: under their shipped tilings, one vector
        a row took 4-6% off most shapes of 32 MB and more on the H200 (float16 4096^2: 9.33 -> 8.83 us)."""
        problem_space = self.space(problem)
        others = [value for value in problem_space.choices()["prefetch"] if value != config["prefetch"]]
        variants = [{**config, "prefetch": value} for value in others]
        return [variant for variant in variants if problem_space.check(variant) is None]

    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str:
        c = config
        return (
            f"gemv_{problem.dtype}_b{c['block']}_l{c['lanes']}_v{c['vec']}_u{c['unroll']}"
            f"_r{c['rows']}_s{c['x_smem']}_p{c['policy']}_c{c['cluster']}_f{c['prefetch']}_o{c['order']}"
        )

    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        """A translation unit with one extern "C" instance of the template (a stable, unmangled name)."""
        c = config
        t = CUDA_TYPE[problem.dtype]
        template_args = (
            f"{t}, {c['block']}, {c['lanes']}, {c['vec']}, {c['unroll']}, {c['rows']}, {c['x_smem']}, {c['policy']}, "
            f"{c['cluster']}, {c['order']}"
        )
        start_args = f"{t}, {c['block']}, {c['lanes']}, {c['vec']}, {c['rows']}, {c['prefetch']}"
        return (
            f'#include "{KERNEL_FILE}"\n'
            f'extern "C" __global__ void {cluster_declaration(c["cluster"])}__launch_bounds__({c["block"]})\n'
            f"{self.kernel_name(problem, config)}(const {t}* A, const {t}* x, {t}* y, int M, int N, int lda,\n"
            f"    float alpha, float beta, float* partial, unsigned int* counters) {{\n"
            f"  at_gemv::programmatic_start<{start_args}>(A, M, N, lda);\n"
            f"  at_gemv::gemv_body<{template_args}>(A, x, y, M, N, lda, alpha, beta, partial, counters);\n"
            f"}}\n"
        )

    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch:
        c = config
        rows_per_block = (c["block"] // c["lanes"]) * c["rows"]
        tiles = math.ceil(problem.m / rows_per_block)
        grid_x = tiles if c["persist"] == 0 else min(tiles, c["persist"] * sm_count)
        shared = _per_split_vectors(problem, c) * c["vec"] * ITEMSIZE[problem.dtype] if c["x_smem"] else 0
        split = c["split"]
        global_split = split > 1 and c["cluster"] == 1  # a cluster adds its splits in shared memory
        return Launch(
            grid=(grid_x, split, 1),
            block=(c["block"], 1, 1),
            shared_bytes=shared,
            workspace_floats=split * problem.m if global_split else 0,
            counters=tiles if global_split else 0,
        )

    def thread_steps(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> int | None:
        """A persistent grid's passes over its tiles of rows times the unrolled steps of each thread's
        share of a row: a grid capped at persist blocks an SM walks 100003 rows in two passes where it
        walked 65536 in one (float16 100003x3 on the H200: 65536x3's leader ran 2.33 us there against
        1.50 on its own shape). Known where the grid runs in one wave: persistent, its blocks resident
        at once, or no more blocks than SMs."""
        c = config
        launch = self.launch(problem, c, sm_count)
        tiles = math.ceil(problem.m / ((c["block"] // c["lanes"]) * c["rows"]))
        blocks = launch.grid[0] * launch.grid[1]
        resident = c["persist"] * sm_count if c["persist"] and c["persist"] * c["block"] <= MAX_THREADS_PER_SM else 0
        if blocks > max(resident, sm_count):
            return None
        passes = math.ceil(tiles / launch.grid[0])
        per_lane = math.ceil(_per_split_vectors(problem, c) / c["lanes"])
        return passes * math.ceil(per_lane / c["unroll"])

    def operands(self, problem: Problem) -> Operands:
        """A and x contiguous (lda == N: what the tuner measures)."""
        return Operands(
            inputs=(problem.m * problem.n, problem.n), output=problem.m, sizes=self.strided_sizes(problem, (problem.n,))
        )

    def strided_sizes(self, problem: Problem, leading: tuple[int, ...]) -> tuple[int, ...]:
        """M, N and A's row stride (leading = (lda,))."""
        (lda,) = leading
        if lda < problem.n:
            raise AutotuneError(f"lda={lda} is below N={problem.n}: rows of A would overlap")
        return (problem.m, problem.n, lda)

    def device_reference(self, problem: Problem) -> DeviceReference:
        # kernels/measure/support.cu: at_reference, a warp per row of A in blocks of 256 threads,
        # called with the kernels' sizes (M, N, lda)
        grid = (math.ceil(problem.m * 32 / 256), 1, 1)
        return DeviceReference(f"at_reference_{problem.dtype}", "PPPPiii", grid, (256, 1, 1))

    def position(self, problem: Problem, index: int) -> str:
        return f"y[{index}]"

    def bytes_moved(self, problem: Problem) -> int:
        """The fewest bytes a GEMV must move: A and x read once, y written once."""
        item = ITEMSIZE[problem.dtype]
        return (problem.m * problem.n + problem.n + problem.m) * item

    def flops(self, problem: Problem) -> int:
        return 2 * problem.m * problem.n


OP = Gemv()
