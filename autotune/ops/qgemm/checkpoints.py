"""The int4 packings of AWQ and GPTQ checkpoints, to and from the canonical format (format.py,
docs/lowbit.md), exactly, on numpy arrays; and a reader that finds every quantized linear in a
safetensors file or folder.

Both formats hold W transposed (K x N, in_features by out_features), as 32-bit words of 8 codes, with
a scale (float16) and an integer zero per group of `group` k and column n: w = (q - z) * s.

- AWQ, its "gemm" version (AutoAWQ's WQLinear_GEMM): qweight (K, N / 8) packed along N, nibble i of a
  word holding column 8 c + AWQ_ORDER[i]; qzeros (K / group, N / 8) packed the same; scales
  (K / group, N). Its "gemv", "gemv_fast" and kernel-specific layouts (marlin, exllama) are refused.
- GPTQ (GPTQModel, AutoGPTQ): qweight (K / 8, N) packed along K, word (i, n) holding k = 8 i + j in
  bits 4 j; qzeros (groups, ceil(N / 8)) packed along N in order; scales (groups, N); g_idx (K,) the
  group of each k, refused where it is not k // group (act-order checkpoints). checkpoint_format
  "gptq_v2" stores the zeros as they are; "gptq" (v1) stores z - 1, and GPTQModel reads it by adding
  0x11111111 to each 32-bit word, carries between nibbles included: so do we, bit for bit.

A weight whose every zero is 8 comes out symmetric (zeros None): the same values, and the symmetric
kernels, which read no zeros.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import refuse_to_read
from autotune.ops.qgemm import format as int4
from autotune.ops.qgemm import safetensors

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # the column each nibble of an AWQ word holds
AWQ_VERSIONS = ("gemm",)
GPTQ_FORMATS = ("gptq", "gptq_v2")
_V1_OFFSET = 0x11111111  # one added to each nibble of a word
_SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)
FORMATS = ("awq", "gptq")
SCALE_STORAGE = ("F16", "BF16", "F32")  # the safetensors dtypes a checkpoint's scales may have


def _words(array: Any, what: str) -> np.ndarray:
    """A 2-D int32 (or uint32) array of packed codes -> its uint32 words."""
    if not isinstance(array, np.ndarray) or array.ndim != 2 or array.dtype not in (np.int32, np.uint32):
        described = f"{array.dtype} {tuple(array.shape)}" if isinstance(array, np.ndarray) else type(array).__name__
        raise AutotuneError(f"{what} must be a 2-D int32 array of packed 4-bit codes, got {described}")
    return array.view(np.uint32)


def _nibbles(words: np.ndarray) -> np.ndarray:
    """uint32 (R, C) -> uint8 (R, C, 8): nibble i of each word, from the low bits up."""
    return ((words[..., None] >> _SHIFTS) & 0xF).astype(np.uint8)


def _pack(nibbles: np.ndarray) -> np.ndarray:
    """uint8 (R, C, 8) -> int32 (R, C): _nibbles' inverse."""
    words: np.ndarray = (nibbles.astype(np.uint32) << _SHIFTS).sum(axis=-1, dtype=np.uint32)
    return words.view(np.int32)


def _scales(scales: Any, shape: tuple[int, int], what: str) -> np.ndarray:
    if not isinstance(scales, np.ndarray) or tuple(scales.shape) != shape:
        got = tuple(scales.shape) if isinstance(scales, np.ndarray) else type(scales).__name__
        raise AutotuneError(f"{what} scales must have shape {shape}, got {got}")
    return scales


def _group_of(k: int, groups: int, group: Any, what: str) -> int:
    checked = int4.check_group(group)
    if k % checked or k // checked != groups:
        raise AutotuneError(
            f"{what}: K = {k} in groups of {checked} needs {-(-k // checked)} groups, the scales hold {groups}"
        )
    return checked


def _canonical(codes: np.ndarray, zeros: np.ndarray, scales: np.ndarray, group: int) -> int4.Int4Weight:
    """Codes (K, N), zeros and scales (groups, N), as the formats hold them -> the canonical weight."""
    scales_nk = np.ascontiguousarray(scales.T)
    zeros_nk = np.ascontiguousarray(zeros.T)
    sym = bool((zeros_nk == int4.SYM_OFFSET).all())
    return int4.int4_weight(int4.pack_int4(np.ascontiguousarray(codes.T)), scales_nk, None if sym else zeros_nk, group)


