"""The interface every operation implements: what the tuner, the worker, the launcher, the selector,
the CLI and the records know of an op. Each op lives in one folder, `autotune/ops/<op>/`, with its
kernels in `kernels/<op>/`, and registers one instance (autotune/ops/__init__.py: register).

A kernel of any op takes its arrays and scalars in one order, which the worker and the launcher
rely on: the input arrays, the output array, the integer sizes (Operands.sizes), alpha and beta as
floats, then the split-K workspace and arrival counters (null where the kernel needs none):

    out = alpha * f(inputs) + beta * out
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from autotune.core.arrays import DeviceArray
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import DTYPES, Problem
from autotune.core.space import Config, Space
from autotune.gpu.geometry import KernelCall, Launch
from autotune.ops.call import Bound, Leading, Reroute


@dataclass(frozen=True)
class Operands:
    """The arrays one kernel call reads and writes, in argument order, and its integer arguments."""

    inputs: tuple[int, ...]  # the element count of each input array
    output: int  # the element count of the output array
    sizes: tuple[int, ...]  # the integer arguments after the arrays


@dataclass(frozen=True)
class DeviceReference:
    """A float64 reference computed on the GPU by a kernel of kernels/measure/support.cu, or of
    `source`, called as (inputs..., reference, |reference|, sizes...) with the first `sizes` of the
    operands' integer sizes. Ops whose inputs are too large to copy back to the host every trial (a
    GEMM's) give one; others compute the reference on the host."""

    kernel: str
    arg_types: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    # A file under kernels/ ("qgemm/reference.cu") of extern "C" kernels, compiled as support.cu
    # is; None: kernels/measure/support.cu.
    source: str | None = None
    sizes: int = 3  # how many of Operands.sizes the kernel takes: (M, N, lda) or (M, N, K)


