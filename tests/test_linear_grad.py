"""autotune.linear under autograd, on the CPU where torch is installed (skipped elsewhere): the launch
path replaced by a double that multiplies with torch in float64, so what is checked is the autograd
plumbing (which calls record a gradient function, which gradients are computed, their shapes and
values against F.linear's, an int4 weight's frozen scales). tests/test_gpu_linear_grad.py runs the
kernels themselves."""

from __future__ import annotations

from typing import Any

import pytest

from autotune import api
from autotune.core.errors import AutotuneError

torch = pytest.importorskip("torch")


class TorchRuntime:
    """The launch path's calls that linear() and its backward make, done by torch (and counted)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def gemm(self, a: Any, b: Any, out: Any = None, beta: float = 0.0, db: str | None = None) -> Any:
        self.calls.append("gemm")
        product = a @ b
        return product if out is None else out.copy_(beta * out + product)

    def gemv(self, a: Any, x: Any, out: Any = None, beta: float = 0.0, db: str | None = None) -> Any:
        self.calls.append("gemv")
        product = x @ a.T  # a (1, K) x gives a (1, N) y, as the launch path's GEMV does
        return product if out is None else out.copy_(beta * out + product)

    def _call(self, op: Any, arrays: Any, out: Any, alpha: float, beta: float, *rest: Any) -> Any:
        self.calls.append(op.name)
        x = arrays[0]  # then the packed weight's buffers, which the test's weight holds as well
        product = x @ self.weight.dequantize(x.dtype).T
        return product if out is None else out.copy_(beta * out + product)


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> TorchRuntime:
    double = TorchRuntime()
    monkeypatch.setattr(api, "_RUNTIME", double)
    monkeypatch.setattr(api, "gemm", double.gemm)
    return double


def _leaf(*shape: int) -> Any:
    return torch.randn(*shape, dtype=torch.float64).requires_grad_(True)


@pytest.mark.parametrize(("rows", "n", "bias"), [((1, 7), 5, False), ((4, 7), 5, True), ((2, 3, 7), 5, True)])
def test_gradients_are_f_linears(runtime: TorchRuntime, rows: tuple[int, ...], n: int, bias: bool) -> None:
    torch.manual_seed(0)
    x, w = _leaf(*rows), _leaf(n, rows[-1])
    b = _leaf(n) if bias else None
    y = api.linear(x, w, b)
    assert y.grad_fn is not None and y.shape == (*rows[:-1], n)
    dy = torch.randn_like(y)
    y.backward(dy)
    leaves = [t for t in (x, w, b) if t is not None]
    ours = [t.grad for t in leaves]
    for t in leaves:
        t.grad = None
    torch.nn.functional.linear(x, w, b).backward(dy)
    for mine, theirs in zip(ours, [t.grad for t in leaves], strict=True):
        assert torch.allclose(mine, theirs)
    assert runtime.calls.count("gemm") >= 1  # dX went through the launch path's GEMM


@pytest.mark.parametrize("rows", [(1, 5), (3, 5), (2, 2, 5)])
def test_gradcheck_in_float64(runtime: TorchRuntime, rows: tuple[int, ...]) -> None:
    # torch's numerical check of the backward formulas, where the double lets the op run in float64
    # (our kernels do not take it: the GPU tests compare with F.linear in three dtypes instead).
    torch.manual_seed(1)
    x, w, b = _leaf(*rows), _leaf(4, rows[-1]), _leaf(4)
    assert torch.autograd.gradcheck(lambda x, w, b: api.linear(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: api.linear(x, w), (x, w))


def test_only_asked_gradients_and_none_recorded_without_autograd(runtime: TorchRuntime) -> None:
    x, w = _leaf(3, 6), torch.randn(4, 6, dtype=torch.float64)  # w frozen
    y = api.linear(x, w)
    y.sum().backward()
    assert x.grad is not None and w.grad is None
    w.requires_grad_(True)
    with torch.no_grad():
        assert api.linear(x, w).grad_fn is None
    with torch.inference_mode():
        assert not api.linear(x, w).requires_grad
    plain = api.linear(x.detach(), w.detach())
    assert plain.grad_fn is None and not plain.requires_grad


def test_an_int4_weight_gives_the_input_gradient_and_its_scales_none(runtime: TorchRuntime) -> None:
    w = torch.randn(8, 128)
    quantized = api.quantize(w.half())
    runtime.weight = quantized  # type: ignore[attr-defined]
    x = torch.randn(2, 128, dtype=torch.float16).requires_grad_(True)
    b = torch.randn(8, dtype=torch.float16).requires_grad_(True)
    y = quantized(x, b)
    y.float().sum().backward()
    dense = quantized.dequantize(torch.float32)
    assert torch.allclose(x.grad.float(), dense.sum(0).expand(2, 128), rtol=1e-2, atol=1e-2)
    assert torch.equal(b.grad, torch.full((8,), 2.0, dtype=torch.float16))  # the sum over x's 2 rows
    quantized.scales.requires_grad_(True)
    with pytest.raises(AutotuneError, match="an int4 weight is frozen: its scales take no gradient"):
        quantized(x)
    with torch.no_grad():  # asking for nothing: no error
        assert quantized(x).grad_fn is None


def test_an_output_changed_in_place_gets_f_linears_gradients(runtime: TorchRuntime) -> None:
    """The launch path hands (..., N) back as a view of its (rows, N) result; autograd refuses an
    in-place change of a view a custom Function made (ReLU(inplace=True) after a patched linear)."""
    torch.manual_seed(0)
    x, w, b = _leaf(2, 3, 7), _leaf(5, 7), _leaf(5)
    api.linear(x, w, b).relu_().sum().backward()
    theirs = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    torch.nn.functional.linear(*theirs).relu_().sum().backward()
    for mine, their in zip((x, w, b), theirs, strict=True):
        assert torch.allclose(mine.grad, their.grad)


def test_a_gradient_of_gradients_is_refused_not_left_out(runtime: TorchRuntime) -> None:
    """Our kernels record no graph: with create_graph=True every path through dX would be missing from
    a gradient penalty's gradient, silently. It is refused in one line."""
    x, w = _leaf(4, 7), _leaf(5, 7)
    y = api.linear(x, w, None)
    with pytest.raises(AutotuneError, match="not differentiable again") as raised:
        torch.autograd.grad(y.pow(2).sum(), (x, w), create_graph=True)
    assert "\n" not in str(raised.value)
