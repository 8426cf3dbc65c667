"""What gets tuned: an operation, its dtypes, a shape and a variant; parsing of op names, sizes and shapes files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import refuse_to_read

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
BLAS_PREFIX = {"s": "float32", "h": "float16", "b": "bfloat16"}
# What an op's input arrays may hold, by bits per element: the output dtypes (DTYPES), and the
# packed integers and 8-bit floats a low-bit weight is stored in (int4: two to a byte; uint8: the
# integer zero points of an asymmetric int4 weight).
INPUT_BITS = {
    "float32": 32,
    "float16": 16,
    "bfloat16": 16,
    "int8": 8,
    "uint8": 8,
    "int4": 4,
    "fp8e4m3": 8,
    "fp8e5m2": 8,
}
INPUT_DTYPES = tuple(INPUT_BITS)

# Kernels index with 32-bit ints, and no card holds a matrix near 256 GiB: larger is a typo.
MAX_DIM = 2**31 - 1
MAX_MATRIX_BYTES = 256 * 2**30


def input_bytes(count: int, dtype: str) -> int:
    """The bytes of an input array of `count` elements of `dtype` (a last half-filled int4 byte counts)."""
    return (count * INPUT_BITS[dtype] + 7) // 8


@dataclass(frozen=True, order=True)
class Problem:
    """One tuning problem, every matrix row-major: an op (autotune/ops) and its sizes.

    GEMV: y = A x with A m x n (n is the reduction length); `trans` means y = Aᵀ x instead
    (x has m entries, y has n). GEMM: C = A B with A m x k, B k x n, C m x n; `trans` means B is
    stored n x k (K contiguous, C = A Wᵀ with W an nn.Linear's weight). Ops without a third size
    have k = 0.

    `dtype` is the output's. `inputs` names the dtype of each input array, in the order a call
    passes them (the op's input_names), where they differ from it (a weight in int4 with float16
    scales); empty, every input has `dtype`. `variant` is a form of the op it defines (a group size,
    "g128"); empty, its plain form.
    Both default to empty, so a problem that names neither is the problem it always was.
    """

    op: str
    dtype: str
    m: int
    n: int
    k: int = 0
    trans: bool = False
    inputs: tuple[str, ...] = ()
    variant: str = ""

    def input_dtypes(self, count: int) -> tuple[str, ...]:
        """The dtype of each of the op's `count` input arrays."""
        return self.inputs or (self.dtype,) * count

    @property
    def blas_name(self) -> str:
        prefix = {v: k for k, v in BLAS_PREFIX.items()}[self.dtype]
        return prefix + self.op

    @property
    def matrix_bytes(self) -> int:
        """The largest matrix: m x n, or with k the largest of m x k, k x n and m x n."""
        return max(self.m * self.k, self.k * self.n, self.m * self.n) * ITEMSIZE[self.dtype]

    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes that define the problem: (m, n), or (m, n, k) for an op with a third size."""
        return (self.m, self.n, self.k) if self.k else (self.m, self.n)

    def __str__(self) -> str:
        text = f"{self.blas_name} {'x'.join(map(str, self.shape))}"
        if self.trans:
            text += " (B stored N x K)" if self.op == "gemm" else " (transposed)"
        if self.inputs:
            text += f" [{','.join(self.inputs)}]"
        return text + (f" {self.variant}" if self.variant else "")


def split_inputs(joined: object) -> tuple[str, ...]:
    """A Problem's `inputs` from its dtypes joined by commas (the database's and the selection
    table's spelling); "" is none."""
    # str(): a value written straight into a database names no dtype a key compares equal to.
    return tuple(str(joined).split(",")) if joined else ()


def parse_dtype(dtype: str) -> str:
    canonical = _DTYPE_ALIASES.get(dtype.strip().lower())
    if canonical is None:
        raise AutotuneError(f"unknown dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    return canonical


def parse_input_dtypes(text: str) -> tuple[str, ...]:
    """Comma-separated input dtypes ("int4,float16,float16"), each a name of INPUT_DTYPES or an alias
    of an output dtype ("fp16")."""
    found = []
    for name in text.split(","):
        word = name.strip().lower()
        canonical = _DTYPE_ALIASES.get(word, word if word in INPUT_BITS else None)
        if canonical is None:
            raise AutotuneError(f"unknown input dtype {name.strip()!r}: choose from {', '.join(INPUT_DTYPES)}")
        found.append(canonical)
    return tuple(found)


def check_dim(name: str, value: object) -> int:
    """A matrix dimension: a positive integer a kernel can index."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AutotuneError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise AutotuneError(f"{name} must be a positive integer, got {value}")
    if value > MAX_DIM:
        raise AutotuneError(f"{name}={value} is too large (at most {MAX_DIM})")
    return value


def _parse_int(token: str) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


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
            shown = line if len(line) <= 80 else line[:77] + "..."  # a line of a megabyte stays one line
            raise AutotuneError(f"{source} line {number}: expected {words} integers '{' '.join(dims)}', got {shown!r}")
        try:
            shape = tuple(check_dim(label, v) for label, v in zip(dims, values, strict=True))
        except AutotuneError as exc:
            raise AutotuneError(f"{source} line {number}: {exc}") from None
        shapes.append(shape)
    if not shapes:
        raise AutotuneError(f"{source} holds no shapes")
    return shapes


def read_shapes_file(path: Path, dims: Sequence[str] = ("M", "N")) -> list[tuple[int, ...]]:
    refuse_to_read(path, "shapes file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise AutotuneError(f"cannot read shapes file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise AutotuneError(f"shapes file {path} is not UTF-8 text (one shape a line, such as 4096 8192)") from None
    return parse_shapes(text, str(path), dims)
