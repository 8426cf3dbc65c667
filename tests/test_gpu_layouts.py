"""BLAS operands on a GPU: GEMM with B stored N x K (W.t() of an nn.Linear weight), leading dimensions of
all three matrices, batches of vectors as a 2-D x, strided vectors. Every result is checked against a
float64 reference on fresh random data, outputs poisoned with NaN first."""

from __future__ import annotations

from typing import Any

import pytest

import autotune
from autotune.core.errors import AutotuneError
from autotune.ops import gemm as gemm_op

pytestmark = pytest.mark.gpu
DTYPES = ["float32", "float16", "bfloat16"]


def _torch() -> Any:
    return pytest.importorskip("torch")


def _check(got: Any, want: Any, scale: float) -> None:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert bool(got.double().isfinite().all()), "NaN or inf in the output"
    assert (got.double() - want).abs().max().item() <= 1e-2 * scale


def _assert_gemm(c: Any, A: Any, B: Any, alpha: float = 1.0, beta: float = 0.0, c0: Any = None) -> None:
    want = alpha * (A.double() @ B.double())
    scale = abs(alpha) * (A.double().abs() @ B.double().abs()).max().item() + 1.0
    if c0 is not None:
        want = want + beta * c0.double()
        scale += abs(beta) * c0.double().abs().max().item()
    _check(c, want, scale)


# (M, N, K): every family in both layouts (skinny on CUDA cores, skinny on tensor cores, the tiled
# families), tails in each size.
SHAPES = [(1, 4096, 4096), (3, 1000, 999), (8, 4096, 4096), (16, 2048, 1024), (17, 300, 129), (200, 512, 1024)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_with_b_stored_n_by_k_runs_in_place(dtype: str, shape: tuple[int, int, int]) -> None:
    """gemm(X, W.t()) with W (N, K) row-major: the N x K problem, W read in place (no copy allocated),
    with and without out=, alpha and beta, on the checked and the short path."""
    torch = _torch()
    kind = getattr(torch, dtype)
    m, n, k = shape
    W = torch.randn(n, k, device="cuda", dtype=kind)
    for _ in range(2):
        X = torch.randn(m, k, device="cuda", dtype=kind)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        C = autotune.gemm(X, W.t())
        torch.cuda.synchronize()
        grown = torch.cuda.max_memory_allocated() - before
        assert grown < W.numel() * W.element_size() // 2, f"{grown} bytes allocated (a copy of W?)"
        _assert_gemm(C, X, W.t())
        out = torch.randn(m, n, device="cuda", dtype=kind)
        c0 = out.clone()
        autotune.gemm(X, W.t(), out=out, alpha=0.5, beta=-1.5)
        torch.cuda.synchronize()
        _assert_gemm(out, X, W.t(), 0.5, -1.5, c0)


def _views(torch: Any, kind: Any, m: int, n: int, k: int) -> list[tuple[str, Any, Any, Any, Any]]:
    """(name, A, B, C, C's wider matrix) with gaps between rows: slices of columns of wider matrices,
    16-byte aligned rows (vector loads) and not (the fitted scalar-load configs)."""
    wide = torch.randn(m, k + 24, device="cuda", dtype=kind)
    b_wide = torch.randn(k, n + 8, device="cuda", dtype=kind)
    w_wide = torch.randn(n, k + 8, device="cuda", dtype=kind)
    w_odd = torch.randn(n, k + 3, device="cuda", dtype=kind)
    c_wide = torch.full((m, n + 16), float("nan"), device="cuda", dtype=kind)
    c_odd = torch.full((m, n + 1), float("nan"), device="cuda", dtype=kind)
    return [
        ("lda", wide[:, 8 : 8 + k], torch.randn(k, n, device="cuda", dtype=kind), None, None),
        ("ldb", torch.randn(m, k, device="cuda", dtype=kind), b_wide[:, :n], None, None),
        ("nt-ldb", torch.randn(m, k, device="cuda", dtype=kind), w_wide[:, :k].t(), None, None),
        ("nt-odd-ldb", torch.randn(m, k, device="cuda", dtype=kind), w_odd[:, 1 : k + 1].t(), None, None),
        ("ldc", wide[:, :k], w_wide[:, 8:].t(), c_wide[:, :n], c_wide),
        ("odd-ldc", wide[:, 1 : k + 1], b_wide[:, :n], c_odd[:, 1:], c_odd),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4096, 1024), (16, 1000, 992), (128, 1024, 512)], ids=str)
