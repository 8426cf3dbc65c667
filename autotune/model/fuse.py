"""Sibling projections that read one input (q_proj, k_proj, v_proj; gate_proj, up_proj) run as one
launch on their concatenated weight, as serving engines run them, while the parent's forward stays as
it is.

How (FusedGroup):

- Storage. The siblings' weights (and biases; for int4 the qweight, scales and zeros, for 8-bit weights
  the qweight and scales) are concatenated along the output rows once, and each sibling's tensor becomes
  a row-block view of the result: the same Parameter objects with their data moved (`param.data =
  view`), so memory is not doubled, the state_dict keys stay, and load_state_dict's in-place copies land
  in the shared storage. `.to()` and the like convert the shared tensors once and re-view every sibling
  (the siblings' `_apply`); moving one sibling moves them all.
- Calls. The first sibling called with an input x computes x times the concatenated weight and keeps
  (x, its version, the product, which siblings are still to come) in the group; a sibling then called
  with that same x object, not modified since, takes its column slice of the product (a view), and
  the group forgets the product once every sibling has taken its part. The state is one tuple, read
  and written whole, so threads sharing a model never mix one input's product with another's.
- Always correct. A sibling called with another x while others still wait (cross-attention: q reads
  the decoder's states, k and v the encoder's) means these siblings do not share their input: the
  group stops fusing for good and each runs alone on its own weight view. The sibling that computed
  the held product called again with a new x starts a new round instead (the last one was cut short
  by an exception, or a sibling is never called). They run alone too where
  autograd records (grad enabled and a sibling's parameter requires grad), so that gradients reach
  each Parameter. In eager mode, before a fused launch, the group checks that each sibling's tensor
  is still its view (a `param.data = ...` or a deepcopy breaks that) and concatenates them again if not.
- torch.compile. The same code traces under dynamo (fullgraph): the group's state is Python-object
  side effects, `x is state[0]` an identity dynamo tracks, so the graph holds one torch op per group
  and slices of its output, and the state is empty again after the frame. The concatenated tensors
  are marked static inputs, so that CUDA graphs (mode="reduce-overhead") do not copy them each replay.
  Under compile nothing checks that the views still alias the shared storage: change sibling weights
  in place, by load_state_dict or by `.to()`, or patch again after an unpatch.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autotune.core.errors import AutotuneError
from autotune.model.modules import (
    Int4Linear,
    Int8Linear,
    PatchedLinear,
    eight_bit_linear,
    float_linear,
    int4_linear,
)
from autotune.model.quantized import QuantizedWeight
from autotune.model.quantized8 import Quantized8Weight

log = logging.getLogger(__name__)

# Children of one parent that read the same input in the models that name them so (Llama, Mistral,
# Qwen, Phi-3's MLP, ...). A model with its own fused names (query_key_value, gate_up_proj) fuses already.
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))

# Where a sibling's tensor lives: its owner module's _parameters or _buffers, and the name there.
Slot = tuple[dict[str, Any], str]


class FusedGroup:
    """Sibling linears (all PatchedLinear, or all Int4Linear or Int8Linear of one format) of one input size,
    dtype, device and bias-ness, run as one product on their concatenated tensors (the module docstring
    says how)."""

    def __init__(self, members: Sequence[Any], where: str) -> None:
        self.members = list(members)
        self.where = where  # the siblings' names, for log lines
        self.int4 = isinstance(self.members[0], Int4Linear)
        self.eight_bit = isinstance(self.members[0], Int8Linear)
        self.rows: list[tuple[int, int]] = []  # each sibling's rows of the concatenated tensors (join)
        everyone = frozenset(range(len(self.members)))
        self.others = [everyone - {index} for index in range(len(self.members))]  # who is to come after each
        self.fusing = True
        # (x, its version, the product, the siblings still to take their part, the one that opened it)
        self.state: tuple[Any, int, Any, frozenset[int], int] | None = None
        self.tensors: list[Any] = []  # the concatenated tensors, one per slot
        self.runner: tuple[Any, Any] = (None, None)  # (weight or QuantizedWeight, bias) of the fused product
        self.expected: list[tuple[dict[str, Any], str, int]] = []  # each sibling tensor's address
        self.converted_by: Callable[..., Any] | None = None
        self.join()

    # -- storage -------------------------------------------------------------------------------

    def slots(self, member: Any) -> list[Slot]:
        """Where `member`'s tensors live, in the order they are concatenated."""
        if self.int4 or self.eight_bit:
            buffers = member._modules["weight"]._buffers
            found: list[Slot] = [(buffers, "qweight"), (buffers, "scales")]
            if buffers.get("zeros") is not None:
                found.append((buffers, "zeros"))
        else:
            found = [(member._parameters, "weight")]
        if member._parameters["bias"] is not None:
            found.append((member._parameters, "bias"))
        return found

    def join(self) -> None:
        """Concatenate the siblings' tensors, slot by slot, and make each sibling's a view of them."""
        per_member = [[where[name] for where, name in self.slots(member)] for member in self.members]
        # Each sibling's rows as its tensors have them now: one replaced by a weight of another size
        # (`param.data = ...`) keeps its own rows, never another sibling's.
        sizes = [{int(part.shape[0]) for part in parts} for parts in per_member]
        if any(len(size) != 1 for size in sizes):
            raise AutotuneError(f"{self.where}: a sibling's weight and bias differ in their rows")
        ends = list(itertools.accumulate((size.pop() for size in sizes), initial=0))
        joined = []
        for parts in zip(*per_member, strict=True):
            if len({(part.device, part.dtype, part.shape[1:]) for part in parts}) > 1:
                raise AutotuneError(f"{self.where} differ in device, dtype or size: they cannot share one weight")
            joined.append(torch.cat([part.detach() for part in parts]))
        self.tensors = joined
        self.rows = list(itertools.pairwise(ends))
        self.view()

    def view(self) -> None:
        """Make each sibling's tensors row-block views of the concatenated ones; note their addresses."""
        self.expected = []
        for member, (start, stop) in zip(self.members, self.rows, strict=True):
            for (where, name), whole in zip(self.slots(member), self.tensors, strict=True):
                part = whole[start:stop]
                if isinstance(where[name], torch.nn.Parameter):
                    where[name].data = part  # the same Parameter object: ties and optimizers keep it
                else:
                    where[name] = part
                self.expected.append((where, name, part.data_ptr()))
        try:
            self.runner = self._runner()
        except AutotuneError as error:
            # Converted to a dtype the low-bit formats do not take (`.float()` on an int4 model): each
            # sibling holds its converted view and runs alone, as an unfused one does, until a
            # conversion back makes the fused weight valid again.
            self.runner = (None, None)
            log.info("%s: not fused while %s", self.where, error)
        for tensor in self.tensors:
            _mark_static(tensor)

    def _runner(self) -> tuple[Any, Any]:
        bias = self.tensors[-1] if self.members[0]._parameters["bias"] is not None else None
        if not (self.int4 or self.eight_bit):
            return self.tensors[0], bias
        first = self.members[0]._modules["weight"]
        if self.eight_bit:
            return Quantized8Weight(self.tensors[0], self.tensors[1], first.kind), bias
        zeros = None if first.sym else self.tensors[2]
        return QuantizedWeight(self.tensors[0], self.tensors[1], zeros, first.group), bias

    def moved(self) -> bool:
        """Whether a sibling's tensor is no longer its view of the concatenated ones."""
        return any(where[name].data_ptr() != address for where, name, address in self.expected)

    def convert(self, fn: Callable[[Any], Any]) -> None:
        """A sibling's _apply(fn) (.to(), .half(), .cuda()): convert the concatenated tensors once and
        view them again in every sibling. Every sibling's _apply calls this with the same `fn` in one
        .to(): the first converts, the others find it done."""
        if fn is self.converted_by:
            return
        self.converted_by = fn
        self.tensors = [fn(tensor) for tensor in self.tensors]
        self.view()
        for member in self.members:
            for parameter in member._parameters.values():
                if parameter is not None and parameter.grad is not None:
                    parameter.grad = fn(parameter.grad)

    # -- calls ---------------------------------------------------------------------------------

    def output(self, index: int, x: Any, member: Any) -> Any:
        """Sibling `index`'s output for x: its slice of the product the group holds for x, or of a
        new one, or its own product where fusing does not apply."""
        # x's version (in-place changes) is checked in eager only: dynamo keeps it symbolic.
        compiling = torch.compiler.is_compiling()
        version = 0 if compiling else x._version
        state = self.state
        if state is not None:
            if state[0] is x and state[1] == version and index in state[3]:
                waiting = state[3] - {index}
                self.state = (x, state[1], state[2], waiting, state[4]) if waiting else None
                start, stop = self.rows[index]
                return state[2][..., start:stop]
            if index == state[4]:
                self.state = None  # the sibling that opened the last round opens another: that one was cut short
            else:
                self.stop("a sibling read another input than the one its siblings were given")
        if not self.fusing or self.recording():
            return member.alone(x)
        if not compiling and self.moved():
            self.refresh()
            if not self.fusing:
                return member.alone(x)
        weight, bias = self.runner
        if weight is None:  # converted to a dtype the fused low-bit weight does not take (view)
            return member.alone(x)
        run = int4_linear if self.int4 else eight_bit_linear if self.eight_bit else float_linear
        product = run(x, weight, bias, member.db)
        self.state = (x, version, product, self.others[index], index)
        start, stop = self.rows[index]
        return product[..., start:stop]

    def recording(self) -> bool:
        """Whether autograd records here for a sibling's parameter (the concatenated tensors have no
        gradient path to the Parameters)."""
        if not torch.is_grad_enabled():
            return False
        return any(p is not None and p.requires_grad for m in self.members for p in m._parameters.values())

    def refresh(self) -> None:
        """A sibling's tensor was replaced (`param.data = ...`, a deepcopy): concatenate them again."""
        try:
            self.join()
        except AutotuneError as error:
            self.stop(str(error))
        else:
            log.info("%s: a weight was replaced since patching: concatenated again", self.where)

    def stop(self, why: str) -> None:
        """Run each sibling alone from now on."""
        self.state = None
        if self.fusing:
            self.fusing = False
            log.info("%s: not fused from now on (%s)", self.where, why)


