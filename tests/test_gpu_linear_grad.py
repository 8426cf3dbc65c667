"""GPU tests of autotune.linear under autograd (run with `pytest -m gpu` on the GPU machine): gradients
of x, W and the bias against F.linear's in three dtypes on odd shapes, each within F.linear's own
error from a float64 reference; the torch op eager and under torch.compile; an int4 weight's input
gradient and its frozen scales; no gradient recorded under no_grad; and a LoRA-style adapter over a
frozen base layer trained as torch trains it."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.core.errors import AutotuneError

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

# (x's shape, N): one row, a few, a batch of sequences; K and N not multiples of 8 or 16 where they can be.
SHAPES = [((1, 4096), 1024), ((5, 1000), 333), ((2, 3, 520), 1030), ((64, 256), 96)]
DTYPES = ["float32", "float16", "bfloat16"]


def _error(got: Any, exact: Any) -> float:
    return float((got.double() - exact).abs().max() / exact.abs().max().clamp_min(1e-30))


def _grads(function: Any, x: Any, w: Any, b: Any) -> list[Any]:
    """The gradients of x, W and b for one dY, the same values whatever the dtype (drawn in float64 on
    the CPU: CUDA's generator draws other numbers for other dtypes)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b)]
    y = function(*leaves)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    y.backward(dy.to(device=y.device, dtype=y.dtype))
    return [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gradients_match_f_linear_within_its_own_error(shape: tuple[tuple[int, ...], int], dtype: str) -> None:
    import autotune

    kind = getattr(torch, dtype)
    rows, n = shape
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(*rows, generator=gen, device="cuda").to(kind)
    w = torch.randn(n, rows[-1], generator=gen, device="cuda").to(kind) / rows[-1] ** 0.5
    b = torch.randn(n, generator=gen, device="cuda").to(kind)
    ours = _grads(autotune.linear, x, w, b)
    theirs = _grads(torch.nn.functional.linear, x, w, b)
    exact = _grads(torch.nn.functional.linear, x.double(), w.double(), b.double())
    for name, mine, torchs, right in zip(("x", "W", "bias"), ours, theirs, exact, strict=True):
        assert mine is not None and mine.shape == right.shape and mine.dtype == kind, name
        ours_off, torch_off = _error(mine, right), _error(torchs, right)
        assert ours_off <= 2 * torch_off + 1e-6, (name, ours_off, torch_off)


def test_only_the_gradients_asked_for_are_computed_and_no_grad_records_none() -> None:
    import autotune

    x = torch.randn(4, 256, device="cuda", dtype=torch.float16, requires_grad=True)
    w = torch.randn(128, 256, device="cuda", dtype=torch.float16)  # frozen: no gradient asked
    y = autotune.linear(x, w)
    assert y.grad_fn is not None
    y.float().sum().backward()
    assert x.grad is not None and w.grad is None
    with torch.no_grad():
        assert autotune.linear(x, w).grad_fn is None
    with torch.inference_mode():
        assert not autotune.linear(x, w).requires_grad


def test_the_torch_op_has_gradients_eager_and_compiled() -> None:
    import autotune.runtime.torch_ops  # noqa: F401

    x = torch.randn(3, 512, device="cuda", dtype=torch.float16)
    w = torch.randn(200, 512, device="cuda", dtype=torch.float16) / 512**0.5
    b = torch.randn(200, device="cuda", dtype=torch.float16)
    exact = _grads(torch.nn.functional.linear, x.double(), w.double(), b.double())
    compiled = torch.compile(lambda *a: torch.ops.autotune.linear(*a) * 2, fullgraph=True)
    for function, scale in ((torch.ops.autotune.linear, 1), (compiled, 2)):
        for name, got, right in zip(("x", "W", "bias"), _grads(function, x, w, b), exact, strict=True):
            assert _error(got, right * scale) < 1e-2, (name, function)


def test_an_int4_weight_passes_the_input_gradient_and_refuses_its_own() -> None:
    import autotune

    w = torch.randn(300, 1024, device="cuda", dtype=torch.float16)
    quantized = autotune.quantize(w)
    dense = quantized.dequantize()
    x = torch.randn(2, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(300, device="cuda", dtype=torch.float16)
    got = _grads(lambda x, _, b: quantized(x, b), x, dense, b)
    exact = _grads(torch.nn.functional.linear, x.double(), dense.double(), b.double())
    assert _error(got[0], exact[0]) < 1e-2 and _error(got[2], exact[2]) < 1e-2
    quantized.scales.requires_grad_(True)
    with pytest.raises(AutotuneError, match="an int4 weight is frozen: its scales take no gradient"):
        quantized(x.requires_grad_(True))


def test_a_lora_adapter_over_a_frozen_base_trains_as_with_f_linear() -> None:
    """y = base(x) + B(A(x)): the base weight frozen and run by autotune.linear (or F.linear), the
    adapters trained by SGD towards a random linear target; both runs start equal and follow the
    same loss curve."""
    import autotune

    def train(linear: Any) -> list[float]:
        torch.manual_seed(5)
        base = torch.randn(256, 512, device="cuda") / 512**0.5
        target = base + torch.randn(256, 8, device="cuda") @ torch.randn(8, 512, device="cuda") / 64
        a = (torch.randn(8, 512, device="cuda") / 512**0.5).requires_grad_(True)
        b = torch.zeros(256, 8, device="cuda", requires_grad=True)
        losses = []
        for _ in range(60):
            x = torch.randn(32, 512, device="cuda")
            y = linear(x, base) + linear(linear(x, a), b)
            loss = (y - x @ target.T).pow(2).mean()
            losses.append(loss.item())
            a.grad = b.grad = None
            loss.backward()
            with torch.no_grad():
                for p in (a, b):
                    p -= 2.0 * p.grad
        return losses

    ours, theirs = train(autotune.linear), train(torch.nn.functional.linear)
    assert ours[-1] < 0.5 * ours[0]
    assert all(abs(o - t) <= 0.02 * t + 1e-6 for o, t in zip(ours, theirs, strict=True)), (ours[-5:], theirs[-5:])


def test_lora_adapters_over_a_patched_base_layer_train_as_unpatched() -> None:
    """The same, as a model holds it: nn.Linear modules (a frozen base, adapters A and B) patched by
    autotune.patch, trained by torch's SGD, against an unpatched copy: the same loss curve."""
    import copy

    import autotune

    class Lora(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.base = torch.nn.Linear(512, 256, bias=True)
            self.lora_A = torch.nn.Linear(512, 8, bias=False)
            self.lora_B = torch.nn.Linear(8, 256, bias=False)
            torch.nn.init.zeros_(self.lora_B.weight)
            self.base.requires_grad_(False)

        def forward(self, x: Any) -> Any:
            return self.base(x) + self.lora_B(self.lora_A(x))

    torch.manual_seed(5)
    theirs = Lora().cuda()
    ours = autotune.patch(copy.deepcopy(theirs))
    assert type(ours.base).__name__ == "PatchedLinear" and type(ours.lora_A).__name__ == "PatchedLinear"
    delta = torch.randn(256, 8, device="cuda") @ torch.randn(8, 512, device="cuda") / 64  # what rank 8 can learn
    target, bias = theirs.base.weight.detach() + delta, theirs.base.bias.detach()

    def train(model: Any) -> list[float]:
        torch.manual_seed(6)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=2.0)
        losses = []
        for _ in range(60):
            x = torch.randn(32, 512, device="cuda")
            loss = (model(x) - x @ target.T - bias).pow(2).mean()
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return losses

    mine, reference = train(ours), train(theirs)
    assert mine[-1] < 0.5 * mine[0]
    assert all(abs(o - t) <= 0.02 * t + 1e-6 for o, t in zip(mine, reference, strict=True)), (mine[-5:], reference[-5:])
    assert ours.base.weight.grad is None  # the frozen base stays frozen
