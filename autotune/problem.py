"""What gets tuned: an operation, a dtype and a shape; parsing of op names, sizes and shapes files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.errors import AutotuneError

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
OPS = ("gemv",)
DEFAULT_OP = "hgemv"

# Kernels index with 32-bit ints, and no card holds a matrix near 256 GiB: larger is a typo.
MAX_DIM = 2**31 - 1
MAX_MATRIX_BYTES = 256 * 2**30


@dataclass(frozen=True, order=True)
class Problem:
    """One tuning problem. For GEMV, A is m x n row-major and n is the reduction length."""

    op: str
    dtype: str
    m: int
    n: int

    @property
    def blas_name(self) -> str:
        prefix = {v: k for k, v in _BLAS_PREFIX.items()}[self.dtype]
        return prefix + self.op

    @property
    def matrix_bytes(self) -> int:
        return self.m * self.n * ITEMSIZE[self.dtype]

    def __str__(self) -> str:
        return f"{self.blas_name} {self.m}x{self.n}"


def parse_dtype(dtype: str) -> str:
    canonical = _DTYPE_ALIASES.get(dtype.strip().lower())
    if canonical is None:
        raise AutotuneError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return canonical


def resolve_op(op: str | None, dtype: str | None = None) -> tuple[str, str]:
    """Map `--op` and `--dtype` to (op, dtype): BLAS names (sgemv, hgemv, bgemv) or `gemv` + dtype."""
    name = (op or DEFAULT_OP).strip().lower()
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


def make_problem(op: str, dtype: str, m: object, n: object) -> Problem:
    problem = Problem(op, dtype, check_dim("M", m), check_dim("N", n))
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


def parse_shapes(text: str, source: str) -> list[tuple[int, int]]:
    """Lines of `M N`; `#` starts a comment; blank lines are skipped."""
    shapes: list[tuple[int, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        values = [_parse_int(f) for f in fields]
        if len(fields) != 2 or None in values:
            raise AutotuneError(f"{source} line {number}: expected two integers 'M N', got {line!r}")
        try:
            m, n = (check_dim(label, v) for label, v in zip(("M", "N"), values, strict=True))
        except AutotuneError as exc:
            raise AutotuneError(f"{source} line {number}: {exc}") from None
        shapes.append((m, n))
    if not shapes:
        raise AutotuneError(f"{source} holds no shapes")
    return shapes


def read_shapes_file(path: Path) -> list[tuple[int, int]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AutotuneError(f"cannot read shapes file {path}: {exc.strerror or exc}") from None
    return parse_shapes(text, str(path))


def standard_shapes() -> list[tuple[int, int]]:
    """The GEMV shape set that ships with the package (what `autotune sweep` tunes by default)."""
    return parse_shapes((Path(__file__).parent / "gemv_shapes.txt").read_text(), "standard shapes")
