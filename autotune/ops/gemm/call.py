"""A GEMM called from Python: the operand checks that bind (A, B, out) to a problem, B stored K x N
or as the transpose of an N x K matrix (an nn.Linear weight's W.t()), rows of any matrix possibly
further apart than their length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.arrays import MAX_LEADING, DeviceArray, leading_dimension, transposed_contiguous
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem, check_dim
from autotune.ops.call import Bound


@dataclass(frozen=True)
class GemmLayout:
    """A GEMM as the kernels run it: C (m x n) = A (m x k) B, B stored k x n or, with `b_nk`, n x k
    (the caller passed the transpose of a row-major n x k matrix, W.t() of an nn.Linear weight),
    and each matrix's row stride in elements."""

    m: int
    n: int
    k: int
    b_nk: bool
    lda: int
    ldb: int
    ldc: int

    @property
    def leading(self) -> tuple[int, int, int] | None:
        """(lda, ldb, ldc) where some matrix has gaps between its rows, else None (all contiguous)."""
        contiguous_rows = (self.k, self.k if self.b_nk else self.n, self.n)
        lds = (self.lda, self.ldb, self.ldc)
        return None if lds == contiguous_rows else lds


def bind(arrays: Sequence[DeviceArray], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
    """C = A B bound to its problem (a `trans` problem where B is the transpose of an N x K matrix)."""
    a, b = arrays
    layout = check_operands(a, b, out)
    m, n, k = check_dim("M", layout.m), check_dim("N", layout.n), check_dim("K", layout.k)
    return Bound(Problem("gemm", a.dtype, m, n, k, layout.b_nk), (m, n), layout.leading)


def _row_stride(array: DeviceArray, name: str, what: str) -> int:
    """The row stride of a matrix the kernels read row-major (rows may lie further apart)."""
    rows, cols = array.shape
    stride = leading_dimension(rows, cols, array.strides or (cols, 1))
    if stride is None:
        view = "a transposed view" if transposed_contiguous(array) else "not row-major"
        raise AutotuneError(
            f"{name} (shape {array.shape}, strides {array.strides}) is {view}: {what} "
            f"(copy it, e.g. {name}.contiguous())"
        )
    if stride > MAX_LEADING:
        raise AutotuneError(
            f"{name}'s rows lie {stride} elements apart, more than the kernels' 32-bit leading dimension holds "
            f"(copy it, e.g. {name}.contiguous())"
        )
    return stride


def check_operands(a: DeviceArray, b: DeviceArray, out: DeviceArray | None) -> GemmLayout:
    """The layout of C = A B: A row-major (its rows may lie further apart, as in a slice of columns),
    B row-major K x N or the transpose of a row-major N x K matrix (W.t() of an nn.Linear weight,
    run by the kernels for that layout, never copied), C row-major."""
    for name, array in (("A", a), ("B", b)):
        if len(array.shape) != 2:
            raise AutotuneError(f"{name} must be a 2-D matrix, got shape {array.shape}")
        if 0 in array.shape:
            empty = "rows" if array.shape[0] == 0 else "columns"
            raise AutotuneError(f"{name} has no {empty} (shape {array.shape}): a GEMM needs M, N and K >= 1")
    (m, k), (k_b, n) = a.shape, b.shape
    if k_b != k:
        raise AutotuneError(f"A is {m}x{k} and B is {k_b}x{n}: A's columns must equal B's rows")
    if b.dtype != a.dtype:
        raise AutotuneError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    lda = _row_stride(a, "A", "the GEMM kernels read A row-major")
    ldb, b_nk = _b_layout(b, k, n)
    ldc = n
    if out is not None:
        if out.shape != (m, n):
            raise AutotuneError(f"out must be a {m}x{n} matrix, got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
        ldc = _row_stride(out, "out", "the GEMM kernels write C row-major")
    return GemmLayout(m, n, k, b_nk, lda, ldb, ldc)


def _b_layout(b: DeviceArray, k: int, n: int) -> tuple[int, bool]:
    """B's row stride and whether it is stored N x K (the transpose of a row-major matrix)."""
    b_strides = b.strides or (n, 1)
    ldb = leading_dimension(k, n, b_strides)
    b_nk = False
    if ldb is None:
        flipped = leading_dimension(n, k, b_strides[::-1])
        if flipped is None:
            raise AutotuneError(
                f"B (shape {b.shape}, strides {b.strides}) must be row-major or the transpose of a row-major "
                "matrix (copy it, e.g. B.contiguous())"
            )
        ldb, b_nk = flipped, True
    if ldb > MAX_LEADING:
        raise AutotuneError(f"B's rows lie {ldb} elements apart, more than the kernels' 32-bit ldb holds")
    return ldb, b_nk


def torch_fake(A: Any, B: Any, alpha: float = 1.0) -> Any:
    """A new C of A's rows and B's columns."""
    import torch

    torch._check(A.dim() == 2 and B.dim() == 2, lambda: "A and B must be 2-D matrices")
    torch._check(A.shape[1] == B.shape[0], lambda: "A's columns must equal B's rows")
    return A.new_empty((A.shape[0], B.shape[1]))
