"""Importing int4 AWQ ("gemm") and GPTQ (v1 and v2) checkpoints into the canonical format (docs/lowbit.md):
each unpacking checked bit for bit against a numpy reading of AutoAWQ's dequantize_gemm and gptqmodel's
dequantize_weight, the inverse packings, safetensors files and folders with their config.json, and the
one-line errors. numpy only, on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.core import dtypes
from autotune.core.errors import AutotuneError
from autotune.ops.qgemm import checkpoints, safetensors
from autotune.ops.qgemm import format as int4

RNG_SEED = 47
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of an AWQ word holds column 8c + AWQ_ORDER[i]
V1_OFFSET = np.uint32(0x11111111)  # gptqmodel's v1 -> v2 addition to each qzeros word
SHAPES = [(8, 96, 32), (40, 192, 64), (200, 384, 128), (8, 384, 64), (200, 192, 32), (40, 128, 128)]
Q_PROJ = "model.layers.0.self_attn.q_proj"
DOWN_PROJ = "model.layers.1.mlp.down_proj"


def _int32(word: int) -> int:
    return word - (1 << 32) if word >= 1 << 31 else word


def _nibbles(words: np.ndarray) -> np.ndarray:
    """int32 words (..., W) -> uint8 (..., W, 8), nibble j from bits 4j..4j+3."""
    unsigned = np.ascontiguousarray(words, dtype=np.int32).view(np.uint32)
    return ((unsigned[..., None] >> (4 * np.arange(8, dtype=np.uint32))) & 0xF).astype(np.uint8)


def awq_reference_dequant(qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, group: int) -> np.ndarray:
    """AutoAWQ's dequantize_gemm in numpy, exact in float32: (K, N)."""

    def columns(words: np.ndarray) -> np.ndarray:
        nibbles = _nibbles(words)
        codes = np.empty_like(nibbles)
        codes[..., list(AWQ_ORDER)] = nibbles
        return codes.reshape(words.shape[0], -1).astype(np.float32)

    codes, zeros = columns(qweight), columns(qzeros)
    scale = np.repeat(np.asarray(scales, dtype=np.float32), group, axis=0)
    return (codes - np.repeat(zeros, group, axis=0)) * scale


def gptq_reference_dequant(
    qweight: np.ndarray, qzeros: np.ndarray, scales: np.ndarray, g_idx: np.ndarray, checkpoint_format: str
) -> np.ndarray:
    """gptqmodel's dequantize_weight in numpy, exact in float32: (K, N); v1's zeros first get the
    word-wide wrapping + 0x11111111 of convert_gptq_v1_to_v2_format_module."""
    words = np.ascontiguousarray(qzeros, dtype=np.int32).view(np.uint32)
    if checkpoint_format == "gptq":
        words = words + V1_OFFSET
    zeros = _nibbles(words.view(np.int32)).reshape(qzeros.shape[0], -1).astype(np.float32)
    packed = _nibbles(qweight)
    codes = packed.transpose(0, 2, 1).reshape(8 * qweight.shape[0], qweight.shape[1]).astype(np.float32)
    rows = np.asarray(g_idx, dtype=np.int64)
    return np.asarray(scales, dtype=np.float32)[rows] * (codes - zeros[rows])


def _words(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)


