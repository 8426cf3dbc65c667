"""autotune.patch and autotune.unpatch on the CPU where torch is installed (skipped elsewhere; the
transformers and peft cases where those are): the launch path is a double that multiplies with torch
(tests/torch_double.py), so what is checked is which modules are patched and how, that their outputs and
gradients are the unpatched model's, the state_dict, ties, int4 and 8-bit weights, fusing (eager and traced by
torch.compile) and unpatch. tests/test_gpu_patch.py runs the kernels themselves."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from autotune.core.errors import AutotuneError

torch = pytest.importorskip("torch")

import autotune  # noqa: E402  (after the skip: autotune.patch needs torch)
from autotune.model.fuse import FusedInt4Linear, FusedInt8Linear, FusedLinear  # noqa: E402
from autotune.model.modules import Int4Linear, Int8Linear, PatchedLinear  # noqa: E402
from tests import torch_double  # noqa: E402

nn = torch.nn


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[torch_double.TorchRuntime]:
    with torch_double.installed(monkeypatch) as double:
        yield double


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="autotune")
    return caplog


class Block(nn.Module):
    """Attention projections and an MLP as Llama names them, run in its order on one input."""

    def __init__(self, width: int = 64, kv: int = 32, hidden: int = 96, bias: bool = False) -> None:
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(width, width, bias=bias), nn.Linear(width, kv, bias=bias)
        self.v_proj, self.o_proj = nn.Linear(width, kv, bias=bias), nn.Linear(width, width, bias=bias)
        self.gate_proj, self.up_proj = nn.Linear(width, hidden, bias=bias), nn.Linear(width, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, width, bias=bias)

    def forward(self, x: Any) -> Any:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        h = x + self.o_proj(q * torch.cat([k, v], dim=-1).sigmoid())
        return h + self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


def _block(dtype: Any = torch.float32, **sizes: Any) -> Any:
    torch.manual_seed(0)
    return Block(**sizes).to(dtype)


def _close(got: Any, want: Any, tol: float = 1e-5) -> bool:
    return bool(torch.allclose(got.float(), want.float(), rtol=tol, atol=tol))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_each_float_dtype_is_patched_with_the_same_parameters(runtime: Any, dtype: Any) -> None:
    model = _block(dtype)
    before = dict(model.named_parameters())
    keys = list(model.state_dict())
    x = torch.randn(3, 64, dtype=dtype)
    with torch.no_grad():
        want = model(x)
        assert autotune.patch(model) is model
        got, one_row = model(x), model(x[:1])
    assert all(type(m) is PatchedLinear for m in model.children())
    assert all(p is before[name] for name, p in model.named_parameters())  # the very same Parameters
    assert list(model.state_dict()) == keys
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert _close(got, want, tol) and _close(one_row, want[:1], tol)
    assert runtime.calls.count("gemm") == 7 and runtime.calls.count("gemv") == 7  # every linear, each way


def test_cpu_weights_run_f_linear_so_a_patched_model_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import api

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the launch path was called for CPU tensors")

    monkeypatch.setattr(api, "linear", refuse)
    model = _block()
    x = torch.randn(2, 64)
    with torch.no_grad():
        want = model(x)
        autotune.patch(model, fuse=True)
        assert _close(model(x), want)
        model.to(torch.float64)  # .to() after patching: fused views moved together
        assert model.q_proj.weight.dtype == torch.float64
        assert _close(model(x.double()), want)


def test_subclasses_and_wrapped_forwards_are_skipped_with_a_line(runtime: Any, logged: Any) -> None:
    class Linear8bit(nn.Linear):  # as bitsandbytes' quantized layers are
        pass

    model = nn.Sequential(nn.Linear(8, 8), Linear8bit(8, 8), nn.MultiheadAttention(8, 2), nn.Linear(8, 8))
    model[3].forward = model[3].forward  # an accelerate-style hook on the instance
    autotune.patch(model)
    assert type(model[0]) is PatchedLinear and type(model[1]) is Linear8bit and type(model[3]) is nn.Linear
    assert type(model[2].out_proj) is nn.modules.linear.NonDynamicallyQuantizableLinear
    lines = [r.getMessage() for r in logged.records]
    assert any("1 (Linear8bit) left as it is: a subclass of nn.Linear" in line for line in lines)
    assert any("2.out_proj (NonDynamicallyQuantizableLinear) left as it is" in line for line in lines)
    assert any("3 (Linear) left as it is: its forward is replaced" in line for line in lines)
    assert lines[-1] == (
        "autotune.patch: 1 linears patched (0 int4, 1 float), 0 fused groups, 3 skipped, 0 already patched"
    )


def test_weights_on_the_meta_device_are_refused_before_anything_changes(runtime: Any) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8, device="meta")))
    with pytest.raises(AutotuneError, match=r"^1\.0's weight and bias are on the meta device: load the weights first"):
        autotune.patch(model)
    assert [type(m) for m in (model[0], model[1][0])] == [nn.Linear, nn.Linear]  # never half-patched
    model[1][0].weight = nn.Parameter(torch.randn(8, 8))  # loaded, its bias not: the message says which
    with pytest.raises(AutotuneError, match=r"^1\.0's bias is on the meta device"):
        autotune.patch(model)
    model = nn.Sequential(nn.Linear(32, 32), nn.Sequential(nn.Linear(32, 32))).half()
    with torch.no_grad():
        model[1][0].weight[0, 0] = float("nan")
    with pytest.raises(AutotuneError, match=r"^1\.0: the weight holds NaN or inf.*; nothing was patched$"):
        autotune.patch(model, "int8")  # which linear, named
    assert [type(m) for m in (model[0], model[1][0])] == [nn.Linear, nn.Linear]


def test_patching_twice_changes_nothing_more(runtime: Any, logged: Any) -> None:
    model = _block(torch.float16)
    autotune.patch(model, fuse=True)
    kinds = [type(m) for m in model.children()]
    autotune.patch(model, "int4", fuse=True)
    assert [type(m) for m in model.children()] == kinds
    assert logged.records[-1].getMessage().startswith("autotune.patch: 0 linears patched")
    assert logged.records[-1].getMessage().endswith("7 already patched")


def test_unpatch_restores_plain_linears_with_the_same_parameters(runtime: Any) -> None:
    model = _block()
    before = dict(model.named_parameters())
    x = torch.randn(2, 64)
    with torch.no_grad():
        want = model(x)
        autotune.unpatch(autotune.patch(model, fuse=True))
        assert _close(model(x), want)
    assert all(type(m) is nn.Linear and not hasattr(m, "fused_group") for m in model.children())
    assert all(p is before[name] for name, p in model.named_parameters())


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(AutotuneError, match="unknown weights 'int3': patch takes None, 'int4', 'int8', 'fp8'"):
        autotune.patch(nn.Linear(8, 8), "int3")
    with pytest.raises(AutotuneError, match="int4 group must be one of 32, 64, 128"):
        autotune.patch(nn.Linear(8, 8), "int4", group=100)
    with pytest.raises(AutotuneError, match=r"takes a torch\.nn\.Module, got dict"):
        autotune.patch({})


def test_import_autotune_leaves_torch_unimported() -> None:
    code = "import sys, autotune; autotune.patch, autotune.unpatch; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- int4 ------------------------------------------------------------------------------------------


def test_int4_quantizes_covered_weights_and_keeps_the_rest_in_float(runtime: Any, logged: Any) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 16, bias=False), nn.Linear(64, 8).float())
    model[0].half(), model[1].half()
    weight = model[0].weight.detach().clone()
    autotune.patch(model, "int4", group=64, sym=False)
    assert type(model[0]) is Int4Linear and type(model[1]) is PatchedLinear and type(model[2]) is PatchedLinear
    assert "weight" not in dict(model[0].named_parameters())  # the float weight is dropped
    lines = [r.getMessage() for r in logged.records]
    assert "autotune.patch: 1 kept in float: in_features = 32 is not a multiple of the int4 group 64" in lines
    assert any(line.startswith("autotune.patch: 2 kept in float: float32 weights") for line in lines)
    assert list(model[0].state_dict()) == [
        "bias",
        "weight.qweight",
        "weight.scales",
        "weight.zeros",
        "weight._extra_state",
    ]
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        got = model[0](x)
    want = torch.nn.functional.linear(x.float(), model[0].weight.dequantize(torch.float32), model[0].bias.float())
    assert _close(got, want, 1e-2) and runtime.calls == ["qgemm"]
    assert (model[0].weight.dequantize(torch.float32) - weight.float()).abs().max() < 0.1


def test_an_int4_linear_is_frozen_but_passes_gradients_to_its_input(runtime: Any) -> None:
    model = autotune.patch(nn.Linear(128, 8).half(), "int4")
    x = torch.randn(2, 128, dtype=torch.float16, requires_grad=True)
    model(x).float().sum().backward()
    dense = model.weight.dequantize(torch.float32)
    assert _close(x.grad, dense.sum(0).expand(2, 128), 1e-2) and model.bias.grad is not None
    model.weight.scales.requires_grad_(True)
    with pytest.raises(AutotuneError, match="an int4 weight is frozen"):
        model(x)


def test_an_int4_state_dict_loads_into_a_model_patched_alike_only(runtime: Any) -> None:
    saved = autotune.patch(_block(torch.float16), "int4", group=32, fuse=True)
    state = saved.state_dict()
    assert "q_proj.weight.qweight" in state and "q_proj.weight" not in state
    other = autotune.patch(_block(torch.float16, bias=False), "int4", group=32, fuse=True)
    torch.manual_seed(1)
    for module in other.modules():  # other values than the saved model's
        for buffer in module.buffers(recurse=False):
            buffer.random_(0, 8) if buffer.dtype == torch.uint8 else buffer.uniform_(0.01, 0.02)
    other.load_state_dict(state)
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        assert torch.equal(other(x), saved(x))  # the fused views took the loaded values too
    with pytest.raises(RuntimeError, match="Missing key"):
        _block(torch.float16).load_state_dict(state)


def test_checkpoint_weights_by_name_are_patched_in_and_mismatches_refused(runtime: Any, logged: Any) -> None:
    """autotune.patch(model, weights={name: QuantizedWeight}), such as autotune.load_quantized gives: the
    named linears run them (fused too), the rest in float; a wrong name, shape or dtype changes nothing."""
    from autotune.ops.qgemm import checkpoints

    model = _block(torch.float16)
    torch.manual_seed(3)
    source = nn.Linear(64, 64).half()
    qweight, qzeros, scales = checkpoints.to_awq(autotune.quantize(source.weight.detach().numpy(), group=32, sym=False))
    imported = autotune.from_awq(torch.from_numpy(qweight), torch.from_numpy(qzeros), torch.from_numpy(scales), 32)
    assert not imported.sym and torch.equal(
        imported.dequantize(), autotune.quantize(source.weight, group=32, sym=False).dequantize()
    )
    bad = {
        "nowhere": ({"nowhere": imported}, "not a linear autotune.patch covers"),
        "shape": ({"k_proj": imported}, r"k_proj is \(32, 64\), its int4 weight \(64, 64\)"),
        "type": ({"q_proj": source.weight}, "not a QuantizedWeight"),
    }
    for weights, message in bad.values():
        with pytest.raises(AutotuneError, match=message):
            autotune.patch(model, weights=weights)
    with pytest.raises(AutotuneError, match="scales are float16, the model's linear bfloat16"):
        autotune.patch(_block(torch.bfloat16), weights={"q_proj": imported})
    assert not any(isinstance(m, (Int4Linear, PatchedLinear)) for m in model.modules())
    autotune.patch(model, weights={"q_proj": imported, "o_proj": copy.deepcopy(imported)}, fuse=True)
    assert model.q_proj.weight is imported and isinstance(model.o_proj, Int4Linear)
    assert isinstance(model.down_proj, PatchedLinear)
    assert "autotune.patch: 5 linears without an int4 weight in `weights` run in float" in [
        r.getMessage() for r in logged.records
    ]
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        got = model.q_proj(x)
    assert _close(got, torch.nn.functional.linear(x.float(), imported.dequantize(torch.float32)), 1e-2)


def test_a_model_on_the_meta_device_is_patched_where_the_checkpoint_gives_every_weight(runtime: Any) -> None:
    """A model built without memory (torch.device("meta")) takes its int4 weights from a checkpoint's
    mapping: each linear given one is patched; one left without a weight is refused, nothing changed."""
    with torch.device("meta"):
        model = Block().half()
    torch.manual_seed(4)
    weights = {
        name: autotune.quantize(torch.randn(linear.out_features, linear.in_features).half(), group=32)
        for name, linear in model.named_children()
    }
    partial = dict(weights)
    del partial["down_proj"]
    with pytest.raises(AutotuneError, match="down_proj's weight is on the meta device"):
        autotune.patch(model, weights=partial)
    assert not any(isinstance(m, (Int4Linear, PatchedLinear)) for m in model.modules())
    autotune.patch(model, weights=weights)
    assert all(isinstance(m, Int4Linear) for m in model.children())
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        got = model.v_proj(x)
    assert _close(got, torch.nn.functional.linear(x.float(), weights["v_proj"].dequantize(torch.float32)), 1e-2)


def test_unpatch_dequantizes_int4_weights(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "int4", fuse=False, group=32)
    dequantized = model.q_proj.weight.dequantize()
    autotune.unpatch(model)
    assert type(model.q_proj) is nn.Linear and isinstance(model.q_proj.weight, nn.Parameter)
    assert torch.equal(model.q_proj.weight, dequantized)


# -- 8-bit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_eight_bit_quantizes_covered_weights_and_keeps_the_rest_in_float(runtime: Any, logged: Any, kind: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(24, 16, bias=False), nn.Linear(64, 8).float())
    model[0].half(), model[1].half()
    weight = model[0].weight.detach().clone()
    autotune.patch(model, kind)
    assert type(model[0]) is Int8Linear and type(model[1]) is PatchedLinear and type(model[2]) is PatchedLinear
    assert "weight" not in dict(model[0].named_parameters()) and model[0].weight.kind == kind
    lines = [r.getMessage() for r in logged.records]
    assert (
        f"autotune.patch: 1 kept in float: in_features = 24 is not a multiple of 16 (the {kind} kernels' pieces)"
        in lines
    )
    assert any(
        line.startswith(f"autotune.patch: 2 kept in float: float32 weights; the {kind} kernels") for line in lines
    )
    assert (
        f"autotune.patch: 3 linears patched (1 {kind}, 2 float), 0 fused groups, 0 skipped, 0 already patched" in lines
    )
    assert list(model[0].state_dict()) == ["bias", "weight.qweight", "weight.scales", "weight._extra_state"]
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        got = model[0](x)
    want = torch.nn.functional.linear(x.float(), model[0].weight.dequantize(torch.float32), model[0].bias.float())
    assert _close(got, want, 1e-2) and runtime.calls == ["q8gemm"]
    step = 2.0**-4 if kind == "fp8" else 2.0**-7  # the codes' relative step, times the row's largest value
    assert (
        (model[0].weight.dequantize(torch.float32) - weight.float()).abs().max(1).values
        <= weight.float().abs().max(1).values * step
    ).all()


def test_an_eight_bit_linear_is_frozen_and_unpatches_to_its_dequantized_weight(runtime: Any) -> None:
    model = autotune.patch(nn.Linear(128, 8).half(), "int8")
    x = torch.randn(2, 128, dtype=torch.float16, requires_grad=True)
    model(x).float().sum().backward()
    assert _close(x.grad, model.weight.dequantize(torch.float32).sum(0).expand(2, 128), 1e-2)
    model.weight.scales.requires_grad_(True)
    with pytest.raises(AutotuneError, match="an int8 weight is frozen"):
        model(x)
    model.weight.scales.requires_grad_(False)
    dequantized = model.weight.dequantize()
    autotune.unpatch(model)
    assert type(model) is nn.Linear and torch.equal(model.weight, dequantized)


def test_an_eight_bit_state_dict_loads_into_a_model_patched_alike_only(runtime: Any) -> None:
    saved = autotune.patch(_block(torch.float16), "fp8", fuse=True)
    state = saved.state_dict()
    assert "q_proj.weight.qweight" in state and "q_proj.weight" not in state
    torch.manual_seed(1)
    other = autotune.patch(Block().half(), "fp8", fuse=True)  # other values than the saved model's
    other.load_state_dict(state)
    x = torch.randn(2, 64, dtype=torch.float16)
    with torch.no_grad():
        assert torch.equal(other(x), saved(x))
    with pytest.raises(AutotuneError, match="holds an 8-bit weight fp8"):
        autotune.patch(_block(torch.float16), "int8").load_state_dict(state)


def test_fused_eight_bit_siblings_run_one_op_a_group_eager_and_under_torch_compile(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "int8", fuse=True)
    assert type(model.q_proj) is FusedInt8Linear and type(model.o_proj) is Int8Linear
    plain = autotune.unpatch(autotune.patch(_block(torch.float16), "int8"))
    x = torch.randn(1, 64, dtype=torch.float16)
    with torch.no_grad():
        want = plain(x)
        runtime.calls.clear()
        eager = model(x)
        assert runtime.calls == ["q8gemm"] * 4 and _close(eager, want, 1e-2)  # q/k/v, o, gate/up, down
        runtime.calls.clear()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert runtime.calls == ["q8gemm"] * 4 and _close(compiled, want, 1e-2)
    assert model.q_proj.fused_group.state is None and model.q_proj.fused_group.fusing


def test_eight_bit_linears_of_more_than_64_rows_dequantize_eager_and_compiled(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "fp8")
    x = torch.randn(65, 64, dtype=torch.float16)
    with torch.no_grad():
        want = autotune.unpatch(autotune.patch(_block(torch.float16), "fp8"))(x)
        eager = model(x)
        assert runtime.calls == ["gemm"] * 7 and _close(eager, want, 1e-2)
        runtime.calls.clear()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert runtime.calls == ["gemm"] * 7 and _close(compiled, want, 1e-2)


# -- fuse ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_fused_siblings_run_one_launch_on_views_of_one_storage(runtime: Any, bias: bool) -> None:
    model = _block(bias=bias)
    keys = list(model.state_dict())
    x = torch.randn(3, 64)
    with torch.no_grad():
        want = model(x)
        autotune.patch(model, fuse=True)
        got = model(x)
    assert _close(got, want)
    assert runtime.calls == ["gemm"] * 4  # q/k/v, o, gate/up, down
    assert [type(m) for m in (model.q_proj, model.k_proj, model.v_proj, model.o_proj)] == [FusedLinear] * 3 + [
        PatchedLinear
    ]
    q, k, v = (model.q_proj.weight, model.k_proj.weight, model.v_proj.weight)
    assert k.data_ptr() == q.data_ptr() + q.numel() * q.element_size()
    assert v.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()
    assert list(model.state_dict()) == keys
    assert model.q_proj.fused_group.state is None  # forgotten once every sibling took its part


def test_a_sibling_given_another_input_runs_alone_and_the_group_stops_fusing(runtime: Any) -> None:
    model = autotune.patch(_block(), fuse=True)
    x, memory = torch.randn(2, 64), torch.randn(5, 64)
    with torch.no_grad():
        q = model.q_proj(x)
        k, v = model.k_proj(memory), model.v_proj(memory)  # cross-attention: k and v read another input
    assert _close(k, memory @ model.k_proj.weight.T) and _close(v, memory @ model.v_proj.weight.T)
    assert _close(q, x @ model.q_proj.weight.T)
    group = model.q_proj.fused_group
    assert not group.fusing and group.state is None


def test_the_sibling_that_opened_a_round_cut_short_starts_another(runtime: Any) -> None:
    model = autotune.patch(_block(), fuse=True)
    x = torch.randn(2, 64)
    with torch.no_grad():
        model.q_proj(torch.randn(2, 64))  # k and v never take their part (an exception, say)
        model.q_proj(x)
        k, v = model.k_proj(x), model.v_proj(x)
    assert _close(k, x @ model.k_proj.weight.T) and _close(v, x @ model.v_proj.weight.T)
    assert model.q_proj.fused_group.fusing and runtime.calls == ["gemm", "gemm"]


def test_an_input_changed_in_place_is_not_served_from_the_held_product(runtime: Any) -> None:
    model = autotune.patch(_block(), fuse=True)
    x = torch.randn(2, 64)
    with torch.no_grad():
        model.q_proj(x)
        x.mul_(2)
        assert _close(model.k_proj(x), x @ model.k_proj.weight.T)


def test_fused_weights_follow_load_state_dict_to_and_replaced_data(runtime: Any) -> None:
    model = autotune.patch(_block(), fuse=True)
    fresh = _block()
    with torch.no_grad():
        for p in fresh.parameters():
            p.mul_(-1)
        model.load_state_dict(fresh.state_dict())
        x = torch.randn(2, 64)
        assert _close(model(x), fresh(x))
        model.half()
        assert model.k_proj.weight.data_ptr() == model.q_proj.weight.data_ptr() + 64 * 64 * 2
        assert _close(model(x.half()), fresh(x), 2e-2)
        model.float()
        model.k_proj.weight.data = torch.zeros(32, 64)  # replaced: concatenated again before the next launch
        model.q_proj(x)
        assert _close(model.k_proj(x), torch.zeros(2, 32))
    assert model.q_proj.fused_group.fusing


def test_a_sibling_replaced_by_another_size_keeps_its_own_rows(runtime: Any) -> None:
    """Concatenated again, each sibling takes the rows its weight has now, not the ones it had: its
    output keeps its own width and the other siblings' weights stay theirs."""
    model = autotune.patch(_block(), fuse=True)
    v_weight = model.v_proj.weight.detach().clone()
    with torch.no_grad():
        model.k_proj.weight = nn.Parameter(torch.randn(8, 64))
        x = torch.randn(2, 64)
        q, k, v = model.q_proj(x), model.k_proj(x), model.v_proj(x)
    assert (q.shape[-1], k.shape[-1], v.shape[-1]) == (64, 8, 32)
    assert model.k_proj.weight.shape == (8, 64) and torch.equal(model.v_proj.weight, v_weight)
    assert _close(k, x @ model.k_proj.weight.T) and _close(v, x @ v_weight.T)