def _zeros_of(weight: int4.Int4Weight) -> np.ndarray:
    """(groups, N) uint8 zeros of a canonical weight: 8 where it is symmetric."""
    if weight.zeros is None:
        return np.full((weight.k // weight.group, weight.n), int4.SYM_OFFSET, dtype=np.uint8)
    return np.ascontiguousarray(weight.zeros.T)


def _numpy_weight(weight: int4.Int4Weight) -> int4.Int4Weight:
    if not isinstance(weight, int4.Int4Weight) or not isinstance(weight.qweight, np.ndarray):
        raise AutotuneError("exporting an int4 weight takes an Int4Weight of numpy arrays")
    return weight


def from_awq(qweight: Any, qzeros: Any, scales: Any, group: Any, version: str = "gemm") -> int4.Int4Weight:
    """AutoAWQ's "gemm" packing (module docstring) -> the canonical weight, exactly."""
    if version not in AWQ_VERSIONS:
        raise AutotuneError(
            f"AWQ version {version!r} is not supported: only {', '.join(AWQ_VERSIONS)} "
            "(qweight K x N/8 packed along N); re-export the checkpoint with version='gemm'"
        )
    words = _words(qweight, "AWQ qweight")
    k, n = words.shape[0], 8 * words.shape[1]
    zero_words = _words(qzeros, "AWQ qzeros")
    groups = zero_words.shape[0]
    group = _group_of(k, groups, group, "AWQ")
    if zero_words.shape != (groups, n // 8):
        raise AutotuneError(f"AWQ qzeros must have shape {(groups, n // 8)}, got {zero_words.shape}")
    scales = _scales(scales, (groups, n), "AWQ")
    # nibble i holds column AWQ_ORDER[i]: column j is nibble AWQ_ORDER.index(j)
    columns = [AWQ_ORDER.index(j) for j in range(8)]
    codes = _nibbles(words)[..., columns].reshape(k, n)
    zeros = _nibbles(zero_words)[..., columns].reshape(groups, n)
    return _canonical(codes, zeros, scales, group)


def to_awq(weight: int4.Int4Weight) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The canonical weight -> AWQ "gemm" (qweight, qzeros, scales); N must be a multiple of 8."""
    weight = _numpy_weight(weight)
    if weight.n % 8:
        raise AutotuneError(f"AWQ packs 8 output features a word: N = {weight.n} is not a multiple of 8")
    order = list(AWQ_ORDER)
    codes = int4.unpack_int4(weight.qweight).T.reshape(weight.k, weight.n // 8, 8)[..., order]
    zeros = _zeros_of(weight).reshape(-1, weight.n // 8, 8)[..., order]
    return _pack(codes), _pack(zeros), np.ascontiguousarray(weight.scales.T)


def _trivial_g_idx(g_idx: Any, k: int, group: int) -> None:
    if g_idx is None:
        return
    expected = np.arange(k) // group
    if not isinstance(g_idx, np.ndarray) or g_idx.shape != (k,) or not np.array_equal(g_idx, expected):
        raise AutotuneError(
            "GPTQ g_idx is not k // group (an act-order checkpoint, desc_act=True, whose groups are permuted): "
            "only g_idx = k // group is supported"
        )


def from_gptq(
    qweight: Any,
    qzeros: Any,
    scales: Any,
    g_idx: Any = None,
    group: Any = 128,
    sym: bool | None = None,
    checkpoint_format: str = "gptq",
) -> int4.Int4Weight:
    """GPTQ's packing (module docstring) -> the canonical weight, exactly. `sym` True checks that every
    zero is 8; None or False take the zeros as they are (symmetric where all are 8)."""
    if checkpoint_format not in GPTQ_FORMATS:
        raise AutotuneError(f"GPTQ checkpoint_format {checkpoint_format!r}: supported are {', '.join(GPTQ_FORMATS)}")
    words = _words(qweight, "GPTQ qweight")
    k, n = 8 * words.shape[0], words.shape[1]
    zero_words = _words(qzeros, "GPTQ qzeros")
    groups = zero_words.shape[0]
    group = _group_of(k, groups, group, "GPTQ")
    if zero_words.shape != (groups, -(-n // 8)):
        raise AutotuneError(f"GPTQ qzeros must have shape {(groups, -(-n // 8))}, got {zero_words.shape}")
    scales = _scales(scales, (groups, n), "GPTQ")
    _trivial_g_idx(g_idx, k, group)
    if checkpoint_format == "gptq":
        zero_words = zero_words + np.uint32(_V1_OFFSET)  # wraps in uint32, as GPTQModel's int32 sum
    codes = _nibbles(words).transpose(0, 2, 1).reshape(k, n)
    zeros = _nibbles(zero_words).reshape(groups, -1)[:, :n]
    if sym and not (zeros == int4.SYM_OFFSET).all():
        found = int(zeros[zeros != int4.SYM_OFFSET][0])
        hint = " (a checkpoint_format 'gptq' file read as 'gptq_v2'?)" if found == int4.SYM_OFFSET - 1 else ""
        raise AutotuneError(f"GPTQ sym=True, but a zero point is {found}, not {int4.SYM_OFFSET}{hint}")
    return _canonical(codes, zeros, scales, group)


def to_gptq(
    weight: int4.Int4Weight, checkpoint_format: str = "gptq"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The canonical weight -> GPTQ (qweight, qzeros, scales, g_idx) in `checkpoint_format`."""
    weight = _numpy_weight(weight)
    if checkpoint_format not in GPTQ_FORMATS:
        raise AutotuneError(f"GPTQ checkpoint_format {checkpoint_format!r}: supported are {', '.join(GPTQ_FORMATS)}")
    if weight.k % 8:
        raise AutotuneError(f"GPTQ packs 8 input features a word: K = {weight.k} is not a multiple of 8")
    codes = int4.unpack_int4(weight.qweight).T.reshape(weight.k // 8, 8, weight.n).transpose(0, 2, 1)
    zeros = _zeros_of(weight)
    padded = np.zeros((zeros.shape[0], -(-weight.n // 8) * 8), dtype=np.uint8)
    padded[:, : weight.n] = zeros
    zero_words = _pack(padded.reshape(zeros.shape[0], -1, 8))
    if checkpoint_format == "gptq":
        zero_words = (zero_words.view(np.uint32) - np.uint32(_V1_OFFSET)).view(np.int32)
    g_idx = (np.arange(weight.k) // weight.group).astype(np.int32)
    return _pack(codes), zero_words, np.ascontiguousarray(weight.scales.T), g_idx


# --- checkpoints on disk -------------------------------------------------------------------------


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if files:
            return files
        raise AutotuneError(f"{path} holds no .safetensors file")
    if path.exists():
        refuse_to_read(path, "checkpoint")  # a FIFO, a device: says which
    raise AutotuneError(f"no such file or folder: {path}")


def _config(path: Path) -> dict[str, Any]:
    """The quantization settings a checkpoint folder declares (config.json's quantization_config, or
    an older GPTQ folder's quantize_config.json); {} where it declares none."""
    folder = path if path.is_dir() else path.parent
    for name, key in (("config.json", "quantization_config"), ("quantize_config.json", None)):
        file = folder / name
        if not file.is_file():
            continue
        try:
            loaded = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AutotuneError(f"cannot read {file}: {e}") from None
        settings = loaded.get(key) if key and isinstance(loaded, dict) else loaded
        if isinstance(settings, dict):
            return settings
    return {}


def _settings(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """format, group, sym, version and checkpoint_format: the arguments where given, else the config."""
    method = config.get("quant_method")
    settings = {
        "format": str(method).lower() if method is not None else None,
        "group": config.get("group_size"),
        "sym": config.get("sym"),
        "version": str(config.get("version") or "gemm").lower(),
        "checkpoint_format": config.get("checkpoint_format"),
    }
    settings.update({key: value for key, value in overrides.items() if value is not None})
    bits = config.get("bits", config.get("w_bit", 4))
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise AutotuneError(f"the checkpoint's bits is {bits!r}, not an integer (only 4-bit AWQ and GPTQ are imported)")
    if bits != 4:
        raise AutotuneError(f"the checkpoint holds {bits}-bit weights: only 4-bit AWQ and GPTQ are imported")
    if settings["format"] is not None and settings["format"] not in FORMATS:
        raise AutotuneError(f"checkpoint format {settings['format']!r}: supported are {', '.join(FORMATS)}")
    return settings


def _inferred_format(tensors: Mapping[str, np.ndarray]) -> str:
    """AWQ holds qweight (K, N / 8) beside scales (groups, N); GPTQ qweight (K / 8, N)."""
    qweight, scales = tensors["qweight"], tensors["scales"]
    if qweight.ndim != 2 or scales.ndim != 2:
        raise AutotuneError(f"qweight {qweight.shape} and scales {scales.shape} must be 2-D")
    if "g_idx" in tensors or qweight.shape[1] == scales.shape[1]:
        return "gptq"
    if 8 * qweight.shape[1] == scales.shape[1]:
        return "awq"
    raise AutotuneError(f"cannot tell AWQ from GPTQ by qweight {qweight.shape} and scales {scales.shape}: pass format=")


def read_checkpoint(
    path: Path | str,
    *,
    format: str | None = None,
    group: int | None = None,
    sym: bool | None = None,
    checkpoint_format: str | None = None,
) -> dict[str, int4.Int4Weight]:
    """Every quantized linear of a safetensors file or folder (sharded files included) -> {its module
    name: the canonical weight}. The folder's config.json says the format; the arguments override it;
    without either the format is told by the shapes, the group by K over the groups, GPTQ's zeros are
    read as checkpoint_format "gptq" (v1, what GPTQModel writes by default)."""
    path = Path(path)
    files = _files(path)
    settings = _settings(
        _config(path), {"format": format, "group": group, "sym": sym, "checkpoint_format": checkpoint_format}
    )
    where: dict[str, Path] = {}
    stored_as: dict[str, str] = {}  # name -> the file's dtype (U16 and BF16 both read as uint16 words)
    for file in files:
        for name, entry in safetensors.header(file).items():
            if name in where:
                raise AutotuneError(f"{path}: tensor {name!r} is in both {where[name].name} and {file.name}")
            where[name], stored_as[name] = file, entry["dtype"]
    prefixes = sorted(name.removesuffix(".qweight") for name in where if name.endswith(".qweight"))
    if not prefixes:
        raise AutotuneError(f"{path} holds no quantized linear (no tensor named <module>.qweight)")
    weights = {}
    for prefix in prefixes:
        parts = {part: f"{prefix}.{part}" for part in ("qweight", "qzeros", "scales", "g_idx")}
        missing = [name for part, name in parts.items() if part != "g_idx" and name not in where]
        if missing:
            raise AutotuneError(f"{path}: {prefix} has a qweight but no {missing[0]}")
        if stored_as[parts["scales"]] not in SCALE_STORAGE:
            raise AutotuneError(
                f"{path}: {parts['scales']} is {stored_as[parts['scales']]}; scales are {', '.join(SCALE_STORAGE)}"
            )
        tensors = {part: safetensors.read(where[name], [name])[name] for part, name in parts.items() if name in where}
        try:
            weights[prefix] = _imported(tensors, settings)
        except AutotuneError as e:
            raise AutotuneError(f"{prefix}: {e}") from None
    return weights


def _imported(tensors: Mapping[str, np.ndarray], settings: Mapping[str, Any]) -> int4.Int4Weight:
    kind = settings["format"] or _inferred_format(tensors)
    qweight, qzeros, scales = tensors["qweight"], tensors["qzeros"], tensors["scales"]
    rows = qweight.shape[0] * (8 if kind == "gptq" else 1) if qweight.ndim == 2 else 0  # K
    group = settings["group"]  # given: checked by the format (0 or -1 refused), else told by K over the groups
    if group is None:
        group = rows // scales.shape[0] if scales.ndim == 2 and scales.shape[0] else 0
    if kind == "awq":
        return from_awq(qweight, qzeros, scales, group, settings["version"])
    return from_gptq(
        qweight,
        qzeros,
        scales,
        tensors.get("g_idx"),
        group,
        settings["sym"],
        settings["checkpoint_format"] or "gptq",
    )
