"""autotune.linear under autograd: y = x Wᵀ + b with its gradients, so that a model trained through
it (a LoRA adapter over a frozen base layer, say) gets the gradients F.linear would give, never none.

For dY of shape (..., N), with the rows of x and dY as R:

- dX = dY W, an (R, N) by (N, K) GEMM with both operands row-major: our GEMM families;
- dW = dYᵀ X: its A would be dYᵀ, column-major, which no family of ours reads, so torch's matmul
  (cuBLAS) computes it;
- db = the column sums of dY (torch's sum).

An int4 weight (QuantizedWeight) is frozen: dX = dY W with W dequantized, and asking for a gradient
of its scales is an error. Imported where a call needs a gradient (torch is imported by then), never
by `import autotune`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune.core.errors import AutotuneError

# (dY rows (R, N), W (N, K)) -> dX rows (R, K): our GEMM, by the Python API or the torch op.
Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# What the autograd functions launch, handed down by autotune.api.linear (the surface above this
# module): that linear itself, run with autograd off, and the launch path's GEMM (`db=` taken by both).
Linear = Callable[..., Any]
Gemm = Callable[..., Any]


def input_grads(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    needs: tuple[bool, bool, bool],
    product: Product,
    values: Callable[[], torch.Tensor] | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(dX, dW, db) for dY = `grad`, each where `needs` asks for it. `values` gives W's values where
    `weight` holds none itself (an int4 weight: dequantized, and only when dX is asked for)."""
    k = x.shape[-1]
    n = grad.shape[-1]
    rows = grad.reshape(-1, n).contiguous()  # dY of a sum() is an expanded view: our kernels read rows
    dx = dw = db = None
    if needs[0]:
        matrix = values() if values is not None else weight
        assert matrix is not None
        dx = product(rows, matrix.contiguous()).reshape(x.shape)
    if needs[1]:
        assert weight is not None
        dw = (rows.T @ x.reshape(-1, k)).to(weight.dtype)
    if needs[2]:
        db = rows.sum(0)
    return dx, dw, db


class _Linear(torch.autograd.Function):  # type: ignore[misc]  # torch is untyped where it is not installed
    """autotune.linear with a float weight (the forward runs with autograd off: the usual path)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        db: str | None,
        untracked: Linear,
        gemm: Gemm,
    ) -> Any:
        ctx.save_for_backward(x, weight)
        ctx.db, ctx.gemm = db, gemm
        return _not_a_view(untracked(x, weight, bias, db=db))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        _refuse_a_graph_of_gradients()
        x, weight = ctx.saved_tensors
        needs = tuple(ctx.needs_input_grad[:3])
        return (*input_grads(grad, x, weight, needs, lambda a, b: ctx.gemm(a, b, db=ctx.db)), None, None, None)


class _QuantizedLinear(torch.autograd.Function):  # type: ignore[misc]
    """autotune.linear with an int4 or 8-bit weight: gradients for x and the bias; the weight is frozen."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, bias: torch.Tensor | None, weight: Any, db: str | None, untracked: Linear, gemm: Gemm
    ) -> Any:
        ctx.save_for_backward(x)
        ctx.weight, ctx.db, ctx.gemm = weight, db, gemm
        return _not_a_view(untracked(x, weight, bias, db=db))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        _refuse_a_graph_of_gradients()
        (x,) = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], False, ctx.needs_input_grad[1])
        dequantized = lambda: ctx.weight.dequantize(x.dtype)  # noqa: E731  (only when dX is asked for)
        dx, _, db = input_grads(grad, x, None, needs, lambda a, b: ctx.gemm(a, b, db=ctx.db), dequantized)
        return dx, db, None, None, None, None


def _refuse_a_graph_of_gradients() -> None:
    """Our kernels record no graph, so the gradients they give have none either: a gradient of them
    (backward with create_graph=True: a gradient penalty, a Hessian-vector product) would leave out
    every path through dX, silently. Refused instead (the engine enables grad mode for create_graph)."""
    if torch.is_grad_enabled():
        raise AutotuneError(
            "autotune.linear's gradients are not differentiable again (backward with create_graph=True): "
            "use torch.nn.functional.linear where a gradient of gradients is needed"
        )


def _not_a_view(y: torch.Tensor) -> torch.Tensor:
    """The forward's output as a tensor of its own: the launch path hands (..., N) back as a view of
    its (rows, N) result, and autograd refuses an in-place change (ReLU(inplace=True)) of a view a
    custom Function made. Copied only where it is one, and only on this path (autograd recording)."""
    return y.clone() if y._base is not None else y


def linear(x: Any, weight: Any, bias: Any, db: str | None, quantized: bool, untracked: Linear, gemm: Gemm) -> Any:
    """autotune.linear where autograd records the call (api.linear decides that, and passes itself as
    `untracked`, which the forward runs with autograd off, and the launch path's `gemm`, for dX)."""
    if quantized:
        frozen = [name for name, buffer in weight._buffers.items() if buffer is not None and buffer.requires_grad]
        if frozen:
            what = (weight.__dict__.get("options") or ("int4",))[0]  # an 8-bit weight's (kind,); int4: none
            raise AutotuneError(
                f"an {what} weight is frozen: its {', '.join(frozen)} take no gradient (x's and the bias' do); "
                "train a float weight, or an adapter beside this one"
            )
        return _QuantizedLinear.apply(x, bias, weight, db, untracked, gemm)
    return _Linear.apply(x, weight, bias, db, untracked, gemm)


def register_linear_autograd() -> None:
    """Gradients for torch.ops.autotune.linear (registered by autotune/runtime/torch_ops.py), from
    torch ops alone, so that torch.compile traces the backward too."""

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, weight, _ = inputs
        ctx.save_for_backward(x, weight)

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        # Without a bias torch hands over one flag an input it was given (two), not three.
        given = len(ctx.needs_input_grad)
        needs = (*ctx.needs_input_grad, False, False)[:3]
        return input_grads(grad, x, weight, needs, torch.ops.autotune.gemm)[:given]

    torch.library.register_autograd("autotune::linear", backward, setup_context=setup_context)