@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_a_fused_low_bit_model_converted_to_float64_runs_as_an_unfused_one(weights: str) -> None:
    """The low-bit formats take no float64 scales: converted so (on the CPU, where F.linear runs), the
    siblings hold their converted views and run alone, as unfused modules do; converting back fuses again."""
    options = {"group": 32} if weights == "int4" else {}
    models = [autotune.patch(_block(torch.float16), weights, fuse=fuse, **options) for fuse in (False, True)]
    x = torch.randn(2, 64, dtype=torch.float64)
    with torch.no_grad():
        for model in models:
            model.to(torch.float64)
            assert model.q_proj.weight.scales.dtype == model.o_proj.weight.scales.dtype == torch.float64
        assert _close(models[1](x), models[0](x))
        for model in models:
            model.half()
        assert models[1].q_proj.fused_group.runner[0] is not None
        assert _close(models[1](x.half()), models[0](x.half()), 2e-2)


def test_fused_int4_buffers_move_together(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "int4", group=32, fuse=True)
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        model.to(torch.bfloat16)
        q, k = model.q_proj.weight, model.k_proj.weight
        assert q.scales.dtype == k.scales.dtype == torch.bfloat16
        assert k.scales.data_ptr() == q.scales.data_ptr() + q.scales.numel() * 2
        assert k.qweight.data_ptr() == q.qweight.data_ptr() + q.qweight.numel()
        want = torch.nn.functional.linear(x, k.dequantize())
        model.q_proj(x)
        assert _close(model.k_proj(x), want, 1e-2)
    assert runtime.calls == ["qgemm"]  # the fused launch, in bfloat16