def test_gemm_leading_dimensions_run_in_place(dtype: str, shape: tuple[int, int, int]) -> None:
    """Row-strided A, B (both layouts) and C run in place with lda, ldb, ldc; C's gaps keep their
    contents (NaN there stays NaN, only the view is written)."""
    torch = _torch()
    kind = getattr(torch, dtype)
    m, n, k = shape
    for name, A, B, C, wider in _views(torch, kind, m, n, k):
        got = autotune.gemm(A, B, out=C) if C is not None else autotune.gemm(A, B)
        torch.cuda.synchronize()
        _assert_gemm(got, A, B)
        if wider is not None:  # C is wider[:, first : first + n]: the other columns stay NaN
            first = C.storage_offset() - wider.storage_offset()
            outside = torch.cat([wider[:, :first], wider[:, first + n :]], dim=1)
            assert bool(outside.isnan().all()), f"{name}: wrote past the view's columns"


def test_transposed_a_and_every_other_column_are_refused_naming_contiguous() -> None:
    torch = _torch()
    A = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    B = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    with pytest.raises(AutotuneError, match=r"A.contiguous\(\)"):
        autotune.gemm(A.t().contiguous().t(), B)
    with pytest.raises(AutotuneError, match=r"B.contiguous\(\)"):
        autotune.gemm(A, B[:, ::2])  # every other column: neither layout


@pytest.mark.parametrize("batch", [1, 2, 4, 16, 17])
def test_a_2d_x_is_a_batch_of_vectors(batch: int) -> None:
    """gemv(A, X) with X (B, N): B == 1 a GEMV; 2..16 the skinny families with A as the N x K
    operand; more a GEMM. trans=True with X (B, M): X A."""
    torch = _torch()
    A = torch.randn(3072, 1024, device="cuda", dtype=torch.float16)
    X = torch.randn(batch, 1024, device="cuda", dtype=torch.float16)
    _assert_gemm(autotune.gemv(A, X), X, A.t())
    Xt = torch.randn(batch, 3072, device="cuda", dtype=torch.float16)
    _assert_gemm(autotune.gemv(A, Xt, trans=True), Xt, A)
    if 2 <= batch <= 16:
        problem = autotune.best("hgemm", batch, 3072, 1024, trans=True, gpu=torch.cuda.get_device_name()).problem
        assert gemm_op.family(problem).NAME in ("skinny", "skinny_tc")


def test_strided_vectors_incx_and_incy() -> None:
    """x[::2] and a column of a matrix as x, a strided y with beta: the result as with contiguous vectors."""
    torch = _torch()
    A = torch.randn(2048, 1024, device="cuda", dtype=torch.float16)
    x_long = torch.randn(2048, device="cuda", dtype=torch.float16)
    column = torch.randn(1024, 4, device="cuda", dtype=torch.float16)[:, 1]
    for x in (x_long[::2], column):
        want = A.double() @ x.double()
        _check(autotune.gemv(A, x), want, (A.double().abs() @ x.double().abs()).max().item())
    y_wide = torch.randn(2048, 3, device="cuda", dtype=torch.float16)
    y = y_wide[:, 0]
    y0 = y.clone()
    x = torch.randn(1024, device="cuda", dtype=torch.float16)
    autotune.gemv(A, x, out=y, alpha=2.0, beta=0.5)
    torch.cuda.synchronize()
    want = 2.0 * (A.double() @ x.double()) + 0.5 * y0.double()
    _check(y, want, 2.0 * (A.double().abs() @ x.double().abs()).max().item() + y0.double().abs().max().item())


def test_a_decode_steps_row_x_gives_its_row_y() -> None:
    """A (1, 1, K) x (a transformers decode step's) in gemv and linear: y (1, 1, N), the same numbers as
    the vector's, repeated calls (the signature's short path) included, and a strided one copied first;
    a given out is poisoned with NaN first."""
    torch = _torch()
    A = torch.randn(3072, 1024, device="cuda", dtype=torch.float16)
    x = torch.randn(1, 1, 1024, device="cuda", dtype=torch.float16)
    want = (A.double() @ x.double().reshape(1024)).reshape(1, 1, 3072)
    scale = (A.double().abs() @ x.double().abs().reshape(1024)).max().item()
    for _ in range(3):
        _check(autotune.gemv(A, x), want, scale)
        _check(autotune.linear(x, A), want, scale)
    out = torch.full((1, 1, 3072), float("nan"), device="cuda", dtype=torch.float16)
    autotune.gemv(A, x, out=out)
    _check(out, want, scale)
    wide = torch.randn(1, 1, 2048, device="cuda", dtype=torch.float16)
    strided = wide[..., ::2]
    _check(autotune.linear(strided, A), (A.double() @ strided.double().reshape(1024)).reshape(1, 1, 3072), scale * 4)
    xt = torch.randn(1, 1, 3072, device="cuda", dtype=torch.float16)
    want_t = (A.double().t() @ xt.double().reshape(3072)).reshape(1, 1, 1024)
    scale_t = (A.double().abs().t() @ xt.double().abs().reshape(3072)).max().item()
    _check(autotune.gemv(A, xt, trans=True), want_t, scale_t)
