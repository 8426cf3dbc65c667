"""A GEMV called from Python: the operand checks that bind (A, x, out) to a problem, and the calls
that compute it otherwise (a batch of vectors is a GEMM; strided vectors go through copies)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.arrays import (
    MAX_LEADING,
    DeviceArray,
    contiguous,
    leading_dimension,
    row_vector,
    strided_vector,
    transposed_contiguous,
)
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem, check_dim
from autotune.ops.call import Bound, Reroute


@dataclass(frozen=True)
class GemvLayout:
    """A GEMV as the kernels run it: the row-major m x n matrix that A's memory holds, with its rows
    lda >= n elements apart (n where they are contiguous), whether the product is with its
    transpose, and the shape of y."""

    m: int
    n: int
    trans: bool
    out_shape: tuple[int, ...]
    lda: int

    @property
    def strided(self) -> bool:
        """Whether A's rows have gaps between them (a view of some columns of a wider matrix)."""
        return self.lda != self.n


def bind(arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound | Reroute:
    """y = A x (with options (trans,), y = Aᵀ x) bound to its problem, or the call that computes it:
    a batch of B vectors as the rows of x (B x N) is Y = X Aᵀ (X A with trans), a GEMM whose B
    operand is A itself, never a copy of A; a strided x or y (BLAS's incx, incy != 1) is copied."""
    a, x = arrays
    (trans,) = options or (False,)
    if len(x.shape) == 2 and x.shape[0] > 1 and x.shape[1] > 1 and len(a.shape) == 2:
        return Reroute("gemm", (x.obj, a.obj if trans else a.obj.T))
    if strided_vector(x):
        return Reroute("gemv", (a.obj, x.obj), (trans,), copy_inputs=(1,))
    if out is not None and strided_vector(out):
        return Reroute("gemv", (a.obj, x.obj), (trans,), copy_out=True)
    layout = check_operands(a, x, out, trans)
    problem = Problem("gemv", a.dtype, check_dim("M", layout.m), check_dim("N", layout.n), trans=layout.trans)
    return Bound(problem, layout.out_shape, (layout.lda,) if layout.strided else None)


def check_operands(a: DeviceArray, x: DeviceArray, out: DeviceArray | None, trans: bool = False) -> GemvLayout:
    """The layout of y = A x (with `trans`, y = Aᵀ x): A row-major, or a transposed view of a
    row-major matrix, which is the same product with the other kernel (A.t() @ x = Aᵀx). Both
    kernels take A's row stride lda, so A may have gaps between its rows: a slice of columns such as
    A[:, :k] or A[:, 1:] (or its transpose) runs in place. x and y are vectors, 1 x length /
    length x 1 matrices, or rows with more leading ones (1 x 1 x length)."""
    if len(a.shape) != 2:
        raise AutotuneError(f"A must be a 2-D matrix, got shape {a.shape}")
    rows, cols = a.shape
    if rows == 0 or cols == 0:
        empty = "rows" if rows == 0 else "columns"
        raise AutotuneError(f"A has no {empty} (shape {a.shape}): a GEMV needs M >= 1 and N >= 1")
    m, n, runs_trans, lda = _matrix_layout(a, trans)
    if lda > MAX_LEADING:
        raise AutotuneError(
            f"A's rows lie {lda} elements apart, more than the kernels' 32-bit lda holds (copy it, e.g. A.contiguous())"
        )
    x_len, y_len = (rows, cols) if trans else (cols, rows)
    what = f"A{'ᵀ' if trans else ''}x with A {rows}x{cols}"
    x_row = row_vector(x.shape, x_len)
    if not (x.shape in ((x_len,), (x_len, 1)) or x_row) or not contiguous(x):
        raise AutotuneError(f"x must be a contiguous vector of length {x_len} ({what}), got shape {x.shape}")
    if x.dtype != a.dtype:
        raise AutotuneError(f"A and x must share a dtype, got {a.dtype} and {x.dtype}")
    if out is not None:
        if not (out.shape in ((y_len,), (y_len, 1)) or row_vector(out.shape, y_len)) or not contiguous(out):
            raise AutotuneError(f"out must be a contiguous vector of length {y_len} ({what}), got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
    # A row x gives a row y of the same leading ones: a decode step's (1, 1, K) x its (1, 1, N) y,
    # with no reshape on either side (a torch view costs host time on every eager call).
    out_shape = (*x.shape[:-1], y_len) if x_row and x_len != 1 else (y_len,)
    return GemvLayout(m, n, runs_trans, out_shape, lda)


def _matrix_layout(a: DeviceArray, trans: bool) -> tuple[int, int, bool, int]:
    """(m, n, trans, lda) of the row-major matrix A's memory holds, as the kernels run it."""
    rows, cols = a.shape
    strides = a.strides or (cols, 1)
    if contiguous(a):
        return rows, cols, trans, cols
    if transposed_contiguous(a):
        return cols, rows, not trans, rows  # A's memory is the row-major cols x rows matrix
    if (direct := leading_dimension(rows, cols, strides)) is not None:
        return rows, cols, trans, direct
    if (flipped := leading_dimension(cols, rows, strides[::-1])) is not None:
        return cols, rows, not trans, flipped  # A = Wᵀ with W row-major, strided
    raise AutotuneError(
        f"A (shape {a.shape}, strides {a.strides}) must be row-major with the elements of a row "
        "adjacent (rows may lie further apart, as in a slice of columns) or the transpose of such a "
        "matrix (copy it, e.g. A.contiguous())"
    )


def torch_fake(A: Any, x: Any, alpha: float = 1.0, trans: bool = False) -> Any:
    """A new y as autotune.gemv shapes it: a 1 x length x gives a 1 x length y."""
    import torch

    torch._check(A.dim() == 2, lambda: "A must be a 2-D matrix")
    rows, cols = A.shape
    x_len, y_len = (rows, cols) if trans else (cols, rows)
    torch._check(x.numel() == x_len, lambda: "x's length must match A")
    row = x.dim() == 2 and x.shape[0] == 1 and x_len != 1
    return A.new_empty((1, y_len) if row else (y_len,))