def test_an_input_in_another_dtype_than_the_weight_runs_f_linear(runtime: Any) -> None:
    model = _block()
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model.o_proj(x)
        autotune.patch(model)
        got = model.o_proj(x)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    assert runtime.calls == []  # torch's autocast rules, as before patching


def test_where_autograd_records_siblings_run_alone_and_each_gets_its_gradient(runtime: Any) -> None:
    model, plain = _block(), _block()
    autotune.patch(model, fuse=True)
    x = torch.randn(3, 64)
    model(x).square().sum().backward()
    plain(x).square().sum().backward()
    for (name, mine), theirs in zip(model.named_parameters(), plain.parameters(), strict=True):
        assert mine.grad is not None and _close(mine.grad, theirs.grad, 1e-4), name
    assert runtime.calls.count("gemm") >= 7  # forward unfused: one product a linear


def test_fused_int4_siblings_trace_under_torch_compile_fullgraph(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "int4", group=32, fuse=True)
    assert type(model.q_proj) is FusedInt4Linear and type(model.up_proj) is FusedInt4Linear
    x = torch.randn(1, 64, dtype=torch.float16)
    with torch.no_grad():
        want = model(x)
        runtime.calls.clear()
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert _close(got, want, 1e-3)
    assert runtime.calls == ["qgemm"] * 4  # one launch a group: q/k/v, o, gate/up, down
    assert model.q_proj.fused_group.state is None and model.q_proj.fused_group.fusing