def _scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random finite float16 bit patterns: both signs, subnormals, up to 65504."""
    words = rng.integers(0, 2**16, size=shape, dtype=np.int64).astype(np.uint16)
    not_finite = (words & 0x7C00) == 0x7C00
    words[not_finite] ^= 0x4000
    return words.view(np.float16)


def _awq(rng: np.random.Generator, n: int, k: int, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _words(rng, (k, n // 8)), _words(rng, (k // group, n // 8)), _scales(rng, (k // group, n))


def _gptq(
    rng: np.random.Generator, n: int, k: int, group: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    g_idx = (np.arange(k) // group).astype(np.int32)
    return _words(rng, (k // 8, n)), _words(rng, (k // group, n // 8)), _scales(rng, (k // group, n)), g_idx


def _filled(shape: tuple[int, ...], word: int) -> np.ndarray:
    return np.full(shape, _int32(word), dtype=np.int32)


def _assert_canonical(weight: int4.Int4Weight, n: int, k: int, group: int) -> None:
    assert (weight.n, weight.k, weight.group) == (n, k, group)
    assert weight.qweight.dtype == np.uint8 and weight.qweight.shape == (n, k // 2)
    assert int4.check_format(weight.qweight, weight.scales, weight.zeros, weight.group) == (n, k)
    assert weight.sym == (weight.zeros is None)


def _assert_same(got: int4.Int4Weight, want: int4.Int4Weight) -> None:
    assert (got.n, got.k, got.group, got.sym, got.scale_dtype) == (
        want.n,
        want.k,
        want.group,
        want.sym,
        want.scale_dtype,
    )
    for name in ("qweight", "scales", "zeros"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and np.array_equal(a, b), name


def _assert_one_line_error(match: str | None, call, *args, **kwargs) -> None:
    with pytest.raises(AutotuneError, match=match) as raised:
        call(*args, **kwargs)
    assert "\n" not in str(raised.value)


def _random_weights(n: int, k: int) -> np.ndarray:
    return np.random.default_rng(RNG_SEED).standard_normal((n, k)).astype(np.float32)


def test_awq_word_order_by_hand() -> None:
    """Nibble i of an AWQ word is column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i], for codes and zeros alike."""
    qweight = _filled((32, 1), 0x76543210)
    qzeros = _filled((1, 1), 0x76543210)
    weight = checkpoints.from_awq(qweight, qzeros, np.ones((1, 8), dtype=np.float16), 32)
    by_column = [0, 4, 1, 5, 2, 6, 3, 7]
    assert weight.zeros is not None and weight.zeros[:, 0].tolist() == by_column
    assert int4.unpack_int4(weight.qweight)[:, 0].tolist() == by_column
    assert not int4.dequantize(weight).any()


def test_gptq_word_order_and_v1_carries_by_hand() -> None:
    """GPTQ packs k along a qweight word's nibbles and n along a qzeros word's; v1 adds 0x11111111 to
    the whole word, so a nibble of 15 carries into the next one and the top nibble's carry is lost."""
    qweight = _filled((4, 8), 0x76543210)
    ones = np.ones((1, 8), dtype=np.float16)
    v2 = checkpoints.from_gptq(qweight, _filled((1, 1), 0x76543210), ones, group=32, checkpoint_format="gptq_v2")
    assert v2.zeros is not None and v2.zeros[:, 0].tolist() == list(range(8))
    assert int4.unpack_int4(v2.qweight).tolist() == [[j % 8 for j in range(32)]] * 8
    expected = {
        0x76543210: [1, 2, 3, 4, 5, 6, 7, 8],
        0x0000000F: [0, 2, 1, 1, 1, 1, 1, 1],
        0xFFFFFFFF: [0, 1, 1, 1, 1, 1, 1, 1],
        0xF0F0F0F0: [1, 0, 2, 0, 2, 0, 2, 0],
    }
    for word, zeros in expected.items():
        v1 = checkpoints.from_gptq(qweight, _filled((1, 1), word), ones, group=32, checkpoint_format="gptq")
        assert v1.zeros is not None and v1.zeros[:, 0].tolist() == zeros, hex(word)


@pytest.mark.parametrize(("n", "k", "group"), SHAPES)
def test_awq_matches_autoawq_bit_for_bit(n: int, k: int, group: int) -> None:
    """from_awq then dequantize gives AutoAWQ's values (transposed to N x K), on random words of the
    whole 32-bit range and random finite float16 scales of both signs."""
    qweight, qzeros, scales = _awq(np.random.default_rng(RNG_SEED + n + k), n, k, group)
    weight = checkpoints.from_awq(qweight, qzeros, scales, group)
    _assert_canonical(weight, n, k, group)
    assert weight.scale_dtype == "float16" and not weight.sym
    values = int4.dequantize(weight)
    assert values.dtype == np.float32
    assert np.array_equal(values, awq_reference_dequant(qweight, qzeros, scales, group).T)


@pytest.mark.parametrize("checkpoint_format", ["gptq", "gptq_v2"])
@pytest.mark.parametrize(("n", "k", "group"), SHAPES)
def test_gptq_matches_gptqmodel_bit_for_bit(n: int, k: int, group: int, checkpoint_format: str) -> None:
    """from_gptq then dequantize gives gptqmodel's values (transposed), v1's carries included; g_idx
    given or left to default, the same weight."""
    qweight, qzeros, scales, g_idx = _gptq(np.random.default_rng(RNG_SEED + n * k), n, k, group)
    weight = checkpoints.from_gptq(qweight, qzeros, scales, g_idx, group, checkpoint_format=checkpoint_format)
    _assert_canonical(weight, n, k, group)
    assert weight.scale_dtype == "float16" and not weight.sym
    want = gptq_reference_dequant(qweight, qzeros, scales, g_idx, checkpoint_format).T
    assert np.array_equal(int4.dequantize(weight), want)
    default = checkpoints.from_gptq(qweight, qzeros, scales, group=group, checkpoint_format=checkpoint_format)
    _assert_same(default, weight)


