"""How a row-major problem of ours becomes one column-major cuBLASLt matmul (pure: no library, no GPU).

cuBLASLt multiplies column-major matrices, D = op(A') op(B') (m x n, inner size k). A row-major
matrix with `ld` elements between rows is the column-major transpose with the same `ld`, so:

- GEMM C = A B (A M x K, B K x N or N x K for `trans`, C M x N, all row-major) is Cᵀ = Bᵀ Aᵀ:
  A' = B (N x K col-major: op N; the N x K layout is K x N col-major: op T), B' = A (K x M: op N),
  m = N, n = M, k = K, D' = Cᵀ (N x M, ldc).
- GEMV y = A x (A M x N row-major) is y = op(A') x with A' = A as N x M col-major, op T: m = M,
  n = 1, k = N. The transposed GEMV y = Aᵀ x takes the same A' with op N: m = N, k = M.

The config of a `cublas` trial is the rank of the algorithm in the heuristic's answer for these very
descriptors and preference: the same library version answers the same list, so a stored rank
replays the same kernel (the version is in the trial's source hash).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.errors import AutotuneError
from autotune.core.problem import ITEMSIZE, Problem

FAMILY = "cublas"
OPS = ("gemv", "gemm")  # the ops one cuBLASLt matmul computes
SOURCE_PREFIX = "cublasLt-"  # a vendor trial's source hash: this and the library's version
CONFIG_KEY = "cublas_algo"  # a vendor config is {"cublas_algo": rank in the heuristic's answer}
MAX_ALGOS = 8  # algorithms asked of the heuristic, each timed (PyTorch's TunableOp asks as many)
WORKSPACE_BYTES = 32 * 2**20  # what cuBLAS recommends on Hopper, and what torch gives it there
ALIGNED_BYTES = 16  # the launch path's aligned plans (16-byte rows and arrays), vendor ones too
OP_N, OP_T = 0, 1


@dataclass(frozen=True)
class Matrix:
    """A column-major cuBLASLt matrix layout: rows, columns, leading dimension (elements)."""

    rows: int
    cols: int
    ld: int


@dataclass(frozen=True)
class Matmul:
    """One cuBLASLt call: D' = op_a(A') op_b(B'), D' in place of C' (beta reads it). `a_arg` and
    `b_arg` say which of the call's three pointers (in our kernels' order) A' and B' are."""

    dtype: str
    op_a: int
    op_b: int
    a: Matrix
    b: Matrix
    d: Matrix
    a_arg: int
    b_arg: int
    d_arg: int = 2


def matmul_for(problem: Problem, leading: tuple[int, ...] | None = None) -> Matmul:
    """The cuBLASLt call that computes `problem` on row-major operands whose rows lie `leading`
    elements apart (GEMV (lda,), GEMM (lda, ldb, ldc); None: contiguous)."""
    if problem.op == "gemv":
        m, n = problem.m, problem.n
        (lda,) = leading or (n,)
        a = Matrix(rows=n, cols=m, ld=lda)  # A row-major M x N as N x M column-major
        if problem.trans:  # y (N) = Aᵀ x (M); our kernels take (x, A, y)
            return Matmul(problem.dtype, OP_N, OP_N, a, Matrix(m, 1, m), Matrix(n, 1, n), a_arg=1, b_arg=0)
        return Matmul(problem.dtype, OP_T, OP_N, a, Matrix(n, 1, n), Matrix(m, 1, m), a_arg=0, b_arg=1)
    if problem.op == "gemm":
        m, n, k = problem.m, problem.n, problem.k
        lda, ldb, ldc = leading or (k, k if problem.trans else n, n)
        if problem.trans:  # B row-major N x K is K x N column-major: op T gives N x K
            b_as_a, op_a = Matrix(rows=k, cols=n, ld=ldb), OP_T
        else:  # B row-major K x N is N x K column-major
            b_as_a, op_a = Matrix(rows=n, cols=k, ld=ldb), OP_N
        return Matmul(problem.dtype, op_a, OP_N, b_as_a, Matrix(k, m, lda), Matrix(n, m, ldc), a_arg=1, b_arg=0)
    raise AutotuneError(f"cuBLAS does not serve the {problem.op} op")


def required_alignment(pointers: tuple[int, int, int], problem: Problem, leading: tuple[int, ...] | None) -> int:
    """The alignment (bytes) a plan's heuristic may assume: ALIGNED_BYTES where every array and row
    start is 16-byte aligned, else the element size."""
    item = ITEMSIZE[problem.dtype]
    rows = all(ld * item % ALIGNED_BYTES == 0 for ld in (leading or ()))
    if rows and not (pointers[0] | pointers[1] | pointers[2]) % ALIGNED_BYTES:
        return ALIGNED_BYTES
    return item