def test_int4_linears_of_more_than_64_rows_dequantize_with_the_op_eager_and_compiled(runtime: Any) -> None:
    model = autotune.patch(_block(torch.float16), "int4", group=32, sym=False)
    x = torch.randn(65, 64, dtype=torch.float16)
    with torch.no_grad():
        want = autotune.unpatch(autotune.patch(_block(torch.float16), "int4", group=32, sym=False))(x)
        eager = model(x)
        assert runtime.calls == ["qdequant", "gemm"] * 7 and _close(eager, want, 1e-2)
        runtime.calls.clear()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    assert runtime.calls == ["qdequant", "gemm"] * 7 and _close(compiled, want, 1e-2)


# -- transformers and peft -------------------------------------------------------------------------


def _llama(dtype: Any = torch.float32) -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(dtype).eval()


@pytest.mark.parametrize("fuse", [False, True])
def test_a_llama_patched_gives_its_logits_and_keeps_the_tie(runtime: Any, fuse: bool) -> None:
    model = _llama()
    ids = torch.tensor([[1, 5, 7, 9, 3]])
    keys = list(model.state_dict())
    with torch.no_grad():
        want = model(ids).logits
        autotune.patch(model, fuse=fuse)
        got = model(ids).logits
    assert _close(got, want, 1e-4)
    assert type(model.lm_head) is PatchedLinear and model.lm_head.weight is model.model.embed_tokens.weight
    assert list(model.state_dict()) == keys
    assert runtime.calls.count("gemm") == (1 + 2 * (4 if fuse else 7))  # lm_head, then each layer's launches


