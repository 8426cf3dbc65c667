"""What an op's call side hands the runtime: a call's operands bound to a problem (Bound), or the
other call that computes it (Reroute). The arguments one kernel launch takes (KernelCall) are the GPU
layer's (autotune/gpu/geometry.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.core.problem import Problem

# The leading dimensions of a call whose matrices have gaps between their rows, in the op's order
# (GEMV: (lda,); GEMM: (lda, ldb, ldc)); None where every matrix is contiguous.
Leading = tuple[int, ...] | None


@dataclass(frozen=True)
class Bound:
    """A call's operands as the kernels run them: the problem, the shape of a new output and the
    leading dimensions where a matrix has gaps between its rows."""

    problem: Problem
    out_shape: tuple[int, ...]
    leading: Leading = None


@dataclass(frozen=True)
class Reroute:
    """A call another call computes: `op` on `arrays` (the caller's objects, in that op's order),
    with the inputs at `copy_inputs` copied contiguous first and, with `copy_out`, the result
    computed into a contiguous copy of out and copied back (strided vectors, BLAS's incx/incy)."""

    op: str
    arrays: tuple[Any, ...]
    options: tuple[Any, ...] = ()
    copy_inputs: tuple[int, ...] = ()
    copy_out: bool = False
