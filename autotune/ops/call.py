"""What an op's call side hands the runtime: a call's operands bound to a problem (Bound), or the
other call that computes it (Reroute). The arguments one kernel launch takes (KernelCall) are the GPU
layer's (autotune/gpu/geometry.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.core.arrays import DeviceArray, contiguous
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem

# What a weight-only op's activations may be (x, its scales and out share the dtype).
ACTIVATIONS = ("float16", "bfloat16")

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


def activation_rows(x: DeviceArray, what: str) -> tuple[int, int]:
    """(M, K) of a weight-only product's x: a contiguous float16 or bfloat16 array (..., K), its leading
    dimensions M rows (`what` names the weight in the message: "int4")."""
    if x.dtype not in ACTIVATIONS:
        raise AutotuneError(f"{what} weights take float16 or bfloat16 activations, got x of {x.dtype}")
    if not x.shape or not contiguous(x):
        raise AutotuneError(f"x must be a contiguous array (..., K), got shape {x.shape}")
    return math.prod(x.shape[:-1]), x.shape[-1]


def weight_only_out(x: DeviceArray, out: DeviceArray | None, n: int) -> tuple[int, ...]:
    """The shape (..., N) of a weight-only product's output for x (..., K), `out` checked against it
    where given (contiguous, in x's dtype)."""
    out_shape = (*x.shape[:-1], n)
    if out is not None and (out.shape != out_shape or out.dtype != x.dtype or not contiguous(out)):
        got = f"{out.dtype} {out.shape}"
        raise AutotuneError(f"out must be a contiguous {x.dtype} array of shape {out_shape}, got {got}")
    return out_shape