def test_a_fused_llama_traces_fullgraph_with_one_op_a_group(runtime: Any) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    model = _llama(torch.float16)
    ids = torch.tensor([[1, 5, 7]])
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        autotune.patch(model, fuse=True)
        counter = CompileCounterWithBackend("aot_eager")
        got = torch.compile(model, fullgraph=True, backend=counter)(ids, use_cache=False).logits
    assert _close(got, want, 1e-2) and counter.frame_count == 1
    targets = [str(node.target) for graph in counter.graphs for node in graph.graph.nodes]
    assert targets.count("autotune.linear") == 1 + 2 * 4  # lm_head, then q/k/v, o, gate/up, down a layer


def test_an_int4_llama_keeps_its_tied_lm_head_in_float(runtime: Any, logged: Any) -> None:
    model = _llama(torch.float16)
    ids = torch.tensor([[1, 5, 7]])
    autotune.patch(model, "int4", group=64, fuse=True)
    assert type(model.lm_head) is PatchedLinear and model.lm_head.weight is model.model.embed_tokens.weight
    assert type(model.model.layers[0].self_attn.q_proj) is FusedInt4Linear
    assert type(model.model.layers[0].self_attn.o_proj) is Int4Linear
    assert any(
        r.getMessage() == "autotune.patch: lm_head kept in float: its weight is tied to another module's "
        "(lm_head and embed_tokens): quantizing it would untie them"
        for r in logged.records
    )
    with torch.no_grad():
        got = model(ids).logits
        autotune.unpatch(model)  # the dequantized weights: what the int4 model multiplies by
        want = model(ids).logits
    assert _close(got, want, 2e-2)


