"""What gets tuned: an operation, a dtype and a shape; parsing of op names, sizes and shapes files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.core.errors import AutotuneError

DTYPES = ("float32", "float16", "bfloat16")
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_ALIASES = {
    "float32": "float32",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "s": "float32",
    "float16": "float16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "h": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "b": "bfloat16",
}
# BLAS-style names: the first letter is the dtype.
_BLAS_PREFIX = {"s": "float32", "h": "float16", "b": "bfloat16"}
OPS = ("gemv", "gemm")
DEFAULT_OP = "hgemv"

# Kernels index with 32-bit ints, and no card holds a matrix near 256 GiB: larger is a typo.
MAX_DIM = 2**31 - 1
MAX_MATRIX_BYTES = 256 * 2**30


@dataclass(frozen=True, order=True)
class Problem:
    """One tuning problem, every matrix row-major.

    GEMV: y = A x with A m x n (n is the reduction length); `trans` means y = Aᵀ x instead
    (x has m entries, y has n). GEMM: C = A B with A m x k, B k x n, C m x n. GEMV has k = 0.
    """

    op: str
    dtype: str
    m: int
    n: int
    k: int = 0
    trans: bool = False

    @property
    def blas_name(self) -> str:
        prefix = {v: k for k, v in _BLAS_PREFIX.items()}[self.dtype]
        return prefix + self.op

    @property
    def matrix_bytes(self) -> int:
        """The largest operand: A for GEMV, max(A, B, C) for GEMM."""
        if self.op == "gemm":
            return max(self.m * self.k, self.k * self.n, self.m * self.n) * ITEMSIZE[self.dtype]
        return self.m * self.n * ITEMSIZE[self.dtype]

    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes that define the problem: (m, n) for GEMV, (m, n, k) for GEMM."""
        return (self.m, self.n, self.k) if self.op == "gemm" else (self.m, self.n)

    def __str__(self) -> str:
        text = f"{self.blas_name} {'x'.join(map(str, self.shape))}"
        return text + " (transposed)" if self.trans else text


def parse_dtype(dtype: str) -> str:
    canonical = _DTYPE_ALIASES.get(dtype.strip().lower())
    if canonical is None:
        raise AutotuneError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return canonical


def resolve_op(op: str | None, dtype: str | None = None) -> tuple[str, str]:
    """Map `--op` and `--dtype` to (op, dtype): BLAS names (sgemv, hgemv, bgemv) or `gemv` + dtype."""
    # --dtype alone names the dtype of the default op's kind (GEMV), not a clash with hgemv.
    name = (op or ("gemv" if dtype is not None else DEFAULT_OP)).strip().lower()
    wanted = parse_dtype(dtype) if dtype is not None else None
    if name in OPS:
        return name, wanted or "float16"
    if len(name) > 1 and name[0] in _BLAS_PREFIX and name[1:] in OPS:
        implied = _BLAS_PREFIX[name[0]]
        if wanted is not None and wanted != implied:
            raise AutotuneError(f"--op {name} means dtype {implied}, but --dtype says {wanted}")
        return name[1:], implied
    known = ", ".join([*OPS, *(p + o for o in OPS for p in _BLAS_PREFIX)])
    raise AutotuneError(f"unknown op {op!r}: choose one of {known}")


def check_dim(name: str, value: object) -> int:
    """A matrix dimension: a positive integer a kernel can index."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AutotuneError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise AutotuneError(f"{name} must be a positive integer, got {value}")
    if value > MAX_DIM:
        raise AutotuneError(f"{name}={value} is too large (at most {MAX_DIM})")
    return value


def make_problem(op: str, dtype: str, m: object, n: object, k: object = None, trans: bool = False) -> Problem:
    """A checked problem: GEMM needs k; only GEMV has a transposed layout."""
    if op == "gemm":
        if k is None:
            raise AutotuneError("GEMM needs K (--k): A is M x K, B is K x N")
        if trans:
            raise AutotuneError("--trans applies to GEMV only (GEMM takes row-major A and B)")
        problem = Problem(op, dtype, check_dim("M", m), check_dim("N", n), check_dim("K", k))
    else:
        if k is not None:
            raise AutotuneError(f"--k applies to GEMM only; {op} is M x N")
        problem = Problem(op, dtype, check_dim("M", m), check_dim("N", n), trans=bool(trans))
    if problem.matrix_bytes > MAX_MATRIX_BYTES:
        raise AutotuneError(
            f"{problem}: the matrix would take {problem.matrix_bytes / 2**30:.0f} GiB, more than any GPU holds"
        )
    return problem


def _parse_int(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def shape_dims(op: str) -> tuple[str, ...]:
    """The sizes a shapes-file line gives for this op."""
    return ("M", "N", "K") if op == "gemm" else ("M", "N")


def parse_shapes(text: str, source: str, dims: Sequence[str] = ("M", "N")) -> list[tuple[int, ...]]:
    """Lines of `M N` (or `M N K` for GEMM); `#` starts a comment; blank lines are skipped."""
    shapes: list[tuple[int, ...]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        values = [_parse_int(f) for f in fields]
        if len(fields) != len(dims) or None in values:
            words = {2: "two", 3: "three"}[len(dims)]
            raise AutotuneError(f"{source} line {number}: expected {words} integers '{' '.join(dims)}', got {line!r}")
        try:
            shape = tuple(check_dim(label, v) for label, v in zip(dims, values, strict=True))
        except AutotuneError as exc:
            raise AutotuneError(f"{source} line {number}: {exc}") from None
        shapes.append(shape)
    if not shapes:
        raise AutotuneError(f"{source} holds no shapes")
    return shapes


def read_shapes_file(path: Path, dims: Sequence[str] = ("M", "N")) -> list[tuple[int, ...]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AutotuneError(f"cannot read shapes file {path}: {exc.strerror or exc}") from None
    return parse_shapes(text, str(path), dims)


def standard_shapes(op: str = "gemv") -> list[tuple[int, ...]]:
    """The shape set that ships with the package for this op (what `autotune sweep` tunes by default)."""
    name = f"{op}_shapes.txt"
    return parse_shapes((Path(__file__).parents[1] / name).read_text(), f"standard {op} shapes", shape_dims(op))
