"""autotune's ops as torch.library custom ops, for torch.compile and CUDA graphs: each registered op
that has a torch schema (Op.torch_schema) becomes torch.ops.autotune.<name>, plus autotune::linear.

Importing this module registers them (torch stays optional: `import autotune` never imports it):

    import autotune.runtime.torch_ops  # noqa: F401
    y = torch.ops.autotune.gemv(A, x)          # A @ x;  trans=True: A.T @ x
    C = torch.ops.autotune.gemm(A, B)          # A @ B
    y = torch.ops.autotune.linear(x, W, bias)  # F.linear(x, W, bias)

An op registered later (a plug-in's) joins with register_op(op). Each op has a fake (meta)
implementation (Op.torch_fake), so `torch.compile(fullgraph=True)` traces through it and torch's
CUDA graph machinery captures it. They are registered with torch.library.Library's define/impl and
register_fake rather than the @custom_op decorator, whose Python wrapper costs 5-30 us a call in
eager mode (pytorch#177109); docs/launch.md has the measured cost of both paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autotune import ops
from autotune.ops.base import Op
from autotune.runtime import linear_grad, process

# The process's launch path and autotune.linear, which autotune.api (above this module) installed.
_SURFACE = process.installed()

_LIBRARY = torch.library.Library("autotune", "DEF")
_REGISTERED: set[str] = set()


def register_op(op: Op) -> bool:
    """Make `op` torch.ops.autotune.<name> where it has a torch schema; False where it has none."""
    if op.torch_schema is None:
        return False
    if op.name not in _REGISTERED:
        _LIBRARY.define(op.name + op.torch_schema)
        _LIBRARY.impl(op.name, _implementation(op), "CUDA")
        # By call, not as a decorator: torch is untyped here, and a decorator would untype it.
        torch.library.register_fake(f"autotune::{op.name}", _fake(op))
        _REGISTERED.add(op.name)
    return True


def _implementation(op: Op) -> Callable[..., Any]:
    """The op's CUDA kernel for torch: the schema's tensors are the call's arrays, then alpha, then
    the op's options in order."""
    call = _SURFACE.launch_path()._call  # positional: the least a call costs on the launch path
    count = len(op.input_names)

    def implementation(*args: Any) -> Any:
        alpha = args[count] if len(args) > count else 1.0
        # torch leaves out trailing arguments left at their defaults (an optional input's None)
        arrays = args[:count] + (None,) * (count - len(args[:count]))
        return call(op, arrays, None, alpha, 0.0, None, None, tuple(args[count + 1 :]))

    return implementation


def _fake(op: Op) -> Callable[..., Any]:
    def fake(*args: Any) -> Any:
        return op.torch_fake(*args)

    return fake


for _name in ops.names():
    register_op(ops.get(_name))

# Functional (a new output, no input mutated), so torch.compile's CUDA graphs keep it.
_LIBRARY.define("linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Any:
    return _SURFACE.linear(x, weight, bias)


def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    torch._check(weight.dim() == 2 and x.shape[-1] == weight.shape[1], lambda: "x: (..., K), weight: (N, K)")
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


_LIBRARY.impl("linear", _linear, "CUDA")
torch.library.register_fake("autotune::linear", _linear_fake)
linear_grad.register_linear_autograd()