def test_a_lora_models_base_layers_and_adapters_are_patched_and_train(runtime: Any) -> None:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model, plain = (peft.get_peft_model(_llama(), config) for _ in range(2))
    autotune.patch(model, fuse=True)
    attention = model.base_model.model.model.layers[0].self_attn
    assert type(attention.q_proj.base_layer) is PatchedLinear
    assert type(attention.q_proj.lora_A["default"]) is PatchedLinear
    assert type(attention.k_proj) is PatchedLinear  # its siblings are LoRA layers: nothing to fuse with
    ids = torch.tensor([[1, 5, 7, 9]])
    model(ids).logits.square().mean().backward()
    plain(ids).logits.square().mean().backward()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, _ in trained)
    for (name, mine), theirs in zip(trained, [p for p in plain.parameters() if p.requires_grad], strict=True):
        assert _close(mine.grad, theirs.grad, 1e-4), name


def test_an_int4_lora_model_keeps_its_adapters_in_float_and_trains_them(runtime: Any) -> None:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    lora = peft.get_peft_model(_llama(torch.float16), config, autocast_adapter_dtype=False)  # float16 adapters
    model = autotune.patch(lora, "int4", group=64)
    q_proj = model.base_model.model.model.layers[0].self_attn.q_proj
    adapters = (q_proj.lora_A["default"], q_proj.lora_B["default"])
    assert type(q_proj.base_layer) is Int4Linear and [type(a) for a in adapters] == [PatchedLinear] * 2
    assert adapters[0].weight.dtype == torch.float16 and adapters[0].in_features % 64 == 0  # int4 would fit it
    model(torch.tensor([[1, 5, 7]])).logits.float().square().mean().backward()
    assert all(a.weight.grad is not None and a.weight.grad.abs().sum() > 0 for a in adapters)


