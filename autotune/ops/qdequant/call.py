"""An int4 weight dequantized from Python: the checks that bind (qweight, scales, zeros, out) to a
problem. The weight is in the canonical format (autotune/ops/qgemm/format.py, docs/lowbit.md); zeros
is None for a symmetric weight."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.core.arrays import DeviceArray, contiguous
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem, check_dim
from autotune.ops.call import Bound
from autotune.ops.qgemm.call import ACTIVATIONS
from autotune.ops.qgemm.format import GROUPS, variant_name


def input_dtypes(dtype: str) -> tuple[str, str, str]:
    """What a problem's `inputs` name for a weight dequantized into `dtype`: the packed codes, the
    scales (in that dtype) and the zero points."""
    return ("int4", dtype, "uint8")


def bind(name: str, arrays: Sequence[DeviceArray | None], out: DeviceArray | None) -> Bound:
    """out (N, K) = dequant(W): qweight uint8 (N, K // 2), scales (N, K // g) in float16 or bfloat16
    (out's dtype), zeros uint8 (N, K // g) or None; every array contiguous."""
    qweight, scales, zeros = arrays
    if qweight is None or scales is None:
        raise AutotuneError("qweight and scales are required (zeros may be None: a symmetric weight)")
    if qweight.dtype != "uint8" or len(qweight.shape) != 2 or not contiguous(qweight):
        got = f"{qweight.dtype} {qweight.shape}"
        raise AutotuneError(f"qweight must be a contiguous uint8 matrix (N, K // 2), got {got}")
    n, k = qweight.shape[0], 2 * qweight.shape[1]
    if scales.dtype not in ACTIVATIONS or len(scales.shape) != 2 or scales.shape[0] != n or not contiguous(scales):
        got = f"{scales.dtype} {scales.shape}"
        raise AutotuneError(f"scales must be a contiguous float16 or bfloat16 matrix (N, K // group), got {got}")
    groups = scales.shape[1]
    group = k // groups if groups and k % groups == 0 else 0
    if group not in GROUPS:
        sizes = ", ".join(map(str, GROUPS))
        raise AutotuneError(f"scales has {groups} columns: K = {k} in groups of {sizes} needs K // group")
    if zeros is not None and (zeros.dtype != "uint8" or zeros.shape != scales.shape or not contiguous(zeros)):
        got = f"{zeros.dtype} {zeros.shape}"
        raise AutotuneError(f"zeros must be a contiguous uint8 matrix {scales.shape} or None, got {got}")
    if out is not None and (out.shape != (n, k) or out.dtype != scales.dtype or not contiguous(out)):
        got = f"{out.dtype} {out.shape}"
        raise AutotuneError(f"out must be a contiguous {scales.dtype} matrix ({n}, {k}), got {got}")
    problem = Problem(
        name,
        scales.dtype,
        check_dim("M", n),
        check_dim("N", k),
        inputs=input_dtypes(scales.dtype),
        variant=variant_name(group, zeros is None),
    )
    return Bound(problem, (n, k))


def torch_fake(qweight: Any, scales: Any, zeros: Any = None, alpha: float = 1.0) -> Any:
    """The output's shape for torch.compile: qweight's rows by twice its bytes a row, in the scales' dtype."""
    return scales.new_empty((qweight.shape[0], 2 * qweight.shape[1]))
