"""Read and write safetensors files on numpy alone: the checkpoints int4 weights are imported from
(checkpoints.py). The format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the bytes. The `safetensors` package is not needed: its numpy
reader has no bfloat16, which a checkpoint's other tensors often are; here BF16 comes back as uint16
words, the project's host form of bfloat16 (autotune/core/dtypes.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.errors import AutotuneError
from autotune.core.file_kinds import refuse_to_read
from autotune.core.output import write_bytes_atomically

DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # the raw words
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
}
_NAMES = {dtype: name for name, dtype in DTYPES.items() if name != "BF16"}
_MAX_HEADER = 100 * 2**20  # the format's own bound on the JSON header


def header(path: Path | str) -> dict[str, dict[str, Any]]:
    """The tensors a file holds: name -> {"dtype", "shape", "data_offsets"}, checked against the file's
    size; a one-line AutotuneError for a file that is not a whole safetensors file."""
    path = Path(path)
    refuse_to_read(path, "safetensors file")
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > min(_MAX_HEADER, size - 8):
                raise AutotuneError(f"{path} is not a safetensors file (its header length {length} exceeds the file)")
            entries = json.loads(f.read(length))
    except OSError as e:
        raise AutotuneError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep
        raise AutotuneError(f"{path} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(entries, dict):
        raise AutotuneError(f"{path} is not a safetensors file (its header is not a JSON object)")
    data_bytes = size - 8 - length
    tensors = {}
    for name, entry in entries.items():
        if name == "__metadata__":
            continue
        tensors[name] = _checked_entry(path, name, entry, data_bytes)
    # The format's own rule: the tensors' byte ranges tile the data with no hole and no overlap. A
    # damaged range that still lies inside the file would read another tensor's bytes.
    end = 0
    for name, entry in sorted(tensors.items(), key=lambda item: item[1]["data_offsets"]):
        begin = entry["data_offsets"][0]
        if begin != end:
            what = "overlaps the tensor before it" if begin < end else f"leaves a gap of {begin - end} bytes before it"
            raise AutotuneError(f"{path}: tensor {name!r} {what} (a damaged header?)")
        end = entry["data_offsets"][1]
    if end != data_bytes:
        raise AutotuneError(f"{path}: the tensors end at byte {end} of {data_bytes} data bytes (a damaged header?)")
    return tensors


def _checked_entry(path: Path, name: str, entry: Any, data_bytes: int) -> dict[str, Any]:
    try:
        dtype, shape, (begin, end) = entry["dtype"], [int(d) for d in entry["shape"]], entry["data_offsets"]
        begin, end = int(begin), int(end)
    except (TypeError, KeyError, ValueError):
        raise AutotuneError(f"{path}: tensor {name!r} has a damaged header entry") from None
    if dtype not in DTYPES:
        known = ", ".join(DTYPES)
        raise AutotuneError(f"{path}: tensor {name!r} is {dtype}; this reader knows {known}")
    if any(d < 0 for d in shape) or not 0 <= begin <= end <= data_bytes:
        raise AutotuneError(f"{path}: tensor {name!r} lies outside the file (truncated?)")
    if end - begin != math.prod(shape) * DTYPES[dtype].itemsize:
        raise AutotuneError(f"{path}: tensor {name!r} holds {end - begin} bytes, its shape {shape} needs another size")
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def read(path: Path | str, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The file's tensors (those in `names` where given) as numpy arrays of their own: BF16 as uint16 words."""
    path = Path(path)
    entries = header(path)
    wanted = list(entries) if names is None else list(names)
    missing = [name for name in wanted if name not in entries]
    if missing:
        raise AutotuneError(f"{path} holds no tensor {missing[0]!r}")
    with path.open("rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")  # the data follow the header
        tensors = {}
        for name in wanted:
            entry = entries[name]
            begin, end = entry["data_offsets"]
            f.seek(start + begin)
            raw = f.read(end - begin)
            if len(raw) != end - begin:
                raise AutotuneError(f"{path}: tensor {name!r} lies outside the file (truncated?)")
            tensors[name] = np.frombuffer(raw, dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()
    return tensors


def write(path: Path | str, tensors: Mapping[str, np.ndarray], bfloat16: Iterable[str] = ()) -> None:
    """Write `tensors` as a safetensors file (those named in `bfloat16`, uint16 words, as BF16), through
    a new file renamed into place (autotune/core/output.py), so that a failure leaves no half-written file."""
    path = Path(path)
    as_bf16 = set(bfloat16)
    entries: dict[str, Any] = {}
    offset = 0
    arrays = []
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        kind = "BF16" if name in as_bf16 else _NAMES.get(np.dtype(dtype))
        if kind is None or (kind == "BF16" and array.dtype != np.uint16):
            raise AutotuneError(f"cannot write tensor {name!r} of dtype {array.dtype} to safetensors")
        data = array.astype(DTYPES[kind], copy=False).tobytes()
        entries[name] = {"dtype": kind, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        arrays.append(data)
    encoded = json.dumps(entries, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    write_bytes_atomically(path, [len(encoded).to_bytes(8, "little"), encoded, *arrays], what="safetensors file")
