"""The canonical 8-bit weight format on numpy: e4m3's table and rounding against formulas of this file's
own, quantize's error bounds in each kind and scale dtype, zero rows, and the checks' one-line errors.
All on the CPU."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from autotune.core import dtypes
from autotune.core.errors import AutotuneError
from autotune.ops.q8gemm import format as q8

RNG_SEED = 48
SUBNORMAL_STEP = 2.0**-9


def _e4m3_value(code: int) -> float:
    """A code's value as an integer significand times a power of two (the format's definition)."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    significand = mantissa + (8 if exponent else 0)  # the implicit leading 1 of normal numbers
    return sign * math.ldexp(significand, max(exponent, 1) - 10)


def _finite_codes() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint8)
    finite: np.ndarray = codes[(codes & 0x7F) != 0x7F]
    return finite


def _reference_encode(values: np.ndarray) -> np.ndarray:
    """Nearest e4m3 value by search over the table, ties to the even code, past 448 saturated."""
    codes = np.arange(0x7F, dtype=np.uint8)  # 0 .. 448, increasing
    table = np.array([_e4m3_value(int(code)) for code in codes])
    magnitude = np.abs(values.astype(np.float64))
    upper = np.clip(np.searchsorted(table, magnitude), 1, len(table) - 1)
    lower = upper - 1
    below, above = magnitude - table[lower], table[upper] - magnitude
    pick_upper = (above < below) | ((above == below) & (upper % 2 == 0))
    chosen = np.where(pick_upper, upper, lower)
    chosen = np.where(magnitude >= table[-1], len(table) - 1, chosen).astype(np.uint8)
    signed: np.ndarray = chosen | (np.signbit(values).astype(np.uint8) << 7)
    return signed