def test_a_decode_steps_one_token_input_runs_one_gemv_on_its_vector(runtime: torch_double.TorchRuntime) -> None:
    # transformers passes (batch, tokens, K): at batch 1 and one token, one GEMV and y viewed back.
    weight = torch.randn(6, 8, dtype=torch.float64)
    for x in (torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 16, dtype=torch.float64)[..., ::2]):
        runtime.calls.clear()
        y = autotune.linear(x, weight)
        assert runtime.calls == ["gemv"] and y.shape == (1, 1, 6)
        torch.testing.assert_close(y, torch.nn.functional.linear(x, weight))


def test_a_low_bit_linear_refuses_a_bias_of_another_size(runtime: Any) -> None:
    weight = autotune.quantize(torch.randn(64, 128).half(), "int4", group=64)
    x = torch.randn(2, 128).half()
    with pytest.raises(AutotuneError, match=r"^bias has shape \(32,\): the int4 weight's outputs take \(64,\)"):
        autotune.linear(x, weight, torch.zeros(32).half())
    assert autotune.linear(x, weight, torch.zeros(64).half()).shape == (2, 64)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("shape", [(), (1,)])
def test_a_bias_of_one_value_is_broadcast_as_f_linear_does(runtime: Any, rows: int, shape: tuple[int, ...]) -> None:
    """F.linear adds a bias of shape () or (1,) to every output; the one-row GEMV path had copied it as
    it was and the GEMV wrote into a tensor of the wrong size. The caller's bias stays untouched."""
    weight, x = torch.randn(6, 8, dtype=torch.float64), torch.randn(rows, 8, dtype=torch.float64)
    bias = torch.full(shape, 0.5, dtype=torch.float64)
    torch.testing.assert_close(autotune.linear(x, weight, bias), torch.nn.functional.linear(x, weight, bias))
    assert bias.shape == shape and bool((bias == 0.5).all())
    with pytest.raises(AutotuneError, match=r"^bias has shape \(2,\): W's outputs take \(6,\)"):
        autotune.linear(x, weight, torch.zeros(2, dtype=torch.float64))
    quantized = autotune.quantize(torch.randn(64, 128).half(), "int4", group=64)
    xq, bq = torch.randn(rows, 128).half(), torch.full(shape, 0.5).half()
    expected = torch.nn.functional.linear(xq.float(), quantized.dequantize().float(), bq.float())
    torch.testing.assert_close(autotune.linear(xq, quantized, bq).float(), expected, rtol=2e-2, atol=2e-2)


