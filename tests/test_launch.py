"""gemv()'s operand checks on the CPU: array descriptions from __cuda_array_interface__, streams,
and the one-line errors for shapes, layouts and dtypes it cannot run (no GPU needed)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.errors import AutotuneError
from autotune.runtime.operands import GemvLayout, check_gemv_operands, describe, stream_handle


class CudaArray:
    """Any library's GPU array, as far as the CUDA array interface tells (cupy, numba, ...)."""

    def __init__(
        self,
        shape: tuple[int, ...],
        typestr: str = "<f2",
        strides: tuple[int, ...] | None = None,
        pointer: int = 1 << 20,
    ) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {
            "shape": shape,
            "typestr": typestr,
            "data": (pointer, False),
            "strides": strides,
            "version": 3,
        }


def _operands(a: CudaArray, x: CudaArray, out: CudaArray | None = None, trans: bool = False) -> GemvLayout:
    return check_gemv_operands(describe(a, "A"), describe(x, "x"), describe(out, "out") if out else None, trans)


def test_interface_arrays_are_described_in_elements() -> None:
    a = describe(CudaArray((4, 6), "<f4", strides=(24, 4), pointer=4096), "A")
    assert (a.pointer, a.shape, a.strides, a.dtype, a.kind) == (4096, (4, 6), (6, 1), "float32", "cai")
    assert describe(CudaArray((6,)), "x").strides is None  # C-contiguous
    assert _operands(CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,))) == GemvLayout(4, 6, False, (4,))
    assert _operands(CudaArray((4, 6)), CudaArray((6, 1))) == GemvLayout(4, 6, False, (4,))


def test_a_transposed_view_runs_the_other_kernel_on_the_same_memory() -> None:
    """A.t() of a row-major 6 x 4 matrix (shape 4 x 6, strides 1 and 4): A.t() @ x is the transposed
    GEMV of the 6 x 4 matrix, and A.t().t() @ x with trans=True the plain one."""
    view = CudaArray((4, 6), strides=(2, 8))  # bytes of float16: element strides (1, 4)
    assert _operands(view, CudaArray((6,))) == GemvLayout(6, 4, True, (4,))
    assert _operands(view, CudaArray((4,)), trans=True) == GemvLayout(6, 4, False, (6,))


def test_a_one_row_x_gives_a_one_row_y() -> None:
    assert _operands(CudaArray((4, 6)), CudaArray((1, 6))) == GemvLayout(4, 6, False, (1, 4))
    assert _operands(CudaArray((4, 6)), CudaArray((1, 6)), CudaArray((1, 4))).out_shape == (1, 4)


@pytest.mark.parametrize(
    ("a", "x", "out", "words"),
    [
        (CudaArray((4, 6)), CudaArray((5,)), None, "length 6"),
        (CudaArray((24,)), CudaArray((6,)), None, "2-D"),
        (CudaArray((4, 6), strides=(24, 2)), CudaArray((6,)), None, "row-major"),  # every other column
        (CudaArray((4, 6)), CudaArray((6,), strides=(4,)), None, "contiguous vector"),
        (CudaArray((4, 6)), CudaArray((6,), "<f4"), None, "share a dtype"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((5,)), "length 4"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,), "<f4"), "dtype"),
        (CudaArray((4, 6), strides=(48, 2)), CudaArray((6,)), None, "row-major"),  # every other row
        (CudaArray((4, 6)), CudaArray((2, 3)), None, "length 6"),
        (CudaArray((0, 6)), CudaArray((6,)), None, "no rows"),
        (CudaArray((16, 0)), CudaArray((0,)), None, "no columns"),
    ],
)
def test_bad_operands_are_one_line_errors(a: CudaArray, x: CudaArray, out: CudaArray | None, words: str) -> None:
    with pytest.raises(AutotuneError, match=words) as error:
        _operands(a, x, out)
    assert "\n" not in str(error.value)


def test_unsupported_arrays_are_named() -> None:
    with pytest.raises(AutotuneError, match="GPU array"):
        describe([1.0, 2.0], "A")
    with pytest.raises(AutotuneError, match="float32 or float16"):
        describe(CudaArray((3,), "<i4"), "x")


def test_gemv_refuses_beta_without_out() -> None:
    import autotune

    with pytest.raises(AutotuneError, match="out="):
        autotune.gemv(CudaArray((4, 6)), CudaArray((6,)), beta=0.5)


def test_streams_are_taken_from_what_callers_pass() -> None:
    class TorchStream:
        cuda_stream = 0x1234

    class CupyStream:
        ptr = 0x5678

    class PycudaStream:
        handle = 0x9ABC

    assert [stream_handle(s) for s in (7, TorchStream(), CupyStream(), PycudaStream())] == [7, 0x1234, 0x5678, 0x9ABC]
    for bad in (True, "0", 1.5):
        with pytest.raises(AutotuneError, match="stream"):
            stream_handle(bad)
