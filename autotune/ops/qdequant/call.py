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
from autotune.ops.qgemm.call import ACTIVATIONS, packed_shape, scale_group
from autotune.ops.qgemm.format import variant_name


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
    n, k = packed_shape(qweight)
    if scales.dtype not in ACTIVATIONS:
        raise AutotuneError(f"scales must be float16 or bfloat16 (the dequantized weight's dtype), got {scales.dtype}")
    group = scale_group(scales, zeros, n, k, scales.dtype)
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
