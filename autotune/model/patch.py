"""autotune.patch and autotune.unpatch: which of a model's linears run our kernels, checked for the whole
model before any is changed (never half-patched), one log line per linear left as it is and one summary.

Covered: every module whose type is exactly torch.nn.Linear, wherever it sits (a peft lora.Linear's
base_layer and its lora_A/lora_B adapters included). An nn.Linear subclass (bitsandbytes' Linear4bit,
torch's NonDynamicallyQuantizableLinear) has a forward of its own and is left as it is.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from autotune.core.errors import AutotuneError
from autotune.model import fuse as fusing
from autotune.model.low_bit_weight import LowBitWeight
from autotune.model.modules import Int4Linear, Int8Linear, PatchedLinear
from autotune.model.quantized import QuantizedWeight
from autotune.model.quantized8 import Quantized8Weight
from autotune.ops.q8gemm import PIECE as EIGHT_BIT_K_MULTIPLE

log = logging.getLogger(__name__)

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what autotune.linear runs
LOW_BIT_DTYPES = (torch.float16, torch.bfloat16)  # the low-bit kernels' activations (the scales' dtype)
EIGHT_BIT = ("int8", "fp8")  # weights= values that quantize to an 8-bit weight
PATCHED = (PatchedLinear, Int4Linear, Int8Linear)  # fuse.py's classes are subclasses


@dataclass
class _Plan:
    """One covered linear and what it becomes: int4 or 8-bit where `quantized` is set, else float."""

    name: str
    linear: torch.nn.Linear
    quantized: LowBitWeight | None = None


def patch(
    model: torch.nn.Module,
    weights: str | Mapping[str, Any] | None,
    group: int,
    sym: bool,
    fuse: bool,
    db: str | None,
) -> torch.nn.Module:
    """autotune.patch (autotune/api.py has the arguments checked and the user's docstring)."""
    if not isinstance(model, torch.nn.Module):
        raise AutotuneError(f"autotune.patch takes a torch.nn.Module, got {type(model).__name__}")
    covered, already, skipped = _survey(model)
    # A checkpoint's int4 weight replaces a linear's float one, which may then be left unloaded (meta).
    _check_loaded(covered, set(weights) if isinstance(weights, Mapping) else set())
    plans = [_Plan(name, linear) for name, linear in covered]
    if weights == "int4":
        _quantize(plans, model, "int4", group, lambda w: QuantizedWeight.from_float(w, group, sym))
    elif weights in EIGHT_BIT:
        kind = str(weights)
        _quantize(plans, model, kind, EIGHT_BIT_K_MULTIPLE, lambda w: Quantized8Weight.from_float(w, kind))
    elif isinstance(weights, Mapping):
        _assign(plans, weights)
    # Nothing above changed the model; from here on nothing refuses.
    patched: set[int] = set()
    for plan in plans:
        if plan.quantized is None:
            PatchedLinear.adopt(plan.linear, db)
        elif isinstance(plan.quantized, Quantized8Weight):
            Int8Linear.adopt(plan.linear, plan.quantized, db)
        else:
            Int4Linear.adopt(plan.linear, plan.quantized, db)
        patched.add(id(plan.linear))
    groups = [fusing.fuse(members, names) for names, members in fusing.sibling_groups(model, patched)] if fuse else []
    quantized = sum(plan.quantized is not None for plan in plans)
    log.info(
        "autotune.patch: %d linears patched (%d %s, %d float), %d fused groups, %d skipped, %d already patched",
        len(plans),
        quantized,
        weights if weights in EIGHT_BIT else "int4",
        len(plans) - quantized,
        len(groups),
        skipped,
        already,
    )
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """autotune.unpatch: every patched linear back to a plain nn.Linear."""
    if not isinstance(model, torch.nn.Module):
        raise AutotuneError(f"autotune.unpatch takes a torch.nn.Module, got {type(model).__name__}")
    patched = [module for module in model.modules() if isinstance(module, PATCHED)]
    for module in patched:
        module.release()
    log.info("autotune.unpatch: %d linears back to nn.Linear", len(patched))
    return model


def _survey(model: torch.nn.Module) -> tuple[list[tuple[str, torch.nn.Linear]], int, int]:
    """(the covered linears by name, how many are patched already, how many are left as they are,
    each with a log line)."""
    covered = []
    already = skipped = 0
    for name, module in model.named_modules():
        where = name or "the model"
        if isinstance(module, PATCHED):
            already += 1
        elif not isinstance(module, torch.nn.Linear):
            continue
        elif (why := _left_as_it_is(module)) is not None:
            log.info("autotune.patch: %s (%s) left as it is: %s", where, type(module).__name__, why)
            skipped += 1
        else:
            covered.append((where, module))
    return covered, already, skipped


def _left_as_it_is(linear: torch.nn.Linear) -> str | None:
    """Why a linear is not patched, None where it is."""
    if type(linear) is not torch.nn.Linear:
        return "a subclass of nn.Linear (a quantized layer such as bitsandbytes') runs a forward of its own"
    if "forward" in vars(linear):
        return "its forward is replaced on the module (an accelerate hook?), which patching would drop"
    weight = linear.weight
    if weight.dtype not in FLOAT_DTYPES:
        return f"its weight is {str(weight.dtype).removeprefix('torch.')}; our kernels run float32, float16, bfloat16"
    if weight.dim() != 2 or (weight.numel() and weight.stride(-1) != 1):
        return f"its weight's rows are not contiguous (strides {tuple(weight.stride())})"
    return None


def _check_loaded(covered: list[tuple[str, torch.nn.Linear]], replaced: set[str]) -> None:
    """Refuse a model whose covered linears hold no values (the meta device), naming the first; the
    weights of the linears named in `replaced` (given their int4 weight) may be unloaded."""
    empty = []  # (linear's name, which of its tensors is unloaded)
    for name, linear in covered:
        tensors = {"bias": linear.bias} if name in replaced else {"weight": linear.weight, "bias": linear.bias}
        unloaded = [what for what, p in tensors.items() if p is not None and p.is_meta]
        if unloaded:
            empty.append((name, " and ".join(unloaded)))
    if empty:
        more = f" (and {len(empty) - 1} more linears)" if len(empty) > 1 else ""
        name, what = empty[0]
        raise AutotuneError(
            f"{name}'s {what} {'are' if ' and ' in what else 'is'} on the meta device{more}: load the weights first "
            "(init_empty_weights or a device_map that offloads leaves them unloaded); nothing was patched"
        )


def _quantize(
    plans: list[_Plan],
    model: torch.nn.Module,
    kind: str,
    k_multiple: int,
    make: Callable[[torch.Tensor], LowBitWeight],
) -> None:
    """Quantize each plan's weight (`make`) where a `kind` weight fits it (in_features a multiple of
    `k_multiple`: int4's group, the 8-bit kernels' 16), before any module changes (so that a refusal
    leaves the model as it was); one log line for each kept in float."""
    owners = Counter(id(p) for module in model.modules() for p in module._parameters.values() if p is not None)
    for plan in plans:
        why = _float_only(plan, kind, k_multiple, owners)
        if why is None:
            try:
                plan.quantized = make(plan.linear.weight)
            except AutotuneError as error:
                raise AutotuneError(f"{plan.name}: {error}; nothing was patched") from None
        else:
            log.info("autotune.patch: %s kept in float: %s", plan.name, why)


def _assign(plans: list[_Plan], weights: Mapping[str, Any]) -> None:
    """Give each plan named in `weights` (a checkpoint's int4 weights, autotune.load_quantized) its
    weight, checked against the linear's shape and dtype, before any module changes."""
    by_name = {plan.name: plan for plan in plans}
    for name, quantized in weights.items():
        plan = by_name.get(name)
        if plan is None:
            raise AutotuneError(
                f"weights names {name!r}, which is not a linear autotune.patch covers; nothing was patched"
            )
        if not isinstance(quantized, QuantizedWeight):
            raise AutotuneError(
                f"weights[{name!r}] is a {type(quantized).__name__}, not a QuantizedWeight; nothing was patched"
            )
        linear = plan.linear
        if (quantized.out_features, quantized.in_features) != (linear.out_features, linear.in_features):
            raise AutotuneError(
                f"{name} is ({linear.out_features}, {linear.in_features}), its int4 weight "
                f"({quantized.out_features}, {quantized.in_features}); nothing was patched"
            )
        if quantized.dtype != linear.weight.dtype:
            have, want = (str(d).removeprefix("torch.") for d in (quantized.dtype, linear.weight.dtype))
            raise AutotuneError(
                f"{name}'s int4 scales are {have}, the model's linear {want}: the int4 kernels take activations "
                f"in the scales' dtype (cast the model, model.to(torch.{have})); nothing was patched"
            )
        # on the model's device; a linear left on the meta device takes the weight where it is
        plan.quantized = quantized if linear.weight.is_meta else quantized.to(linear.weight.device)
    unnamed = len(plans) - len(weights)
    if unnamed:
        log.info("autotune.patch: %d linears without an int4 weight in `weights` run in float", unnamed)


def _float_only(plan: _Plan, kind: str, k_multiple: int, owners: Counter[int]) -> str | None:
    """Why a covered linear stays in float under weights=`kind`, None where it is quantized."""
    linear, weight = plan.linear, plan.linear.weight
    if any(part.startswith("lora_") for part in plan.name.split(".")):
        return "a LoRA adapter (peft's lora_A, lora_B) stays trainable"
    if owners[id(weight)] > 1:
        return "its weight is tied to another module's (lm_head and embed_tokens): quantizing it would untie them"
    if weight.dtype not in LOW_BIT_DTYPES:
        return f"{str(weight.dtype).removeprefix('torch.')} weights; the {kind} kernels run float16 and bfloat16"
    if linear.in_features % k_multiple:
        what = f"the int4 group {k_multiple}" if kind == "int4" else f"{k_multiple} (the {kind} kernels' pieces)"
        return f"in_features = {linear.in_features} is not a multiple of {what}"
    return None
