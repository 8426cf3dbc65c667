"""gemv()'s operand checks on the CPU: array descriptions from __cuda_array_interface__, streams,
row-strided views and their lda, and the one-line errors for shapes, layouts and dtypes it cannot run
(no GPU needed)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.errors import AutotuneError
from autotune.ops.call import Reroute
from autotune.ops.gemm.call import GemmLayout
from autotune.ops.gemm.call import check_operands as check_gemm_operands
from autotune.ops.gemv.call import GemvLayout
from autotune.ops.gemv.call import bind as bind_gemv
from autotune.ops.gemv.call import check_operands as check_gemv_operands
from autotune.runtime.operands import describe, stream_handle


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
    assert _operands(CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,))) == GemvLayout(4, 6, False, (4,), 6)
    assert _operands(CudaArray((4, 6)), CudaArray((6, 1))) == GemvLayout(4, 6, False, (4,), 6)


def test_a_transposed_view_runs_the_other_kernel_on_the_same_memory() -> None:
    """A.t() of a row-major 6 x 4 matrix (shape 4 x 6, strides 1 and 4): A.t() @ x is the transposed
    GEMV of the 6 x 4 matrix, and A.t().t() @ x with trans=True the plain one."""
    view = CudaArray((4, 6), strides=(2, 8))  # bytes of float16: element strides (1, 4)
    assert _operands(view, CudaArray((6,))) == GemvLayout(6, 4, True, (4,), 4)
    assert _operands(view, CudaArray((4,)), trans=True) == GemvLayout(6, 4, False, (6,), 4)


def test_a_one_row_x_gives_a_one_row_y() -> None:
    assert _operands(CudaArray((4, 6)), CudaArray((1, 6))) == GemvLayout(4, 6, False, (1, 4), 6)
    assert _operands(CudaArray((4, 6)), CudaArray((1, 6)), CudaArray((1, 4))).out_shape == (1, 4)
    # A decode step's (batch, token, K) x: its y keeps both leading ones, given or made.
    assert _operands(CudaArray((4, 6)), CudaArray((1, 1, 6))) == GemvLayout(4, 6, False, (1, 1, 4), 6)
    assert _operands(CudaArray((4, 6)), CudaArray((1, 1, 6)), CudaArray((1, 1, 4))).out_shape == (1, 1, 4)
    assert _operands(CudaArray((4, 6)), CudaArray((1, 1, 4)), trans=True).out_shape == (1, 1, 6)


def test_a_strided_row_with_leading_ones_is_copied_first() -> None:
    a, x = CudaArray((4, 6)), CudaArray((1, 1, 6), strides=(24, 24, 4))  # float16 x[..., ::2]
    bound = bind_gemv([describe(a, "A"), describe(x, "x")], None, (False,))
    assert isinstance(bound, Reroute) and bound.copy_inputs == (1,)


# Row-strided views (strides in bytes of float16): the plain GEMV runs them in place with A's row stride.
STRIDED = [
    # A[:, :1021] of a 1000 x 1024 matrix
    (CudaArray((1000, 1021), strides=(2048, 2)), GemvLayout(1000, 1021, False, (1000,), 1024)),
    # A[:, 1:] of a 1000 x 1024 matrix: 2 bytes into it
    (CudaArray((1000, 1023), strides=(2048, 2), pointer=(1 << 20) + 2), GemvLayout(1000, 1023, False, (1000,), 1024)),
    # the k part of a fused 4096 x 3*4096 qkv weight: 4096 columns from column 4096 on
    (
        CudaArray((4096, 4096), strides=(3 * 8192, 2), pointer=(1 << 20) + 8192),
        GemvLayout(4096, 4096, False, (4096,), 12288),
    ),
    # every other row of a 8 x 6 matrix, and a column of a 5 x 3 matrix
    (CudaArray((4, 6), strides=(24, 2)), GemvLayout(4, 6, False, (4,), 12)),
    (CudaArray((5, 1), strides=(6, 2)), GemvLayout(5, 1, False, (5,), 3)),
]


@pytest.mark.parametrize(
    ("a", "layout"), STRIDED, ids=["cols-1021", "cols-from-1", "qkv-k", "every-other-row", "column"]
)
def test_row_strided_views_run_the_plain_gemv_with_their_lda(a: CudaArray, layout: GemvLayout) -> None:
    m, n = a.__cuda_array_interface__["shape"]
    got = _operands(a, CudaArray((n,)), CudaArray((m,)))
    assert got == layout and got.strided


def test_the_transpose_of_a_row_strided_view_runs_the_plain_gemv_with_trans() -> None:
    """W[:, :4] of a 6 x 8 matrix, transposed (shape 4 x 6, element strides 1 and 8): with trans=True
    the product is W[:, :4] @ x, the plain GEMV of the strided view."""
    view = CudaArray((4, 6), strides=(2, 16))
    assert _operands(view, CudaArray((4,)), trans=True) == GemvLayout(6, 4, False, (6,), 8)


def test_strided_views_run_the_transposed_gemv_with_their_lda() -> None:
    """The transposed GEMV's kernels (a one-row GEMM) take A's row stride as the GEMM's ldb."""
    cols = CudaArray((1000, 1021), strides=(2048, 2))  # A[:, :1021] of a 1000 x 1024 matrix
    assert _operands(cols, CudaArray((1000,)), trans=True) == GemvLayout(1000, 1021, True, (1021,), 1024)
    flipped = CudaArray((4, 6), strides=(2, 16))  # W[:, :4] of a 6 x 8 matrix, transposed: W[:, :4]ᵀ x
    assert _operands(flipped, CudaArray((6,))) == GemvLayout(6, 4, True, (4,), 8)