def test_the_torch_op_has_gradients_without_a_bias(runtime: Any) -> None:
    """Without a bias torch hands the op's backward two flags, not three (torch.compile training of a
    model whose linears have no bias, as Llama's)."""
    for call in (lambda x, w: torch.ops.autotune.linear(x, w, None), lambda x, w: torch.ops.autotune.linear(x, w)):
        x, w = torch.randn(4, 10, requires_grad=True), torch.randn(3, 10, requires_grad=True)
        call(x, w).square().sum().backward()
        x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        torch.nn.functional.linear(x2, w2).square().sum().backward()
        assert _close(x.grad, x2.grad, 1e-4) and _close(w.grad, w2.grad, 1e-4)


def test_linear_of_arguments_it_does_not_take_is_one_line(runtime: Any) -> None:
    """A 0-d x, a float or list bias, a W of three dimensions: IndexError and AttributeError before."""
    weight, x = torch.randn(8, 4, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    for args, said in (
        ((torch.tensor(1.0), weight), r"linear takes x \(\.\.\., K\) and W \(N, K\), got x \(\) and W \(8, 4\)"),
        ((x, torch.randn(8, 4, 2)), r"got x \(2, 4\) and W \(8, 4, 2\)"),
        ((x, weight, 1.0), r"bias is float: give a tensor of shape \(8,\), or None"),
        ((x, weight, [0.0] * 8), r"bias is list"),
    ):
        with pytest.raises(AutotuneError, match=said):
            autotune.linear(*args)