def _mark_static(tensor: Any) -> None:
    """A static input for torch.compile's CUDA graphs, as a module's parameters are (they would copy
    a plain tensor attribute into their own buffer at each replay)."""
    import torch._dynamo

    torch._dynamo.mark_static_address(tensor)


class Fused:
    """What makes a patched linear (float, int4 or 8-bit) a member of a FusedGroup: its product comes from
    the group, `alone` runs its own unfused forward, and converting it converts the group's tensors.
    Mixed in ahead of the patched class (FusedLinear(Fused, PatchedLinear)), whose forward `alone` runs."""

    fused_group: FusedGroup
    fused_index: int

    def forward(self, input: torch.Tensor) -> Any:
        return self.fused_group.output(self.fused_index, input, self)

    def alone(self, x: torch.Tensor) -> Any:
        return super().forward(x)  # type: ignore[misc]  # the patched class's forward, next in the MRO

    def _apply(self, fn: Callable[[Any], Any], recurse: bool = True) -> Any:
        self.fused_group.convert(fn)  # its tensors (a low-bit weight's buffers too) are among the group's
        return self

    def release(self) -> torch.nn.Linear:
        del self.fused_group, self.fused_index
        return super().release()  # type: ignore[misc]


class FusedLinear(Fused, PatchedLinear):
    """A PatchedLinear whose product comes from its FusedGroup."""