def test_an_lda_past_32_bits_is_refused() -> None:
    with pytest.raises(AutotuneError, match="32-bit lda"):
        _operands(CudaArray((2, 6), strides=(2**32, 2)), CudaArray((6,)))


@pytest.mark.parametrize(
    ("a", "x", "out", "words"),
    [
        (CudaArray((4, 6)), CudaArray((5,)), None, "length 6"),
        (CudaArray((24,)), CudaArray((6,)), None, "2-D"),
        (CudaArray((4, 6), strides=(24, 4)), CudaArray((6,)), None, "row-major"),  # every other column
        (CudaArray((4, 6), strides=(8, 2)), CudaArray((6,)), None, "row-major"),  # rows overlap (lda 4 < 6)
        (CudaArray((4, 6), strides=(0, 2)), CudaArray((6,)), None, "row-major"),  # one row broadcast
        (CudaArray((4, 6), strides=(12, -2)), CudaArray((6,)), None, "row-major"),  # columns reversed
        (CudaArray((4, 6), strides=(4, 16)), CudaArray((6,)), None, "A.contiguous"),  # neither way round
        (CudaArray((4, 6)), CudaArray((6,), strides=(4,)), None, "contiguous vector"),  # strided: copied first
        (CudaArray((4, 6)), CudaArray((6,), "<f4"), None, "share a dtype"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((5,)), "length 4"),
        (CudaArray((4, 6)), CudaArray((6,)), CudaArray((4,), "<f4"), "dtype"),
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


def _gemm(a: CudaArray, b: CudaArray, out: CudaArray | None = None) -> GemmLayout:
    return check_gemm_operands(describe(a, "A"), describe(b, "B"), describe(out, "out") if out else None)


# GEMM operands (float16, strides in bytes): B row-major K x N, or the transpose of a row-major N x K
# matrix (W.t() of an nn.Linear weight), each matrix's rows possibly further apart than its length.
GEMM_LAYOUTS = [
    (CudaArray((4, 6)), CudaArray((6, 5)), None, GemmLayout(4, 5, 6, False, 6, 5, 5)),
    (CudaArray((4, 6)), CudaArray((6, 5), strides=(2, 12)), None, GemmLayout(4, 5, 6, True, 6, 6, 5)),  # W.t()
    (CudaArray((4, 6), strides=(16, 2)), CudaArray((6, 5)), None, GemmLayout(4, 5, 6, False, 8, 5, 5)),  # A[:, :6]
    (CudaArray((4, 6)), CudaArray((6, 5), strides=(2, 16)), None, GemmLayout(4, 5, 6, True, 6, 8, 5)),  # W[:, :6].t()
    (CudaArray((4, 6)), CudaArray((6, 5), strides=(14, 2)), None, GemmLayout(4, 5, 6, False, 6, 7, 5)),  # B[:, :5]
    (CudaArray((4, 6)), CudaArray((6, 5)), CudaArray((4, 5), strides=(16, 2)), GemmLayout(4, 5, 6, False, 6, 5, 8)),
]


@pytest.mark.parametrize(("a", "b", "out", "layout"), GEMM_LAYOUTS, ids=["nn", "nt", "lda", "nt-ldb", "ldb", "ldc"])
def test_gemm_layouts_and_leading_dimensions(
    a: CudaArray, b: CudaArray, out: CudaArray | None, layout: GemmLayout
) -> None:
    got = _gemm(a, b, out)
    assert got == layout
    assert got.leading == (
        None if (got.lda, got.ldb, got.ldc) == (6, 6 if got.b_nk else 5, 5) else (got.lda, got.ldb, got.ldc)
    )


@pytest.mark.parametrize(
    ("a", "b", "out", "words"),
    [
        (CudaArray((4, 6), strides=(2, 8)), CudaArray((6, 5)), None, "A .* is a transposed view.*A.contiguous"),
        (CudaArray((4, 6)), CudaArray((6, 5), strides=(20, 4)), None, "B .*transpose of a row-major.*B.contiguous"),
        (CudaArray((4, 6)), CudaArray((7, 5)), None, "A's columns must equal B's rows"),
        (CudaArray((4, 6)), CudaArray((6, 5)), CudaArray((4, 5), strides=(2, 8)), "out .* is a transposed view"),
        (CudaArray((4, 6)), CudaArray((6, 0)), None, "B has no columns"),
        (CudaArray((4, 6)), CudaArray((6, 5), "<f4"), None, "share a dtype"),
    ],
)
def test_bad_gemm_operands_are_one_line_errors(a: CudaArray, b: CudaArray, out: CudaArray | None, words: str) -> None:
    with pytest.raises(AutotuneError, match=words) as error:
        _gemm(a, b, out)
    assert "\n" not in str(error.value)


class _Shaped:
    """Just a shape, as far as linear()'s checks look (they run before anything reaches a GPU)."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


@pytest.mark.parametrize(
    ("x", "w", "words"),
    [
        (_Shaped(4, 1000), _Shaped(3072, 1024), "x has 1000 features, W expects 1024"),
        (_Shaped(4, 0), _Shaped(3072, 0), r"K \(x's and W's columns\) is empty"),
        (_Shaped(4, 1024), _Shaped(0, 1024), r"N \(W's rows\) is empty"),
        (_Shaped(0, 1024), _Shaped(3072, 1024), "x's rows is empty"),
    ],
)
def test_linear_names_what_does_not_fit(x: _Shaped, w: _Shaped, words: str) -> None:
    import autotune

    with pytest.raises(AutotuneError, match=words) as error:
        autotune.linear(x, w)
    assert "\n" not in str(error.value)