def _weights(n: int, k: int, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(RNG_SEED)
    values = rng.standard_normal((n, k)) * np.exp(rng.uniform(-6, 6, size=(n, 1)))  # rows of many sizes
    values[:, :3] = rng.standard_t(2, size=(n, 3))  # heavy tails in some rows
    return values.astype(dtype)


def _scales(weight: q8.Weight8) -> np.ndarray:
    """The stored scales as float64, (N, 1)."""
    return dtypes.decode(weight.scales, weight.scale_dtype).astype(np.float64)[:, None]


def _one_line_error(call: Any, message: str) -> None:
    with pytest.raises(AutotuneError, match=message) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_the_decode_table_follows_the_bit_fields() -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = q8.e4m3_decode(codes)
    assert values.dtype == np.float32 and values.shape == (256,)
    expected = np.array([_e4m3_value(code) for code in range(256)])
    assert np.array_equal(values, expected, equal_nan=True)
    assert np.isnan(values).nonzero()[0].tolist() == [0x7F, 0xFF]
    named = {0x00: 0.0, 0x01: 2.0**-9, 0x07: 7 * 2.0**-9, 0x08: 2.0**-6, 0x38: 1.0, 0xB8: -1.0, 0x7E: 448.0}
    assert {code: float(values[code]) for code in named} == named
    assert values[0x80] == 0 and np.signbit(values[0x80])
    assert np.nanmax(values) == 448.0 and np.nanmin(values) == -448.0
    assert q8.e4m3_decode(codes.reshape(16, 16)).shape == (16, 16)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_encoding_a_decoded_code_gives_it_back(dtype: Any) -> None:
    codes = _finite_codes()  # 0x80 (-0.0) included
    assert np.array_equal(q8.e4m3_encode(q8.e4m3_decode(codes).astype(dtype)), codes)


def test_ties_go_to_the_even_mantissa() -> None:
    cases = {
        1.0625: 0x38,  # between 1.0 and 1.125: 1.0
        1.1875: 0x3A,  # between 1.125 and 1.25: 1.25
        248.0: 0x78,  # between 240 (mantissa 7) and 256: 256, a carry into the exponent
        0.5 * SUBNORMAL_STEP: 0x00,  # subnormals: between 0 and 2^-9, 0
        1.5 * SUBNORMAL_STEP: 0x02,
        2.5 * SUBNORMAL_STEP: 0x02,
        7.5 * SUBNORMAL_STEP: 0x08,  # between the largest subnormal and 2^-6
        2.0**-6 + 2.0**-10: 0x08,  # between 2^-6 and the next normal, 2^-6 * 1.125
    }
    values = np.array(list(cases))
    for dtype in (np.float32, np.float64):
        assert q8.e4m3_encode(values.astype(dtype)).tolist() == list(cases.values())
        assert q8.e4m3_encode(-values.astype(dtype)).tolist() == [0x80 | code for code in cases.values()]
    just_above = np.nextafter(values.astype(np.float32), np.float32(np.inf))
    assert np.array_equal(q8.e4m3_encode(just_above), _reference_encode(just_above))
    assert q8.e4m3_encode(just_above)[0] == 0x39  # past the midpoint: 1.125


def test_encode_matches_a_table_search_across_the_range() -> None:
    rng = np.random.default_rng(RNG_SEED)
    table = q8.e4m3_decode(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)
    midpoints = (table[:-1] + table[1:]) / 2
    spread = np.exp2(rng.uniform(-14, 10, size=50_000)) * rng.choice([-1.0, 1.0], size=50_000)
    for dtype in (np.float32, np.float64):
        near = np.concatenate([midpoints, table]).astype(dtype)
        values = np.concatenate(
            [spread.astype(dtype), near, np.nextafter(near, dtype(0)), np.nextafter(near, dtype(1e9))]
        )
        values = np.concatenate([values, -values])
        assert np.array_equal(q8.e4m3_encode(values), _reference_encode(values))


def test_saturation_nan_and_signed_zero() -> None:
    values = np.array([1000.0, -1e30, 464.0, 449.0, np.inf, -np.inf, np.nan, -np.nan, -0.0, 0.0, 1e-30])
    assert q8.e4m3_encode(values).tolist() == [0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x7F, 0x80, 0x00, 0x00]
    assert q8.e4m3_encode(np.float16(-65504.0)).tolist() == 0xFE  # a scalar gives a 0-d array
    assert q8.e4m3_encode(np.ones((3, 4))[:, ::2]).shape == (3, 2)


@pytest.mark.parametrize("scale_dtype", q8.SCALE_DTYPES)
def test_int8_is_within_half_a_step(scale_dtype: str) -> None:
    w = _weights(64, 256)
    weight = q8.quantize8(w, "int8", scale_dtype)
    q8.check8(weight)
    assert weight.codes.shape == (64, 256) and weight.codes.dtype == np.uint8
    assert weight.scales.shape == (64,) and weight.scales.dtype == dtypes.HOST_STORAGE[scale_dtype]
    assert (weight.n, weight.k, weight.kind, weight.variant) == (64, 256, "int8", "int8")
    assert 0x80 not in weight.codes  # -128 is never written
    dequantized = q8.dequantize8(weight)
    assert dequantized.dtype == np.float32
    error = np.abs(w.astype(np.float64) - dequantized)
    # The scale is rounded up to its dtype, so no code is clipped; float32's division w / s adds slack.
    assert (error <= _scales(weight) * (0.5 + 1e-6)).all()
    assert np.array_equal(q8.codes_values(weight.codes, "int8"), weight.codes.view(np.int8))


@pytest.mark.parametrize("scale_dtype", q8.SCALE_DTYPES)
def test_fp8_keeps_half_an_ulp_of_a_3_bit_mantissa(scale_dtype: str) -> None:
    w = _weights(64, 256)
    weight = q8.quantize8(w, "fp8", scale_dtype)
    q8.check8(weight)
    assert weight.variant == "fp8"
    assert not np.isnan(q8.e4m3_decode(weight.codes)).any()
    assert 0x80 not in weight.codes  # a negative that rounds to zero is +0.0
    error = np.abs(w.astype(np.float64) - q8.dequantize8(weight))
    scales = _scales(weight)
    normal = np.abs(w) >= 2.0**-6 * scales
    assert normal.mean() > 0.9 and (~normal).any()
    relative = 2.0**-4 * (1 + 1e-6)
    assert (error[normal] <= relative * np.abs(w[normal])).all()
    # Below 2^-6 s: half a subnormal step.
    assert (error <= np.maximum(relative * np.abs(w), SUBNORMAL_STEP / 2 * scales * (1 + 1e-6))).all()


@pytest.mark.parametrize("kind", q8.KINDS)
@pytest.mark.parametrize("scale_dtype", q8.SCALE_DTYPES)
def test_each_rows_largest_weight_takes_the_largest_code(kind: str, scale_dtype: str) -> None:
    w = _weights(200, 64)
    weight = q8.quantize8(w, kind, scale_dtype)
    rows = np.arange(200)
    largest = np.abs(w).argmax(axis=1)
    values = q8.codes_values(weight.codes, kind)[rows, largest]
    assert (np.sign(values) == np.sign(w[rows, largest])).all()
    exact_scale = np.abs(w).max(axis=1).astype(np.float64) / q8.QMAX[kind]
    stored = _scales(weight)[:, 0]
    assert (stored >= exact_scale).all()
    if kind == "int8" and scale_dtype == "bfloat16":
        # Rounded up by up to 2^-7 of itself, the scale can take the largest |w| to 127 / (1 + 2^-7) > 126.
        assert set(np.abs(values).tolist()) == {126.0, 127.0}
    else:
        assert (np.abs(values) == q8.QMAX[kind]).all()


@pytest.mark.parametrize("kind", q8.KINDS)
@pytest.mark.parametrize("scale_dtype", q8.SCALE_DTYPES)
def test_a_row_of_zeros_gets_scale_one_and_codes_zero(kind: str, scale_dtype: str) -> None:
    w = _weights(4, 32)
    w[1] = 0
    w[3] = -0.0
    weight = q8.quantize8(w, kind, scale_dtype)
    assert (_scales(weight)[[1, 3], 0] == 1).all()
    assert not weight.codes[[1, 3]].any()
    assert not q8.dequantize8(weight)[[1, 3]].any()


def test_rounding_of_exact_ratios() -> None:
    """A row whose largest |w| is 127 (448) has scale 1 in every dtype: the codes are w's own roundings."""
    row = np.array([[127.0, 63.5, 62.5, -0.5, 1.5, -127.0]], dtype=np.float32)
    for scale_dtype in q8.SCALE_DTYPES:
        weight = q8.quantize8(row, "int8", scale_dtype)
        assert weight.codes.view(np.int8).tolist() == [[127, 64, 62, 0, 2, -127]]
    row = np.array([[448.0, 1.0625, 1.1875, -248.0, 1000.0 / 1000]], dtype=np.float32)
    assert q8.quantize8(row, "fp8", "float32").codes.tolist() == [[0x7E, 0x38, 0x3A, 0xF8, 0x38]]


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_float16_and_float64_weights(dtype: Any) -> None:
    w = _weights(8, 64, dtype)
    for kind in q8.KINDS:
        weight = q8.quantize8(w, kind, "float32")
        same = q8.quantize8(w.astype(np.float32), kind, "float32")
        assert np.array_equal(weight.codes, same.codes) and np.array_equal(weight.scales, same.scales)


def test_int8_code_0x80_decodes_as_minus_128() -> None:
    codes = np.array([[0x80, 0x81, 0x7F, 0xFF, 0x00]], dtype=np.uint8)
    assert q8.codes_values(codes, "int8").tolist() == [[-128.0, -127.0, 127.0, -1.0, 0.0]]
    weight = q8.Weight8(codes, np.array([2.0], dtype=np.float16), "int8", 1, 5, "float16")
    assert q8.dequantize8(weight).tolist() == [[-256.0, -254.0, 254.0, -2.0, 0.0]]


@pytest.mark.parametrize(
    ("w", "arguments", "message"),
    [
        (np.ones(8, np.float32), {}, r"2-D weight \(N, K\), got shape \(8,\)"),
        (np.ones((2, 2, 2), np.float32), {}, r"2-D weight \(N, K\), got shape \(2, 2, 2\)"),
        (np.ones((0, 4), np.float32), {}, r"non-empty weight, got shape \(0, 4\)"),
        (np.ones((4, 0), np.float32), {}, r"non-empty weight, got shape \(4, 0\)"),
        (np.array([[1.0, np.nan]]), {}, "NaN or inf"),
        (np.array([[1.0, -np.inf]], np.float32), {}, "NaN or inf"),
        (np.ones((2, 2), np.int32), {}, "float16, float32 or float64 weights, got int32"),
        ([[1.0, 2.0]], {}, "needs a numpy array, got list"),
        (np.ones((2, 2), np.float32), {"kind": "int4"}, "kind must be one of int8, fp8, got 'int4'"),
        (np.ones((2, 2), np.float32), {"scale_dtype": "float8"}, "scales must be float16, bfloat16, float32, got"),
        (np.full((2, 2), 1e8, np.float32), {}, "int8 scale beyond float16's range: use scale_dtype='bfloat16'"),
        (np.full((2, 2), 1e300), {"scale_dtype": "float32"}, "beyond float32's range"),
    ],
)
def test_bad_weights_are_one_line_errors(w: Any, arguments: dict[str, str], message: str) -> None:
    _one_line_error(lambda: q8.quantize8(w, **arguments), message)


def test_large_weights_fit_float32_and_bfloat16_scales() -> None:
    w = np.full((2, 2), 1e8, np.float32)
    for scale_dtype in ("float32", "bfloat16"):
        for kind in q8.KINDS:
            dequantized = q8.dequantize8(q8.quantize8(w, kind, scale_dtype))
            assert np.allclose(dequantized, w, rtol=2.0**-7)


def test_tiny_weights_keep_a_positive_scale() -> None:
    w = np.array([[1e-9, -3e-10]], dtype=np.float32)  # the float16 scale would be 0 to nearest
    for kind in q8.KINDS:
        weight = q8.quantize8(w, kind, "float16")
        assert weight.scales[0] > 0
        assert np.abs(q8.dequantize8(weight) - w).max() <= float(weight.scales[0]) / 2


def test_check8_names_each_inconsistency_in_one_line() -> None:
    good = q8.quantize8(_weights(3, 8), "fp8", "bfloat16")
    q8.check8(good)
    fields: dict[str, Any] = dict(good.__dict__)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"codes": good.codes.astype(np.int8)}, r"codes must be uint8 of shape \(N, K\) = \(3, 8\), got int8"),
        ({"codes": good.codes[:, :4]}, r"got uint8 \(3, 4\)"),
        ({"codes": good.codes.tolist()}, "got list"),
        ({"scales": good.scales[:2]}, r"bfloat16 8-bit scales must be uint16 of shape \(N,\) = \(3,\)"),
        ({"scales": good.scales.astype(np.float16)}, "got float16"),
        ({"scales": good.scales[:, None]}, r"got uint16 \(3, 1\)"),
        ({"kind": "int4"}, "kind must be one of int8, fp8"),
        ({"scale_dtype": "float64"}, "scales must be float16, bfloat16, float32, got float64"),
        ({"n": 0}, "n and k must be positive integers"),
        ({"k": 8.0}, "n and k must be positive integers"),
    ]
    for change, message in cases:
        weight = q8.Weight8(**{**fields, **change})
        _one_line_error(lambda weight=weight: q8.check8(weight), message)
        _one_line_error(lambda weight=weight: q8.dequantize8(weight), message)
    _one_line_error(lambda: q8.check8(good.codes), "needs a Weight8, got ndarray")  # type: ignore[arg-type]


def test_decode_and_codes_values_errors() -> None:
    signed: Any = np.arange(4)
    _one_line_error(lambda: q8.e4m3_decode(signed), "e4m3_decode needs a uint8 numpy array of codes, got int64")
    _one_line_error(lambda: q8.codes_values(np.zeros(2, np.uint8), "int3"), "kind must be one of int8, fp8")
    _one_line_error(lambda: q8.codes_values(np.zeros(2, np.int8), "int8"), "uint8 numpy array of codes, got int8")
    _one_line_error(lambda: q8.e4m3_encode(np.array(["1"])), "e4m3_encode needs real values")


def test_the_format_never_imports_torch() -> None:
    script = (
        "import sys, numpy\n"
        "from autotune.ops.q8gemm import format\n"
        "format.dequantize8(format.quantize8(numpy.ones((2, 64), numpy.float32), 'fp8', 'bfloat16'))\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
