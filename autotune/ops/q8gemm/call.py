"""An 8-bit weight-only product called from Python: the checks that bind (x, qweight, scales, out) to a
problem. The weight is in the 8-bit format (format.py, docs/lowbit.md): qweight uint8 (N, K) holding
int8 or float8 e4m3 codes, scales (N,) in x's dtype; the call names which codes they are (`kind`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.arrays import DeviceArray, contiguous
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem, check_dim
from autotune.ops.call import ACTIVATIONS as ACTIVATIONS  # the op's, re-exported
from autotune.ops.call import Bound, activation_rows, weight_only_out

# A problem's variant names the codes; its inputs name the same as dtypes (core/problem.py's INPUT_BITS).
CODE_DTYPES = {"int8": "int8", "fp8": "fp8e4m3"}
KINDS = tuple(CODE_DTYPES)


def input_dtypes(dtype: str, kind: str) -> tuple[str, str, str]:
    """What a problem's `inputs` name for activations of `dtype` and codes of `kind`: x, the codes and
    the scales (the activations' dtype)."""
    return (dtype, CODE_DTYPES[kind], dtype)


def bind(name: str, arrays: Sequence[DeviceArray | None], out: DeviceArray | None, options: tuple[Any, ...]) -> Bound:
    """out = x @ (codes * scales[:, None])^T: x (..., K) in float16 or bfloat16, its leading dimensions M
    rows; qweight uint8 (N, K); scales (N,) in x's dtype; every array contiguous; out (..., N). `options`
    is (kind,): "int8" (the default, also for no options) or "fp8"."""
    kind = options[0] if options else "int8"
    if len(options) > 1 or kind not in KINDS:
        raise AutotuneError(f"{name}'s options are (kind,) with kind {' or '.join(map(repr, KINDS))}, got {options!r}")
    x, qweight, scales = arrays
    if x is None or qweight is None or scales is None:
        raise AutotuneError("x, qweight and scales are required")
    m, k = activation_rows(x, "8-bit")
    if qweight.dtype != "uint8" or len(qweight.shape) != 2 or not contiguous(qweight):
        raise AutotuneError(f"qweight must be a contiguous uint8 matrix (N, K), got {qweight.dtype} {qweight.shape}")
    n, codes = qweight.shape
    if codes != k:
        raise AutotuneError(f"x has K = {k} but qweight holds {codes} codes a row")
    if scales.shape != (n,) or scales.dtype != x.dtype or not contiguous(scales):
        raise AutotuneError(f"scales must be a contiguous {x.dtype} vector ({n},), got {scales.dtype} {scales.shape}")
    out_shape = weight_only_out(x, out, n)
    problem = Problem(
        name,
        x.dtype,
        check_dim("M", m),
        check_dim("N", n),
        check_dim("K", k),
        inputs=input_dtypes(x.dtype, kind),
        variant=kind,
    )
    return Bound(problem, out_shape)


def torch_fake(x: Any, qweight: Any, scales: Any, alpha: float = 1.0, kind: str = "int8") -> Any:
    """The output's shape for torch.compile: x's leading dimension (if any) by qweight's rows."""
    return x.new_empty((*x.shape[:-1], qweight.shape[0]))