def test_zeros_of_8_make_a_symmetric_weight() -> None:
    """Every zero 8 (AWQ, GPTQ v2, GPTQ v1's stored 7s) gives sym, no zeros, the same values; sym=False
    does not force zeros back."""
    rng = np.random.default_rng(RNG_SEED)
    n, k, group = 40, 192, 64
    qweight, _, scales = _awq(rng, n, k, group)
    awq = checkpoints.from_awq(qweight, _filled((k // group, n // 8), 0x88888888), scales, group)
    assert awq.sym and awq.zeros is None
    assert np.array_equal(
        int4.dequantize(awq), awq_reference_dequant(qweight, _filled((3, 5), 0x88888888), scales, group).T
    )
    gq, _, gs, g_idx = _gptq(rng, n, k, group)
    for checkpoint_format, word in (("gptq_v2", 0x88888888), ("gptq", 0x77777777)):
        qzeros = _filled((k // group, n // 8), word)
        want = gptq_reference_dequant(gq, qzeros, gs, g_idx, checkpoint_format).T
        for sym in (None, False, True):
            weight = checkpoints.from_gptq(gq, qzeros, gs, g_idx, group, sym=sym, checkpoint_format=checkpoint_format)
            assert weight.sym and weight.zeros is None, (checkpoint_format, sym)
            assert np.array_equal(int4.dequantize(weight), want)


def test_bfloat16_scales_as_words() -> None:
    """uint16 scales are bfloat16 words: the canonical scales keep the words, the values follow them."""
    rng = np.random.default_rng(RNG_SEED)
    n, k, group = 40, 192, 64
    qweight, qzeros, _ = _awq(rng, n, k, group)
    words = dtypes.encode(rng.standard_normal((k // group, n)).astype(np.float32), "bfloat16")
    weight = checkpoints.from_awq(qweight, qzeros, words, group)
    assert weight.scale_dtype == "bfloat16" and weight.scales.dtype == np.uint16
    assert np.array_equal(weight.scales, words.T)
    values = dtypes.decode(words, "bfloat16").astype(np.float32)
    assert np.array_equal(int4.dequantize(weight), awq_reference_dequant(qweight, qzeros, values, group).T)


@pytest.mark.parametrize(("n", "k", "group"), SHAPES[:3])
def test_awq_packed_round_trip_is_exact(n: int, k: int, group: int) -> None:
    """to_awq(from_awq(words)) gives back every word and scale, int32 and float16."""
    qweight, qzeros, scales = _awq(np.random.default_rng(RNG_SEED + k), n, k, group)
    back = checkpoints.to_awq(checkpoints.from_awq(qweight, qzeros, scales, group))
    for got, want in zip(back, (qweight, qzeros, scales), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("checkpoint_format", ["gptq", "gptq_v2"])
@pytest.mark.parametrize(("n", "k", "group"), SHAPES[:3])
def test_gptq_packed_round_trip_is_exact(n: int, k: int, group: int, checkpoint_format: str) -> None:
    """to_gptq(from_gptq(words)) gives back every word, v1's word-wide carries undone by the
    word-wide subtraction, and g_idx = k // group."""
    qweight, qzeros, scales, g_idx = _gptq(np.random.default_rng(RNG_SEED + n), n, k, group)
    weight = checkpoints.from_gptq(qweight, qzeros, scales, g_idx, group, checkpoint_format=checkpoint_format)
    back = checkpoints.to_gptq(weight, checkpoint_format=checkpoint_format)
    for got, want in zip(back, (qweight, qzeros, scales, g_idx), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize(("n", "k", "group"), SHAPES)
def test_canonical_round_trips_through_awq_and_gptq(n: int, k: int, group: int, sym: bool) -> None:
    """quantize_int4's weight, packed as AWQ or GPTQ (v1, v2) and imported again, is the same arrays."""
    weight = int4.quantize_int4(_random_weights(n, k), group, sym)
    assert sym or (weight.zeros != 8).any()
    _assert_same(checkpoints.from_awq(*checkpoints.to_awq(weight), group), weight)
    for checkpoint_format in ("gptq", "gptq_v2"):
        qweight, qzeros, scales, g_idx = checkpoints.to_gptq(weight, checkpoint_format=checkpoint_format)
        back = checkpoints.from_gptq(qweight, qzeros, scales, g_idx, group, checkpoint_format=checkpoint_format)
        _assert_same(back, weight)
        if sym:
            again = checkpoints.from_gptq(
                qweight, qzeros, scales, g_idx, group, sym=True, checkpoint_format=checkpoint_format
            )
            _assert_same(again, weight)


def test_symmetric_weights_are_written_with_zeros_of_8() -> None:
    """A symmetric weight's qzeros words: 0x88888888 in AWQ and GPTQ v2, v1's stored 0x77777777; shapes
    and dtypes are the checkpoints' own."""
    n, k, group = 40, 192, 64
    weight = int4.quantize_int4(_random_weights(n, k), group, sym=True)
    qweight, qzeros, scales = checkpoints.to_awq(weight)
    assert (qweight.dtype, qweight.shape, scales.dtype, scales.shape) == (np.int32, (k, n // 8), np.float16, (3, n))
    assert qzeros.dtype == np.int32 and np.array_equal(qzeros, _filled((3, n // 8), 0x88888888))
    for checkpoint_format, word in (("gptq_v2", 0x88888888), ("gptq", 0x77777777)):
        qweight, qzeros, scales, g_idx = checkpoints.to_gptq(weight, checkpoint_format=checkpoint_format)
        assert (qweight.dtype, qweight.shape, scales.shape) == (np.int32, (k // 8, n), (3, n))
        assert qzeros.dtype == np.int32 and np.array_equal(qzeros, _filled((3, n // 8), word))
        assert g_idx.dtype == np.int32 and np.array_equal(g_idx, np.arange(k) // group)


def test_the_default_gptq_format_is_v1() -> None:
    """from_gptq and to_gptq without checkpoint_format read and write v1, gptqmodel's "gptq"."""
    qweight, qzeros, scales, g_idx = _gptq(np.random.default_rng(RNG_SEED), 8, 96, 32)
    weight = checkpoints.from_gptq(qweight, qzeros, scales, g_idx, 32)
    _assert_same(weight, checkpoints.from_gptq(qweight, qzeros, scales, g_idx, 32, checkpoint_format="gptq"))
    assert np.array_equal(checkpoints.to_gptq(weight)[1], qzeros)


@pytest.mark.parametrize("version", ["gemv", "gemv_fast", "marlin", "exllama", "GEMV"])
def test_awq_versions_other_than_gemm_are_refused(version: str) -> None:
    """AWQ's other packings are one-line errors that name gemm as what is read."""
    qweight, qzeros, scales = _awq(np.random.default_rng(RNG_SEED), 8, 96, 32)
    _assert_one_line_error("gemm", checkpoints.from_awq, qweight, qzeros, scales, 32, version=version)


@pytest.mark.parametrize(("k", "groups", "group"), [(96, 6, 16), (128, 1, -1), (128, 1, 0), (192, 2, 96)])
def test_groups_other_than_32_64_128_are_refused(k: int, groups: int, group: int) -> None:
    """Group 16, GPTQ's -1 (one group a row) and other sizes, with arrays of a matching shape."""
    rng = np.random.default_rng(RNG_SEED)
    qzeros, scales = _words(rng, (groups, 1)), _scales(rng, (groups, 8))
    _assert_one_line_error("group", checkpoints.from_awq, _words(rng, (k, 1)), qzeros, scales, group)
    g_idx = np.zeros(k, dtype=np.int32) if group < 1 else (np.arange(k) // group).astype(np.int32)
    for given in (g_idx, None):
        _assert_one_line_error("group", checkpoints.from_gptq, _words(rng, (k // 8, 8)), qzeros, scales, given, group)


def test_act_order_g_idx_is_refused() -> None:
    """A g_idx other than k // group (desc_act's permutation, or a wrong length) names g_idx."""
    rng = np.random.default_rng(RNG_SEED)
    qweight, qzeros, scales, g_idx = _gptq(rng, 40, 192, 64)
    for bad in (g_idx[rng.permutation(192)], g_idx[:-8], np.roll(g_idx, 1)):
        _assert_one_line_error("g_idx", checkpoints.from_gptq, qweight, qzeros, scales, bad, 64)


@pytest.mark.parametrize("checkpoint_format", ["gptq_v3", "awq", "GPTQ2"])
def test_unknown_gptq_formats_are_refused(checkpoint_format: str) -> None:
    qweight, qzeros, scales, g_idx = _gptq(np.random.default_rng(RNG_SEED), 8, 96, 32)
    _assert_one_line_error(
        "gptq", checkpoints.from_gptq, qweight, qzeros, scales, g_idx, 32, checkpoint_format=checkpoint_format
    )


def test_sym_true_needs_every_zero_to_be_8() -> None:
    """A symmetric v1 checkpoint (stored 7s) read as v2 has zeros of 7: sym=True refuses it; random
    zeros too."""
    rng = np.random.default_rng(RNG_SEED)
    qweight, qzeros, scales, g_idx = _gptq(rng, 40, 192, 64)
    sevens = _filled(qzeros.shape, 0x77777777)
    ok = checkpoints.from_gptq(qweight, sevens, scales, g_idx, 64, sym=True, checkpoint_format="gptq")
    assert ok.sym
    for zeros, checkpoint_format in ((sevens, "gptq_v2"), (qzeros, "gptq"), (qzeros, "gptq_v2")):
        _assert_one_line_error(
            "zero|sym",
            checkpoints.from_gptq,
            qweight,
            zeros,
            scales,
            g_idx,
            64,
            sym=True,
            checkpoint_format=checkpoint_format,
        )


def test_bad_awq_shapes_and_dtypes_are_one_line_errors() -> None:
    rng = np.random.default_rng(RNG_SEED)
    n, k, group = 40, 192, 64
    qweight, qzeros, scales = _awq(rng, n, k, group)
    bad = [
        (qweight[:-1], qzeros, scales),
        (qweight, qzeros[:-1], scales),
        (qweight, qzeros[:, :-1], scales),
        (qweight, qzeros, scales[:, :-8]),
        (qweight, qzeros, scales[:-1]),
        (qweight[:, :-1], qzeros, scales),
        (qweight.astype(np.float32), qzeros, scales),
        (qweight, qzeros.astype(np.float32), scales),
        (qweight, qzeros, scales.astype(np.int32)),
        (qweight.reshape(-1), qzeros, scales),
        (qweight, qzeros, scales.reshape(-1)),
    ]
    for case in bad:
        with pytest.raises(AutotuneError) as raised:
            checkpoints.from_awq(*case, group)
        assert "\n" not in str(raised.value)


def test_bad_gptq_shapes_and_dtypes_are_one_line_errors() -> None:
    rng = np.random.default_rng(RNG_SEED)
    n, k, group = 40, 192, 64
    qweight, qzeros, scales, g_idx = _gptq(rng, n, k, group)
    bad = [
        (qweight[:-1], qzeros, scales, None),
        (qweight[:, :-8], qzeros, scales, None),
        (qweight, qzeros[:-1], scales, None),
        (qweight, qzeros[:, :-1], scales, None),
        (qweight, qzeros, scales[:, :-8], None),
        (qweight, qzeros, scales[:-1], None),
        (qweight.astype(np.float32), qzeros, scales, None),
        (qweight, qzeros, scales.astype(np.int32), None),
        (qweight, qzeros, scales, g_idx.astype(np.float32) + 0.5),
        (qweight, qzeros, scales, g_idx.reshape(3, -1)),
    ]
    for qw, qz, sc, gi in bad:
        with pytest.raises(AutotuneError) as raised:
            checkpoints.from_gptq(qw, qz, sc, gi, group)
        assert "\n" not in str(raised.value)


def _save_file(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """safetensors' own writer."""
    numpy_io = pytest.importorskip("safetensors.numpy")
    numpy_io.save_file({name: np.ascontiguousarray(array) for name, array in tensors.items()}, str(path))


def _write_raw(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """A safetensors file written by hand: name -> (its header dtype, the array whose bytes it holds)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + b"".join(blobs))


def _awq_model(rng: np.random.Generator, group: int = 64) -> dict[str, np.ndarray]:
    """Two AWQ linears of different shapes and the float16 tensors a model also holds."""
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.standard_normal((16, 192)).astype(np.float16),
        "model.norm.weight": rng.standard_normal(192).astype(np.float16),
    }
    for prefix, (n, k) in ((Q_PROJ, (40, 192)), (DOWN_PROJ, (8, 384))):
        qweight, qzeros, scales = _awq(rng, n, k, group)
        tensors |= {f"{prefix}.qweight": qweight, f"{prefix}.qzeros": qzeros, f"{prefix}.scales": scales}
    return tensors


def _gptq_model(rng: np.random.Generator, group: int = 128) -> dict[str, np.ndarray]:
    tensors: dict[str, np.ndarray] = {"model.norm.weight": rng.standard_normal(384).astype(np.float16)}
    for prefix, (n, k) in ((Q_PROJ, (200, 384)), (DOWN_PROJ, (40, 256))):
        qweight, qzeros, scales, g_idx = _gptq(rng, n, k, group)
        tensors |= {
            f"{prefix}.qweight": qweight,
            f"{prefix}.qzeros": qzeros,
            f"{prefix}.scales": scales,
            f"{prefix}.g_idx": g_idx,
        }
    return tensors


def _write_config(folder: Path, quantization_config: dict[str, object]) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "quantization_config": quantization_config}
    (folder / "config.json").write_text(json.dumps(config))


def _awq_expected(tensors: dict[str, np.ndarray], group: int) -> dict[str, int4.Int4Weight]:
    return {
        prefix: checkpoints.from_awq(
            tensors[f"{prefix}.qweight"], tensors[f"{prefix}.qzeros"], tensors[f"{prefix}.scales"], group
        )
        for prefix in (Q_PROJ, DOWN_PROJ)
    }


def _gptq_expected(tensors: dict[str, np.ndarray], group: int, checkpoint_format: str) -> dict[str, int4.Int4Weight]:
    return {
        prefix: checkpoints.from_gptq(
            tensors[f"{prefix}.qweight"],
            tensors[f"{prefix}.qzeros"],
            tensors[f"{prefix}.scales"],
            tensors[f"{prefix}.g_idx"],
            group,
            checkpoint_format=checkpoint_format,
        )
        for prefix in (Q_PROJ, DOWN_PROJ)
    }


def _assert_checkpoint(got: dict[str, int4.Int4Weight], want: dict[str, int4.Int4Weight]) -> None:
    assert sorted(got) == sorted(want)
    for prefix, weight in want.items():
        _assert_same(got[prefix], weight)


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm", "zero_point": True}


def test_read_an_awq_folder_with_its_config(tmp_path: Path) -> None:
    """A folder of one file and config.json: exactly the quantized prefixes, each AutoAWQ's values."""
    tensors = _awq_model(np.random.default_rng(RNG_SEED))
    _save_file(tmp_path / "model.safetensors", tensors)
    _write_config(tmp_path, AWQ_CONFIG)
    got = checkpoints.read_checkpoint(tmp_path)
    _assert_checkpoint(got, _awq_expected(tensors, 64))
    reference = awq_reference_dequant(
        tensors[f"{Q_PROJ}.qweight"], tensors[f"{Q_PROJ}.qzeros"], tensors[f"{Q_PROJ}.scales"], 64
    )
    assert np.array_equal(int4.dequantize(got[Q_PROJ]), reference.T)
    _assert_checkpoint(checkpoints.read_checkpoint(str(tmp_path)), _awq_expected(tensors, 64))


def test_read_an_awq_file_without_a_config_infers_format_and_group(tmp_path: Path) -> None:
    tensors = _awq_model(np.random.default_rng(RNG_SEED), group=32)
    _save_file(tmp_path / "model.safetensors", tensors)
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path / "model.safetensors"), _awq_expected(tensors, 32))
    _assert_checkpoint(
        checkpoints.read_checkpoint(tmp_path / "model.safetensors", format="awq", group=32), _awq_expected(tensors, 32)
    )


def test_read_a_two_shard_folder_with_a_linear_split_across_shards(tmp_path: Path) -> None:
    """q_proj's qweight in one shard, its qzeros and scales in the other, as the index maps them."""
    tensors = _awq_model(np.random.default_rng(RNG_SEED))
    first = {name: tensors[name] for name in ("model.embed_tokens.weight", f"{Q_PROJ}.qweight")}
    second = {name: array for name, array in tensors.items() if name not in first}
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    _save_file(tmp_path / names[0], first)
    _save_file(tmp_path / names[1], second)
    weight_map = {name: names[0] for name in first} | {name: names[1] for name in second}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    _write_config(tmp_path, AWQ_CONFIG)
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path), _awq_expected(tensors, 64))


def test_read_a_gptq_folder_and_override_its_config(tmp_path: Path) -> None:
    """config.json's checkpoint_format decides v1 or v2; the argument overrides it; a GPTQ file alone
    is recognised by its shapes."""
    tensors = _gptq_model(np.random.default_rng(RNG_SEED))
    _save_file(tmp_path / "model.safetensors", tensors)
    _write_config(
        tmp_path,
        {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 128,
            "desc_act": False,
            "sym": False,
            "checkpoint_format": "gptq",
        },
    )
    v1, v2 = _gptq_expected(tensors, 128, "gptq"), _gptq_expected(tensors, 128, "gptq_v2")
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path), v1)
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path, checkpoint_format="gptq_v2"), v2)
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path / "model.safetensors", checkpoint_format="gptq_v2"), v2)
    scales = tensors[f"{Q_PROJ}.scales"]
    reference = gptq_reference_dequant(
        tensors[f"{Q_PROJ}.qweight"], tensors[f"{Q_PROJ}.qzeros"], scales, tensors[f"{Q_PROJ}.g_idx"], "gptq"
    )
    assert np.array_equal(int4.dequantize(checkpoints.read_checkpoint(tmp_path)[Q_PROJ]), reference.T)


def test_a_symmetric_v1_folder_read_as_v2_with_sym_is_refused(tmp_path: Path) -> None:
    """Stored 7s: symmetric as v1, zeros of 7 as v2, which sym=True refuses."""
    tensors = _gptq_model(np.random.default_rng(RNG_SEED))
    for prefix in (Q_PROJ, DOWN_PROJ):
        tensors[f"{prefix}.qzeros"] = _filled(tensors[f"{prefix}.qzeros"].shape, 0x77777777)
    _save_file(tmp_path / "model.safetensors", tensors)
    _write_config(tmp_path, {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True})
    got = checkpoints.read_checkpoint(tmp_path, checkpoint_format="gptq")
    assert all(weight.sym and weight.zeros is None for weight in got.values())
    _assert_one_line_error("zero|sym", checkpoints.read_checkpoint, tmp_path, checkpoint_format="gptq_v2", sym=True)


def test_bfloat16_scales_in_a_checkpoint(tmp_path: Path) -> None:
    """BF16 scales (read as uint16 words) give canonical bfloat16 scales with the same words."""
    rng = np.random.default_rng(RNG_SEED)
    qweight, qzeros, _ = _awq(rng, 40, 192, 64)
    words = dtypes.encode(rng.standard_normal((3, 40)).astype(np.float32), "bfloat16")
    _write_raw(
        tmp_path / "model.safetensors",
        {
            f"{Q_PROJ}.qweight": ("I32", qweight),
            f"{Q_PROJ}.qzeros": ("I32", qzeros),
            f"{Q_PROJ}.scales": ("BF16", words),
        },
    )
    _write_config(tmp_path, AWQ_CONFIG)
    weight = checkpoints.read_checkpoint(tmp_path)[Q_PROJ]
    assert weight.scale_dtype == "bfloat16" and np.array_equal(weight.scales, words.T)
    values = dtypes.decode(words, "bfloat16").astype(np.float32)
    assert np.array_equal(int4.dequantize(weight), awq_reference_dequant(qweight, qzeros, values, 64).T)


@pytest.mark.parametrize(
    ("quantization_config", "match"),
    [
        ({"quant_method": "awq", "bits": 8, "group_size": 64, "version": "gemm"}, "bit"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "bit"),
        ({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemv"}, "gemm"),
        ({"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemm"}, "group"),
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, "group"),
    ],
)
def test_configs_that_cannot_be_read_are_one_line_errors(
    tmp_path: Path, quantization_config: dict[str, object], match: str
) -> None:
    """8-bit checkpoints, AWQ's gemv packing, groups of 16 or -1, each with tensors of its own method."""
    model = _awq_model if quantization_config["quant_method"] == "awq" else _gptq_model
    _save_file(tmp_path / "model.safetensors", model(np.random.default_rng(RNG_SEED)))
    _write_config(tmp_path, quantization_config)
    _assert_one_line_error(match, checkpoints.read_checkpoint, tmp_path)


def test_missing_and_damaged_files_are_one_line_errors(tmp_path: Path) -> None:
    """A missing path, a truncated file (alone or as a folder's shard), a header length past the end,
    a header that is not JSON."""
    _assert_one_line_error(None, checkpoints.read_checkpoint, tmp_path / "absent.safetensors")
    _assert_one_line_error(None, checkpoints.read_checkpoint, tmp_path / "absent")
    whole = tmp_path / "whole.safetensors"
    _save_file(whole, _awq_model(np.random.default_rng(RNG_SEED)))
    data = whole.read_bytes()
    folder = tmp_path / "folder"
    folder.mkdir()
    damaged = {
        "truncated.safetensors": data[: len(data) // 2],
        "header_cut.safetensors": data[:20],
        "too_long.safetensors": (len(data)).to_bytes(8, "little") + data[8:],
        "not_json.safetensors": (12).to_bytes(8, "little") + b"{not json!!}" + b"\0" * 16,
        "tiny.safetensors": b"\x01\x02",
    }
    for name, content in damaged.items():
        path = tmp_path / name
        path.write_bytes(content)
        _assert_one_line_error(None, checkpoints.read_checkpoint, path)
        _assert_one_line_error(None, safetensors.read, path)
    (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
    _write_config(folder, AWQ_CONFIG)
    _assert_one_line_error(None, checkpoints.read_checkpoint, folder)


def test_project_safetensors_round_trip_without_the_library(tmp_path: Path) -> None:
    """safetensors.write then read gives every tensor back, dtype, shape and bytes."""
    rng = np.random.default_rng(RNG_SEED)
    tensors = {
        "f16": _scales(rng, (3, 40)),
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "i32": _words(rng, (384, 5)),
        "u8": rng.integers(0, 256, size=(7,), dtype=np.uint8),
        "i64": rng.integers(-(2**62), 2**62, size=(2, 2), dtype=np.int64),
        "scalar_like": np.ones((1,), dtype=np.float16),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "strided": _words(rng, (8, 6))[:, ::2],
    }
    path = tmp_path / "mine.safetensors"
    safetensors.write(path, tensors)
    back = safetensors.read(path)
    assert sorted(back) == sorted(tensors)
    for name, array in tensors.items():
        assert back[name].dtype == array.dtype and back[name].shape == array.shape, name
        assert np.array_equal(back[name].view(np.uint8), np.ascontiguousarray(array).view(np.uint8)), name


def test_project_safetensors_agrees_with_the_library(tmp_path: Path) -> None:
    """Each reads what the other writes; BF16 comes back as its uint16 words."""
    numpy_io = pytest.importorskip("safetensors.numpy")
    tensors = _awq_model(np.random.default_rng(RNG_SEED))
    theirs, mine = tmp_path / "theirs.safetensors", tmp_path / "mine.safetensors"
    numpy_io.save_file(tensors, str(theirs))
    safetensors.write(mine, tensors)
    for back in (safetensors.read(theirs), numpy_io.load_file(str(mine))):
        assert sorted(back) == sorted(tensors)
        for name, array in tensors.items():
            assert back[name].dtype == array.dtype and np.array_equal(back[name].view(np.uint8), array.view(np.uint8))
    words = np.array([[0x3F80, 0xBF80, 0x7F7F], [0x0001, 0x8000, 0x4049]], dtype=np.uint16)
    _write_raw(tmp_path / "bf16.safetensors", {"w": ("BF16", words)})
    back = safetensors.read(tmp_path / "bf16.safetensors")["w"]
    assert back.dtype == np.uint16 and np.array_equal(back, words)


def test_read_checkpoint_of_the_project_writer(tmp_path: Path) -> None:
    """A checkpoint written by safetensors.write alone, from to_awq, reads back as the weights."""
    weights = {
        Q_PROJ: int4.quantize_int4(_random_weights(40, 192), 64, sym=False),
        DOWN_PROJ: int4.quantize_int4(_random_weights(8, 384), 64, sym=True),
    }
    tensors = {"model.norm.weight": np.ones(192, dtype=np.float16)}
    for prefix, weight in weights.items():
        qweight, qzeros, scales = checkpoints.to_awq(weight)
        tensors |= {f"{prefix}.qweight": qweight, f"{prefix}.qzeros": qzeros, f"{prefix}.scales": scales}
    safetensors.write(tmp_path / "model.safetensors", tensors)
    _write_config(tmp_path, AWQ_CONFIG)
    _assert_checkpoint(checkpoints.read_checkpoint(tmp_path), weights)


def _write_with_offsets(path: Path, tensors: dict[str, tuple[np.ndarray, int]]) -> None:
    """A safetensors file whose header puts each array's bytes at the given offset into the data."""
    header, data = {}, bytearray()
    for name, (array, begin) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": "I32", "shape": list(array.shape), "data_offsets": [begin, begin + len(raw)]}
        data.extend(b"\0" * max(0, begin + len(raw) - len(data)))
        data[begin : begin + len(raw)] = raw
    encoded = json.dumps(header).encode()
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + bytes(data))


def test_damaged_or_ambiguous_checkpoints_are_one_line_errors(tmp_path: Path) -> None:
    """What would read other bytes or other numbers than the checkpoint meant is refused, in one line."""
    qweight, qzeros, scales = _awq(np.random.default_rng(RNG_SEED), 40, 192, 64)
    parts = {"x.qweight": ("I32", qweight), "x.qzeros": ("I32", qzeros)}
    # U16 words are integers, not bfloat16: read as scales they would be other numbers.
    _write_raw(tmp_path / "u16.safetensors", parts | {"x.scales": ("U16", scales.view(np.uint16))})
    _assert_one_line_error(
        "x.scales is U16; scales are F16, BF16, F32", checkpoints.read_checkpoint, tmp_path / "u16.safetensors"
    )
    # The same tensor in two shards: which one the model meant is unknown.
    shards = tmp_path / "shards"
    shards.mkdir()
    _write_raw(shards / "a.safetensors", parts | {"x.scales": ("F16", scales)})
    _write_raw(shards / "b.safetensors", {"x.scales": ("F16", scales)})
    _assert_one_line_error("'x.scales' is in both a.safetensors and b.safetensors", checkpoints.read_checkpoint, shards)
    # Byte ranges that leave a hole or overlap would read another tensor's bytes.
    words = np.arange(16, dtype=np.int32).reshape(2, 8)
    _write_with_offsets(tmp_path / "gap.safetensors", {"x.qweight": (words, 1)})
    _assert_one_line_error("leaves a gap of 1 bytes", safetensors.header, tmp_path / "gap.safetensors")
    _write_with_offsets(tmp_path / "overlap.safetensors", {"a": (words, 0), "b": (words, 32)})
    _assert_one_line_error("overlaps the tensor before it", safetensors.header, tmp_path / "overlap.safetensors")
    nested = b"[" * 100_000 + b"]" * 100_000
    (tmp_path / "nested.safetensors").write_bytes(len(nested).to_bytes(8, "little") + nested)
    _assert_one_line_error("its header is not JSON", safetensors.header, tmp_path / "nested.safetensors")
    # Settings of another type, or a group of 0, are refused rather than read as something else.
    folder = tmp_path / "model"
    folder.mkdir()
    _write_raw(folder / "model.safetensors", parts | {"x.scales": ("F16", scales)})
    _write_config(folder, AWQ_CONFIG | {"bits": "4"})
    _assert_one_line_error("bits is '4', not an integer", checkpoints.read_checkpoint, folder)
    _write_config(folder, AWQ_CONFIG)
    _assert_one_line_error("group must be one of 32, 64, 128, got 0", checkpoints.read_checkpoint, folder, group=0)
    bad = scales.copy()
    bad[0, 0] = np.nan
    _assert_one_line_error("scales hold NaN or inf", checkpoints.from_awq, qweight, qzeros, bad, 64)