class FusedInt4Linear(Fused, Int4Linear):
    """An Int4Linear whose product comes from its FusedGroup."""


class FusedInt8Linear(Fused, Int8Linear):
    """An Int8Linear whose product comes from its FusedGroup."""


def fuse(members: Sequence[Any], where: str) -> FusedGroup:
    """Run `members` (patched siblings, checked compatible by the caller) as one FusedGroup."""
    group = FusedGroup(members, where)
    fused = FusedInt4Linear if group.int4 else FusedInt8Linear if group.eight_bit else FusedLinear
    for index, member in enumerate(members):
        member.__class__ = fused
        member.fused_group, member.fused_index = group, index
    return group


def compatible(member: Any) -> tuple[Any, ...]:
    """What siblings must share to be fused: kind, input size, dtype, device, bias-ness, low-bit format."""
    if isinstance(member, Int4Linear):
        weight = member._modules["weight"]
        scales = weight._buffers["scales"]
        kind: tuple[Any, ...] = ("int4", weight.group, weight.sym, scales.dtype, scales.device)
    elif isinstance(member, Int8Linear):
        weight = member._modules["weight"]
        scales = weight._buffers["scales"]
        kind = (weight.kind, scales.dtype, scales.device)
    else:
        weight = member._parameters["weight"]
        kind = ("float", weight.dtype, weight.device)
    return (*kind, member.in_features, member._parameters["bias"] is not None)


def sibling_groups(model: torch.nn.Module, patched: set[int]) -> list[tuple[str, list[Any]]]:
    """(names, members) of each set of compatible siblings among the modules just patched (`patched`:
    their ids), two or more of one parent named in SIBLINGS."""
    found = []
    taken: set[int] = set()
    for parent_name, parent in model.named_modules():
        children = parent._modules
        for names in SIBLINGS:
            by_kind: dict[tuple[Any, ...], list[tuple[str, Any]]] = {}
            for name in names:
                child = children.get(name)
                if child is not None and id(child) in patched and id(child) not in taken:
                    by_kind.setdefault(compatible(child), []).append((name, child))
            for named in by_kind.values():
                if len(named) > 1:
                    prefix = f"{parent_name}." if parent_name else ""
                    found.append((prefix + "/".join(name for name, _ in named), [child for _, child in named]))
                    taken.update(id(child) for _, child in named)
    return found