class Op(ABC):
    """One operation (GEMV, GEMM, ...): its tuning space, kernel sources, launch geometry, operands and
    float64 reference, for every problem it serves."""

    name: ClassVar[str]  # the op in a Problem and in the database: "gemv"
    sizes: ClassVar[tuple[str, ...]] = ("M", "N")  # the sizes a problem of this op gives
    transposable: ClassVar[bool] = False  # whether a problem may ask for y = Aᵀx
    variants: ClassVar[tuple[str, ...]] = ()  # the forms a problem may name besides the plain one (""): "g128"
    dtypes: ClassVar[tuple[str, ...]] = DTYPES  # the output dtypes its kernels compute in

    def input_fault(self, problem: Problem) -> str | None:
        """Why this op's kernels cannot read inputs of the dtypes `problem.inputs` names, or None. By
        default every input has the output's dtype; an op whose inputs differ (an int4 weight with
        float16 scales) says which combinations it takes."""
        if problem.inputs and set(problem.inputs) != {problem.dtype}:
            return f"{self.name} reads every input in its dtype ({problem.dtype}), not {','.join(problem.inputs)}"
        return None

    compute_bound: ClassVar[bool] = False  # rates in TFLOP/s (else GB/s)
    arg_types: ClassVar[str]  # the kernel's arguments in PyCUDA's prepare() notation
    # Every kernel waits for the kernel before it in the stream (griddepcontrol.wait) before reading
    # anything, so launchers may use programmatic dependent launch on sm_90+ (waits_for_prior_grid).
    programmatic_launch: ClassVar[bool] = False
    shapes_file: ClassVar[Path | None] = None  # the standard shapes `autotune sweep` tunes by default
    # What a Python call passes (Runtime.call): its input arrays' names, in the call's order, and
    # the output's (error messages name them). A problem's `inputs` names each input's dtype.
    input_names: ClassVar[tuple[str, ...]] = ("A", "B")
    output_name: ClassVar[str] = "out"
    # Inputs a call may pass as None (an asymmetric weight's zeros): the kernel gets a null pointer
    # and bind() None in the array's place. Runtime.call's two-input short path assumes both given.
    optional_inputs: ClassVar[tuple[str, ...]] = ()

    def complete(self, problem: Problem) -> Problem:
        """The problem with what the op implies where it names nothing: by default itself (an op whose
        plain form is a low-bit format fills in that format's input dtypes and variant)."""
        return problem

    def estimate_from(self, problem: Problem) -> tuple[Problem, ...]:
        """Problems whose measured config the selector hands this one, in order, where nothing of its
        own kind (its dtype, inputs and variant) is tuned on the GPU: the same kernels reading the same
        bytes (an int4 weight's other group size or activation dtype). None by default."""
        return ()

    def carried_over(self, problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
        """A config measured for one of `estimate_from`'s problems, as `problem`'s space names it (a
        parameter only one of the two spaces has). The config itself by default."""
        return dict(config)

    def stored_config(self, problem: Problem, config: Mapping[str, Any]) -> dict[str, Any]:
        """A config as a records file written before a parameter joined the problem's space holds it,
        named as the space names it now (the value that parameter's kernels had before it). The
        config itself by default; database rows are moved by a migration instead (db/migrations)."""
        return dict(config)

    def serving(self, problem: Problem) -> Op:
        """The op whose kernels run `problem`: this one, or a variant (the transposed GEMV's)."""
        return self

    def for_unaligned(self, problem: Problem) -> Op:
        """The op that runs `problem` on arrays that are not 16-byte aligned (its scalar-load configs)."""
        return self

    def loads_as_aligned(self, problem: Problem) -> bool:
        """Whether the kernels of `problem` choose their loads from the arrays' alignment and row
        stride themselves, so that any config runs unaligned arrays as it is (no scalar-load refit)."""
        return False

    # -- what is tuned ------------------------------------------------------------------------

    @abstractmethod
    def space(self, problem: Problem) -> Space: ...

    @abstractmethod
    def default_config(self, problem: Problem) -> Config:
        """A config valid for every problem of the op: what runs before anything is tuned."""

    def seed_configs(self, problem: Problem) -> list[Config]:
        """Configs known to be good, measured before the sampler's own picks."""
        return []

    def leader_variants(self, problem: Problem, config: Mapping[str, int]) -> list[Config]:
        """Configs a sweep measures early beside a leader of the problem."""
        return []

    def family(self, problem: Problem, config: Mapping[str, int]) -> str:
        """The name of the kernel family that runs `config` (for people reading results)."""
        return self.name

    # -- how it is built and launched ---------------------------------------------------------

    @abstractmethod
    def kernel_file(self, problem: Problem) -> str:
        """The template source under kernels/ (its hash marks measurements of older sources stale)."""

    @abstractmethod
    def kernel_name(self, problem: Problem, config: Mapping[str, int]) -> str: ...

    @abstractmethod
    def kernel_source(self, problem: Problem, config: Mapping[str, int]) -> str:
        """A translation unit with one extern "C" instance (a stable, unmangled name)."""

    def compile_arch(self, problem: Problem, arch: str, config: Mapping[str, int] | None = None) -> str:
        """nvcc's -arch for this problem's kernels (or `config`'s, where an op's configs span kernels
        of different architectures) on a GPU of `arch` ("sm_90"): the GPU's own."""
        return arch

    @abstractmethod
    def launch(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> Launch: ...

    def registers(self, problem: Problem, config: Mapping[str, int]) -> float | None:
        """Registers per thread of `config`'s kernel as its family estimates them (None where it does
        not): with the threads per block, how many blocks an SM holds at once, so how many waves a
        grid takes (the cost model, autotune/select/cost.py)."""
        return None

    @abstractmethod
    def operands(self, problem: Problem) -> Operands: ...

    def strided_sizes(self, problem: Problem, leading: tuple[int, ...]) -> tuple[int, ...]:
        """The integer arguments of a call whose matrices have their rows these many elements apart
        (`leading`: GEMV (lda,), GEMM (lda, ldb, ldc)) instead of contiguous (operands().sizes): given
        by ops whose kernels take leading dimensions, so that a view of some of a matrix's columns
        runs in place."""
        raise AutotuneError(f"the kernels of {problem} read A's rows contiguous only (copy it, e.g. A.contiguous())")

    # The op as a torch.library custom op (autotune/runtime/torch_ops.py registers each op that has
    # one): its schema without the name, the input tensors first, then alpha, then the op's options
    # in order ("(Tensor A, Tensor x, float alpha=1.0, bool trans=False) -> Tensor"); None: not one.
    torch_schema: ClassVar[str | None] = None

    def torch_fake(self, *args: Any) -> Any:
        """The torch op's fake (meta) implementation: a new tensor of the output's shape, so that
        torch.compile traces through the op (arguments as in torch_schema)."""
        raise NotImplementedError(f"{self.name} has no torch op")

    def input_order(self, problem: Problem) -> tuple[int, ...]:
        """Which call input each of the kernel's input arrays is: the call's order unless the
        kernels take them otherwise."""
        return tuple(range(len(self.input_names)))

    # -- how it is called from Python (Runtime.call) ------------------------------------------

    def bind(self, arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound | Reroute:
        """Check a call's arrays (in input_names' order; None for an optional input not given) and
        `out`, and bind them to a problem: one line errors for shapes, layouts and dtypes the kernels
        cannot run. `options`: the op's own call options (the GEMV's (trans,))."""
        raise AutotuneError(f"{self.name} cannot be called from Python: it binds no arrays")

    def waits_for_prior_grid(self, problem: Problem) -> bool:
        """Whether the kernels serving `problem` wait for the kernel before them in the stream before
        reading anything, so that every launcher (worker, runtime, bundle) may start them with
        programmatic dependent launch on sm_90+: `programmatic_launch`, unless the op routes its
        problems to families that differ in this (the transposed GEMV)."""
        return self.programmatic_launch

    def plan(self, problem: Problem, config: Mapping[str, int], gpu: GpuInfo, leading: Leading = None) -> KernelCall:
        """What a launch of `config` on `gpu` takes besides its addresses (this op serves `problem`:
        see serving), for operands with these leading dimensions (None: contiguous)."""
        sizes = self.operands(problem).sizes if leading is None else self.strided_sizes(problem, leading)
        return KernelCall(
            self.launch(problem, config, gpu.sm_count),
            sizes,
            self.arg_types,
            self.input_order(problem),
            self.waits_for_prior_grid(problem),
        )

    # -- how it is checked and rated ----------------------------------------------------------

    def device_reference(self, problem: Problem) -> DeviceReference | None:
        """The GPU kernel that computes the float64 reference, or None to use host_reference."""
        return None

    def host_reference(self, problem: Problem, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """float64 f(inputs) and the same with every term's magnitude (the scale a float32
        accumulation error is measured against), from the inputs as float64 arrays: each float
        input decoded from its own dtype (problem.input_dtypes); a packed integer input (int4,
        int8, uint8) comes as its raw bytes, a flat uint8 array (int4: two elements a byte,
        packed as the op's kernels read them)."""
        raise NotImplementedError(f"{self.name} has neither a device nor a host reference")

    def accumulation_tolerance(self, problem: Problem) -> float:
        """The error allowed beside the output's own rounding, as a fraction of the sum of the terms'
        magnitudes (the float64 |reference|). By default float accumulation of exact products: far
        above what 2^24 terms accumulate in practice, far below a dropped or doubled block of terms."""
        return 2.0**-12

    def position(self, problem: Problem, index: int) -> str:
        """Where output element `index` sits, for error messages."""
        return f"out[{index}]"

    @abstractmethod
    def bytes_moved(self, problem: Problem) -> int:
        """The fewest bytes a kernel must move (reads and writes once each)."""

    def tiling_for(self, tuned: Problem, problem: Problem, config: Mapping[str, int]) -> Config:
        """`config`, tuned on `tuned`, with the parameters that size a tile to the shape set so that it
        tiles `problem` as it tiled `tuned` (the skinny GEMM's rows of A per thread: as many tiles of
        M). The cost model takes a stored time as evidence for the config so carried over."""
        return dict(config)

    def thread_steps(self, problem: Problem, config: Mapping[str, int], sm_count: int) -> int | None:
        """The steps each thread of `config`'s grid takes one after the other on `problem` (a step: one
        unrolled load of its rows), where the op can count them; None where it cannot (its blocks' waves
        unknown). The cost model scales a config's time by them where they grow faster than the bytes."""
        return None

    def bytes_streamed(self, problem: Problem, config: Mapping[str, int]) -> int:
        """The bytes `config`'s kernel streams through the memory system: bytes_moved, unless its
        blocks read an operand more than once (the skinny GEMM reads B once per tile of M rows). The
        cost model scales a config's roofline by it (autotune/select/cost.py)."""
        return self.bytes_moved(problem)

    @abstractmethod
    def flops(self, problem: Problem) -> int: ...

    def rate(self, problem: Problem, time_us: float) -> str:
        """The throughput of one call taking `time_us`: TFLOP/s for compute-bound ops, else GB/s."""
        if self.compute_bound:
            return f"{self.flops(problem) / time_us / 1e6:.1f} TFLOP/s"
        return f"{self.bytes_moved(problem) / time_us / 1e3:.0f} GB/s"
