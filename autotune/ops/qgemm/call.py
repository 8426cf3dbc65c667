"""An int4 weight-only product called from Python: the checks that bind (x, qweight, scales, zeros, out)
to a problem. The weight is in the canonical format (format.py, docs/lowbit.md); zeros is None for a
symmetric weight."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.arrays import DeviceArray, contiguous
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem, check_dim
from autotune.ops.call import ACTIVATIONS as ACTIVATIONS  # the op's, re-exported
from autotune.ops.call import Bound, activation_rows, weight_only_out
from autotune.ops.qgemm.format import GROUPS, variant_name


def input_dtypes(dtype: str) -> tuple[str, str, str, str]:
    """What a problem's `inputs` name for activations of `dtype`: x, the packed codes, the scales (the
    activations' dtype) and the zero points."""
    return (dtype, "int4", dtype, "uint8")


def bind(name: str, arrays: Sequence[DeviceArray | None], out: DeviceArray | None) -> Bound:
    """out = x @ dequant(W)^T: x (..., K) in float16 or bfloat16, its leading dimensions M rows,
    qweight uint8 (N, K // 2), scales (N, K // g) in x's dtype, zeros uint8 (N, K // g) or None; every
    array contiguous; out (..., N). x of any shape goes in as it is: linear()'s usual x, a (K,) vector
    or a (1, 1, K) decode step, then needs no reshape on either side (two torch calls a launch)."""
    x, qweight, scales, zeros = arrays
    if x is None or qweight is None or scales is None:
        raise AutotuneError("x, qweight and scales are required (zeros may be None: a symmetric weight)")
    m, k = activation_rows(x, "int4")
    n, codes = packed_shape(qweight)
    if codes != k:
        raise AutotuneError(f"x has K = {k} but qweight holds {codes} codes a row")
    group = scale_group(scales, zeros, n, k, x.dtype)
    out_shape = weight_only_out(x, out, n)
    problem = Problem(
        name,
        x.dtype,
        check_dim("M", m),
        check_dim("N", n),
        check_dim("K", k),
        inputs=input_dtypes(x.dtype),
        variant=variant_name(group, zeros is None),
    )
    return Bound(problem, out_shape)


def packed_shape(qweight: DeviceArray) -> tuple[int, int]:
    """(N, K) of an int4 weight's packed codes: a contiguous uint8 matrix (N, K // 2)."""
    if qweight.dtype != "uint8" or len(qweight.shape) != 2 or not contiguous(qweight):
        got = f"{qweight.dtype} {qweight.shape}"
        raise AutotuneError(f"qweight must be a contiguous uint8 matrix (N, K // 2), got {got}")
    return qweight.shape[0], 2 * qweight.shape[1]


def scale_group(scales: DeviceArray, zeros: DeviceArray | None, n: int, k: int, dtype: str) -> int:
    """The group size of an (N, K) int4 weight whose scales are a contiguous `dtype` matrix
    (N, K // group) and whose zero points, if any, a contiguous uint8 matrix of the same shape."""
    if len(scales.shape) != 2 or scales.shape[0] != n or not contiguous(scales) or scales.dtype != dtype:
        got = f"{scales.dtype} {scales.shape}"
        raise AutotuneError(f"scales must be a contiguous {dtype} matrix (N, K // group), got {got}")
    groups = scales.shape[1]
    group = k // groups if groups and k % groups == 0 else 0
    if group not in GROUPS:
        sizes = ", ".join(map(str, GROUPS))
        raise AutotuneError(f"scales has {groups} columns: K = {k} in groups of {sizes} needs K // group")
    if zeros is not None and (zeros.dtype != "uint8" or zeros.shape != scales.shape or not contiguous(zeros)):
        got = f"{zeros.dtype} {zeros.shape}"
        raise AutotuneError(f"zeros must be a contiguous uint8 matrix {scales.shape} or None, got {got}")
    return group


def torch_fake(x: Any, qweight: Any, scales: Any, zeros: Any = None, alpha: float = 1.0) -> Any:
    """The output's shape for torch.compile: x's leading dimension (if any) by qweight's rows."""
    return x.new_empty((*x.shape[:-1], qweight.shape[0]))
