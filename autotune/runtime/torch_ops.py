"""autotune::gemv and autotune::gemm as torch.library custom ops, for torch.compile and CUDA graphs.

Importing this module registers them (torch stays optional: `import autotune` never imports it):

    import autotune.runtime.torch_ops  # noqa: F401
    y = torch.ops.autotune.gemv(A, x)          # A @ x;  trans=True: A.T @ x
    C = torch.ops.autotune.gemm(A, B)          # A @ B
    y = torch.ops.autotune.linear(x, W, bias)  # F.linear(x, W, bias)

Each op has a fake (meta) implementation, so `torch.compile(fullgraph=True)` traces through it and
torch's CUDA graph machinery captures it. They are registered with torch.library.Library's
define/impl and register_fake rather than the @custom_op decorator, whose Python wrapper costs
5-30 us a call in eager mode (pytorch#177109); docs/launch.md has the measured cost of both paths.
"""

from __future__ import annotations

from typing import Any

import torch

import autotune

_LIBRARY = torch.library.Library("autotune", "DEF")
_LIBRARY.define("gemv(Tensor A, Tensor x, float alpha=1.0, bool trans=False) -> Tensor")
_LIBRARY.define("gemm(Tensor A, Tensor B, float alpha=1.0) -> Tensor")
# Functional (a new output, no input mutated), so torch.compile's CUDA graphs keep it.
_LIBRARY.define("linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor")


def _gemv(A: torch.Tensor, x: torch.Tensor, alpha: float = 1.0, trans: bool = False) -> Any:
    return autotune.gemv(A, x, alpha=alpha, trans=trans)


def _gemm(A: torch.Tensor, B: torch.Tensor, alpha: float = 1.0) -> Any:
    return autotune.gemm(A, B, alpha=alpha)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
    return autotune.linear(x, weight, bias)


_LIBRARY.impl("gemv", _gemv, "CUDA")
_LIBRARY.impl("gemm", _gemm, "CUDA")
_LIBRARY.impl("linear", _linear, "CUDA")


def _gemv_fake(A: torch.Tensor, x: torch.Tensor, alpha: float = 1.0, trans: bool = False) -> torch.Tensor:
    torch._check(A.dim() == 2, lambda: "A must be a 2-D matrix")
    rows, cols = A.shape
    x_len, y_len = (rows, cols) if trans else (cols, rows)
    torch._check(x.numel() == x_len, lambda: "x's length must match A")
    # As autotune.gemv shapes a new y: a 1 x length x gives a 1 x length y (runtime/operands.py).
    row = x.dim() == 2 and x.shape[0] == 1 and x_len != 1
    return A.new_empty((1, y_len) if row else (y_len,))


def _gemm_fake(A: torch.Tensor, B: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    torch._check(A.dim() == 2 and B.dim() == 2, lambda: "A and B must be 2-D matrices")
    torch._check(A.shape[1] == B.shape[0], lambda: "A's columns must equal B's rows")
    return A.new_empty((A.shape[0], B.shape[1]))


def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(weight.dim() == 2 and x.shape[-1] == weight.shape[1], lambda: "x: (..., K), weight: (N, K)")
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


# Registered by call, not as decorators: torch is untyped here, and a decorator would untype them.
torch.library.register_fake("autotune::gemv", _gemv_fake)
torch.library.register_fake("autotune::gemm", _gemm_fake)
torch.library.register_fake("autotune::linear", _linear_fake)
