"""The canonical int4 weight format (docs/lowbit.md) on numpy: packing, quantize's error bound, the
checks' one-line errors; torch's QuantizedWeight where torch is installed. All on the CPU."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import autotune
from autotune.core import dtypes
from autotune.core.errors import AutotuneError
from autotune.ops.qgemm import format as int4

RNG_SEED = 46


def _weights(n: int, k: int, heavy: bool = False) -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED)
    values = rng.standard_t(2, size=(n, k)) if heavy else rng.standard_normal((n, k))
    return values.astype(np.float32)


def _scale_per_element(weight: int4.Int4Weight) -> np.ndarray:
    scales = dtypes.decode(weight.scales, weight.scale_dtype) if weight.scale_dtype == "bfloat16" else weight.scales
    return np.repeat(np.asarray(scales, dtype=np.float64), weight.group, axis=1)


def _assert_within_half_a_step(w: np.ndarray, weight: int4.Int4Weight) -> None:
    """|w - dequantized| <= s / 2 with the stored scale, up to float32 rounding of w / s."""
    error = np.abs(w.astype(np.float64) - int4.dequantize(weight))
    bound = _scale_per_element(weight) * (0.5 + 1e-6)
    assert (error <= bound).all(), float((error - bound).max())


def test_packing_puts_even_k_in_the_low_nibble() -> None:
    codes = np.array([[1, 2, 3, 15], [0, 8, 15, 0]], dtype=np.uint8)
    packed = int4.pack_int4(codes)
    assert packed.dtype == np.uint8
    assert packed.tolist() == [[0x21, 0xF3], [0x80, 0x0F]]
    assert np.array_equal(int4.unpack_int4(packed), codes)


def test_unpack_then_pack_is_the_identity_on_every_byte() -> None:
    every_byte = np.arange(256, dtype=np.uint8).reshape(4, 64)
    codes = int4.unpack_int4(every_byte)
    assert codes.shape == (4, 128) and int(codes.max()) == 15
    assert np.array_equal(int4.pack_int4(codes), every_byte)


@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize("sym", [True, False])
def test_dequantize_is_within_half_a_step(group: int, sym: bool) -> None:
    w = _weights(7, 256)  # odd N
    weight = int4.quantize_int4(w, group, sym)
    assert weight.qweight.shape == (7, 128) and weight.qweight.dtype == np.uint8
    assert weight.scales.shape == (7, 256 // group) and weight.scales.dtype == np.float16
    assert (weight.zeros is None) == sym
    assert weight.variant == (f"g{group}" if sym else f"g{group}a")
    _assert_within_half_a_step(w, weight)


def test_symmetric_codes_use_the_whole_range() -> None:
    """s = max|w| / 7.5: a group's extremes land at the edge of the codes' span, on 15 and on 1 (on 0
    only where the scale is exact, since it is rounded up)."""
    codes = int4.unpack_int4(int4.quantize_int4(_weights(16, 128), 32).qweight)
    assert int(codes.min()) <= 1 and int(codes.max()) == 15


def test_asymmetric_zeros_are_codes_and_positive_groups_keep_the_bound() -> None:
    w = np.abs(_weights(3, 128)) + 1.0  # every group above 0: its range is widened to hold 0
    weight = int4.quantize_int4(w, 64, sym=False)
    assert weight.zeros is not None and weight.zeros.dtype == np.uint8
    assert int(weight.zeros.max()) <= 15
    _assert_within_half_a_step(w, weight)


def test_k_of_96_with_groups_of_32() -> None:
    w = _weights(5, 96)
    weight = int4.quantize_int4(w, 32, sym=False)
    assert (weight.n, weight.k) == (5, 96) and weight.scales.shape == (5, 3)
    _assert_within_half_a_step(w, weight)


@pytest.mark.parametrize(
    ("shape", "group", "message"),
    [
        ((4, 96), 64, "K = 96 is not a multiple"),
        ((4, 33), 32, "K = 33 is odd"),
        ((4, 128), 16, "group must be one of 32, 64, 128"),
        ((128,), 32, "2-D weight"),
    ],
)
def test_bad_shapes_and_groups_are_one_line_errors(shape: tuple[int, ...], group: int, message: str) -> None:
    with pytest.raises(AutotuneError, match=message) as raised:
        int4.quantize_int4(np.ones(shape, dtype=np.float32), group)
    assert "\n" not in str(raised.value)


def test_heavy_tailed_weights_stay_finite() -> None:
    w = _weights(8, 1024, heavy=True)
    for sym in (True, False):
        weight = int4.quantize_int4(w, 128, sym)
        assert np.isfinite(weight.scales).all()
        _assert_within_half_a_step(w, weight)


def test_all_zero_groups_dequantize_to_zero() -> None:
    w = _weights(2, 128)
    w[0, :64] = 0.0
    for sym in (True, False):
        weight = int4.quantize_int4(w, 64, sym)
        assert float(weight.scales[0, 0]) == 0.0
        deq = int4.dequantize(weight)
        assert np.isfinite(deq).all() and not deq[0, :64].any()
        _assert_within_half_a_step(w, weight)


def test_bfloat16_scales_travel_as_words_and_round_up() -> None:
    w = _weights(4, 128)
    weight = int4.quantize_int4(w, 32, scale_dtype="bfloat16")
    assert weight.scale_dtype == "bfloat16" and weight.scales.dtype == np.uint16
    exact = np.abs(w).reshape(4, 4, 32).max(axis=-1) / np.float32(7.5)
    assert (dtypes.decode(weight.scales, "bfloat16") >= exact).all()
    _assert_within_half_a_step(w, weight)
    assert int4.int4_weight(weight.qweight, weight.scales, None, 32).scale_dtype == "bfloat16"


def test_float16_overflow_is_an_error_and_float32_scales_take_it() -> None:
    w = np.full((2, 32), 1e6, dtype=np.float32)
    with pytest.raises(AutotuneError, match="beyond float16's range"):
        int4.quantize_int4(w, 32)
    assert int4.quantize_int4(w, 32, scale_dtype="float32").scales.dtype == np.float32


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_weights_are_refused(bad: float) -> None:
    w = _weights(2, 64)
    w[1, 5] = bad
    with pytest.raises(AutotuneError, match="NaN or inf"):
        int4.quantize_int4(w, 32)


def test_check_format_names_what_is_wrong() -> None:
    weight = int4.quantize_int4(_weights(4, 128), 64, sym=False)
    qweight, scales, zeros = weight.qweight, weight.scales, weight.zeros
    assert int4.check_format(qweight, scales, zeros, 64) == (4, 128)
    cases = [
        ((qweight.astype(np.int8), scales, zeros, 64), "qweight must be uint8"),
        ((qweight, scales, zeros, 128), r"scales must have shape \(N, K // group\) = \(4, 1\)"),
        ((qweight[:, :48], scales, zeros, 64), "K = 96 .* not a multiple of the int4 group 64"),
        ((qweight, scales.astype(np.float64), zeros, 64), "scales must be float16, bfloat16, float32"),
        ((qweight, scales, zeros + 16, 64), r"zeros must lie in \[0, 15\], found"),
        ((qweight, scales, zeros.astype(np.int32), 64), "zeros must be uint8"),
        ((qweight, scales.tolist(), zeros, 64), "scales must be a numpy array or a torch tensor"),
    ]
    for arguments, message in cases:
        with pytest.raises(AutotuneError, match=message):
            int4.check_format(*arguments)


def test_autotune_quantize_on_numpy_and_its_errors() -> None:
    w = _weights(3, 128)
    weight = autotune.quantize(w, "int4", group=32, sym=False)
    assert isinstance(weight, int4.Int4Weight) and weight.variant == "g32a"
    with pytest.raises(AutotuneError, match="unknown weight format 'int3'"):
        autotune.quantize(w, "int3")
    with pytest.raises(AutotuneError, match="group must be one of"):
        autotune.quantize(w, "int4", group=256)


def test_numpy_quantize_never_imports_torch() -> None:
    script = (
        "import sys, numpy, autotune\n"
        "autotune.quantize(numpy.ones((2, 64), numpy.float32), group=32)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_torch_and_numpy_give_the_same_bits() -> None:
    torch = pytest.importorskip("torch")
    w = _weights(5, 256)
    for sym in (True, False):
        ours = int4.quantize_int4(torch.from_numpy(w).to(torch.bfloat16), 64, sym)
        host = int4.quantize_int4(torch.from_numpy(w).to(torch.bfloat16).float().numpy(), 64, sym, "bfloat16")
        assert ours.scales.dtype == torch.bfloat16 and ours.scale_dtype == "bfloat16"
        assert np.array_equal(ours.qweight.numpy(), host.qweight)
        assert np.array_equal(ours.scales.view(torch.int16).numpy().view(np.uint16), host.scales)
        assert np.array_equal(int4.dequantize(ours).numpy(), int4.dequantize(host))


def test_quantized_weight_state_dict_round_trip() -> None:
    torch = pytest.importorskip("torch")
    from autotune.model.quantized import QuantizedWeight

    w = torch.from_numpy(_weights(6, 128)).half()
    for sym in (True, False):
        module = autotune.quantize(w, "int4", group=64, sym=sym)
        assert isinstance(module, QuantizedWeight)
        assert (
            module.shape == (6, 128) and module.dtype == torch.float16 and module.variant == int4.variant_name(64, sym)
        )
        state = module.state_dict()
        assert ("zeros" in state) != sym and state["_extra_state"]["format"] == "int4"
        loaded = QuantizedWeight.from_state_dict(state)
        filled = QuantizedWeight.empty(6, 128, 64, sym)
        filled.load_state_dict(state)
        for other in (loaded, filled):
            assert torch.equal(other.qweight, module.qweight) and torch.equal(other.scales, module.scales)
            assert torch.equal(other.dequantize(torch.float32), module.dequantize(torch.float32))
        with pytest.raises(AutotuneError, match="this module"):
            QuantizedWeight.empty(6, 128, 32, sym).load_state_dict(state)
        assert module.to("cpu").qweight.device.type == "cpu"


def _extreme_scales(shape: tuple[int, int], dtype: Any, rng: np.random.Generator) -> Any:
    """Scales across the dtype's range: ordinary magnitudes of both signs, and in the first row its
    largest value (15 times it overflows), smallest normal (negative), smallest subnormal and zero."""
    import torch

    values = torch.from_numpy(rng.standard_normal(shape) * 10.0 ** rng.uniform(-6, 3, shape)).to(dtype)
    info = torch.finfo(dtype)
    values[0, :4] = torch.tensor([info.max, -info.tiny, info.tiny * info.eps, 0.0])
    return values


def test_dequantize_in_the_scales_dtype_is_the_float32_values_rounded_bit_for_bit() -> None:
    torch = pytest.importorskip("torch")
    from autotune.model.quantized import QuantizedWeight

    rng = np.random.default_rng(RNG_SEED)
    for dtype, as_bits in ((torch.float16, torch.int16), (torch.bfloat16, torch.int16), (torch.float32, torch.int32)):
        for group in int4.GROUPS:
            for sym in (True, False):
                n, k = 5, 4 * group
                grouped = (n, k // group)
                qweight = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8))
                scales = _extreme_scales(grouped, dtype, rng)
                zeros = None if sym else torch.from_numpy(rng.integers(0, 16, grouped, dtype=np.uint8))
                weight = int4.int4_weight(qweight, scales, zeros, group)
                want = int4.dequantize(weight).to(dtype)
                got = int4.dequantize_in_scale_dtype(weight)
                assert got.dtype == dtype and got.shape == (n, k)
                assert torch.equal(got.view(as_bits), want.view(as_bits)), (dtype, group, sym)
                module = QuantizedWeight(qweight, scales, zeros, group)
                assert torch.equal(module.dequantize().view(as_bits), want.view(as_bits))
                assert torch.equal(module.dequantize(torch.float32), int4.dequantize(weight))


def test_dequantize_leaves_the_zero_points_values_to_the_checks_at_load() -> None:
    """A linear of more than 64 rows dequantizes on every call: reading the zero points back there would
    wait for the GPU and could not be captured in a CUDA graph. Made and loaded buffers are checked."""
    torch = pytest.importorskip("torch")

    module = autotune.quantize(torch.from_numpy(_weights(6, 128)).half(), "int4", group=64, sym=False)
    module.zeros[0, 0] = 200  # written past the checks
    with pytest.raises(AutotuneError, match=r"zeros must lie in \[0, 15\], found 200"):
        module.weight()
    assert module.dequantize().shape == (6, 128)


def test_quantize_refuses_what_it_would_misread() -> None:
    w = _weights(2, 64)
    for sym in ("no", None, 0):
        with pytest.raises(AutotuneError, match="sym is True or False"):
            autotune.quantize(w, "int4", group=32, sym=sym)  # type: ignore[arg-type]
    with pytest.raises(AutotuneError, match="takes a numpy array or a torch tensor"):
        autotune.quantize(w.tolist(), "int4", group=32)
    with pytest.raises(AutotuneError, match="beyond float32's range"):
        autotune.quantize(np.full((2, 64), 1e300), "int4", group=32, scale_dtype="float32")
    with pytest.raises(AutotuneError, match="range overflows float32"):
        autotune.quantize(np.array([[3e38, -3e38] * 32] * 2, dtype=np.float32), "int4", group=32, sym=False)


def test_a_refused_load_leaves_the_module_as_it_was() -> None:
    """A load that brings another dtype, format or non-finite scales is refused before anything is
    copied: torch would cast by value (bfloat16 scales into float16 overflow to inf) and check the
    format only after replacing the buffers."""
    torch = pytest.importorskip("torch")
    from autotune.model.quantized import QuantizedWeight
    from autotune.model.quantized8 import Quantized8Weight

    w = torch.from_numpy(_weights(4, 128))
    target = autotune.quantize(w.half(), "int4", group=64)
    before = {name: tensor.clone() for name, tensor in target.state_dict().items() if torch.is_tensor(tensor)}
    big = autotune.quantize(w.bfloat16() * 1e6, "int4", group=64).state_dict()
    nan = {name: value.clone() if torch.is_tensor(value) else value for name, value in target.state_dict().items()}
    nan["scales"][0, 0] = float("nan")
    asym = autotune.quantize(w.half(), "int4", group=64, sym=False).state_dict()
    cases = [
        (big, "scales is bfloat16 \\(4, 2\\), this int4 weight's float16"),
        (nan, "scales hold NaN or inf"),
        (asym, "holds an int4 weight g64a"),
        ({**target.state_dict(), "qweight": target.qweight.to(torch.int16)}, "qweight is int16"),
    ]
    for state, message in cases:
        with pytest.raises(AutotuneError, match=message) as raised:
            target.load_state_dict(state)
        assert "\n" not in str(raised.value)
        assert all(torch.equal(getattr(target, name), tensor) for name, tensor in before.items())
    asym_module = QuantizedWeight.empty(4, 128, 64, sym=False)
    without_zeros = {name: value for name, value in asym.items() if name != "zeros"}
    with pytest.raises(AutotuneError, match="has no zeros, which this int4 weight"):
        asym_module.load_state_dict(without_zeros)
    fp8 = autotune.quantize(w.half(), "fp8")
    codes = fp8.qweight.clone()
    with pytest.raises(AutotuneError, match="holds an 8-bit weight int8"):
        fp8.load_state_dict(autotune.quantize(w.half(), "int8").state_dict())
    assert torch.equal(fp8.qweight, codes)
    with pytest.raises(AutotuneError, match=r"metadata has in_features 128\.0"):
        Quantized8Weight.from_state_dict(
            {**fp8.state_dict(), "_extra_state": {**fp8.get_extra_state(), "in_features": 128.0}}
        )
    assert autotune.quantize(w.half(), "int8", scale_dtype="bfloat16").scales.dtype == torch.bfloat16
