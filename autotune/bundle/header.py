"""The C header of a deployable bundle: template.h (types, the families' shape rules, launch
geometry, kernel arguments, the look-up) with this GPU's constants and entries filled in.

Every string that reaches the header, a GPU name from a records file included, is written as an
escaped C string literal; nothing from the database is written into a comment or an identifier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.errors import AutotuneError
from autotune.core.limits import MAX_GRID_Y, MAX_REGISTERS_PER_THREAD, MAX_THREADS_PER_SM, REGISTERS_PER_SM
from autotune.core.problem import MAX_DIM, MAX_MATRIX_BYTES
from autotune.gpu import tma
from autotune.ops import gemm
from autotune.ops import gemv as gemv_op
from autotune.ops.gemm import mma
from autotune.ops.gemm import skinny as gemm_skinny
from autotune.ops.gemv import narrow, strips, tall

if TYPE_CHECKING:
    from autotune.bundle import Bundle, Entry

TEMPLATE = Path(__file__).with_name("template.h")

# The parameters of every family's configs, in the order of autotune_config's fields. A config
# with a parameter not listed here cannot be written: add it here (the header's rules name fields).
CONFIG_FIELDS = (
    "block", "lanes", "vec", "unroll", "rows", "x_smem", "policy", "cluster", "split", "persist", "prefetch",
    "order", "nt", "kw", "mt", "a_chunk", "wn", "stages", "bm", "bn", "bk", "wm", "tm", "tn", "occ", "swizzle",
    "wgs", "layout", "tma", "width", "per_sm", "lean", "bands", "depth",
)  # fmt: skip
FAMILY_CONSTANTS = {
    "gemv": "AUTOTUNE_FAMILY_GEMV",
    "skinny": "AUTOTUNE_FAMILY_SKINNY",
    "skinny_tc": "AUTOTUNE_FAMILY_SKINNY_TC",
    "simt": "AUTOTUNE_FAMILY_SIMT",
    "mma": "AUTOTUNE_FAMILY_MMA",
    "wgmma": "AUTOTUNE_FAMILY_WGMMA",
    "strips": "AUTOTUNE_FAMILY_STRIPS",
    "narrow": "AUTOTUNE_FAMILY_NARROW",
    "tall": "AUTOTUNE_FAMILY_TALL",
}
DTYPE_CONSTANTS = {"float32": "AUTOTUNE_FLOAT32", "float16": "AUTOTUNE_FLOAT16", "bfloat16": "AUTOTUNE_BFLOAT16"}
_SIMPLE_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "?": "\\?"}


def c_string(text: str) -> str:
    """`text` as a C string literal that means exactly it in C99 and C++: quotes, backslashes and
    `?` (trigraphs) escaped, every byte outside printable ASCII as a three-digit octal escape (a hex
    escape would swallow the digits after it)."""
    parts = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in _SIMPLE_ESCAPES:
            parts.append(_SIMPLE_ESCAPES[char])
        elif 0x20 <= byte < 0x7F:
            parts.append(char)
        else:
            parts.append(f"\\{byte:03o}")
    return '"' + "".join(parts) + '"'


def _int(value: object) -> str:
    if type(value) is not int:
        raise AutotuneError(f"the bundle header takes integers here, got {value!r}"[:200])
    return str(value)


def _double(value: float) -> str:
    if not math.isfinite(value):
        raise AutotuneError(f"the bundle header takes finite times, got {value!r}")
    return repr(float(value))


def _braces(values: Iterable[object]) -> str:
    return "{" + ", ".join(_int(v) for v in values) + "}"


def _tma_codes() -> dict[str, int]:
    """cuda.h's enum values the TMA maps use, from the encoding the launch path itself uses."""
    codes: dict[str, int] = {}
    for dtype, name in (("float16", "FLOAT16"), ("bfloat16", "BFLOAT16")):
        codes[f"DATA_{name}"] = tma.tiled_map(dtype, 1, 8, tma.Box(1, 8, 0)).data_type
    for swizzle, name in ((0, "NONE"), (32, "32B"), (64, "64B"), (128, "128B")):
        codes[f"SWIZZLE_{name}"] = tma.tiled_map("float16", 1, 8, tma.Box(1, 8, swizzle)).swizzle
    probe = tma.tiled_map("float16", 1, 8, tma.Box(1, 8, 0))
    codes.update(INTERLEAVE_NONE=probe.interleave, L2_PROMOTION=probe.l2_promotion, OOB_FILL=probe.oob_fill)
    return codes


def _constants(bundle: Bundle) -> str:
    gpu = bundle.gpu
    major = int(gpu.compute_capability.split(".")[0])
    lines = [
        f"#define AUTOTUNE_BUNDLE_FORMAT {_int(bundle.format)}",
        f"#define AUTOTUNE_BUNDLE_GPU {c_string(gpu.name)}",
        f"#define AUTOTUNE_BUNDLE_COMPUTE_CAPABILITY {c_string(gpu.compute_capability)}",
        f"#define AUTOTUNE_BUNDLE_ARCH {c_string(gpu.arch)}",
        f"#define AUTOTUNE_BUNDLE_SM_COUNT {_int(gpu.sm_count)}",
        "/* Thread-block clusters (and with them TMA configs) run on this GPU; the wgmma family does. */",
        f"#define AUTOTUNE_BUNDLE_CLUSTERS {int(major >= 9)}",
        f"#define AUTOTUNE_BUNDLE_WGMMA {int(gpu.compute_capability == '9.0')}",
        "/* Every array's address must be a multiple of this many bytes. */",
        f"#define AUTOTUNE_ALIGNMENT {_int(bundle.alignment)}",
        "/* The largest size and matrix a problem may have (autotune/core/problem.py): kernels index with",
        " * 32-bit ints, and autotune_runs answers no beyond them, as the Python selector refuses them. */",
        f"#define AUTOTUNE_MAX_DIM {_int(MAX_DIM)}LL",
        f"#define AUTOTUNE_MAX_MATRIX_BYTES {_int(MAX_MATRIX_BYTES)}LL",
        "/* Limits the families' rules use (autotune/ops/). */",
        f"#define AUTOTUNE_SKINNY_MAX_M {_int(gemm.SKINNY_MAX_M)}",
        f"#define AUTOTUNE_SKINNY_MIN_NT {_int(gemm_skinny.NT_CHOICES[0])}",
        f"#define AUTOTUNE_TC_MIN_M {_int(gemm.TC_MIN_M)}",
        f"#define AUTOTUNE_GEMV_MAX_SHARED_BYTES {_int(gemv_op.MAX_SHARED_BYTES)}",
        f"#define AUTOTUNE_MMA_SPLIT_MAX_TILES {_int(mma.SPLIT_MAX_TILES)}",
        f"#define AUTOTUNE_MAX_GRID_Y {_int(MAX_GRID_Y)}",
        f"#define AUTOTUNE_STRIPS_MIN_N {_int(strips.MIN_N)}",
        f"#define AUTOTUNE_STRIPS_MAX_N {_int(strips.MAX_N)}",
        f"#define AUTOTUNE_STRIPS_ROWS_PER_COLUMN {_int(strips.ROWS_PER_COLUMN)}",
        f"#define AUTOTUNE_STRIPS_MIN_WIDTH {_int(strips.WIDTHS[0])}",
        f"#define AUTOTUNE_STRIPS_REGISTER_BASE {_int(strips.REGISTER_BASE)}",
        f"#define AUTOTUNE_NARROW_MIN_N {_int(narrow.MIN_N)}",
        f"#define AUTOTUNE_NARROW_MIN_WIDTH {_int(narrow.WIDTHS[0])}",
        f"#define AUTOTUNE_NARROW_REGISTER_BASE {_int(narrow.REGISTER_BASE)}",
        f"#define AUTOTUNE_NARROW_LEAN_REGISTERS {_int(narrow.LEAN_REGISTERS)}",
        f"#define AUTOTUNE_TALL_MAX_N {_int(tall.MAX_N)}",
        f"#define AUTOTUNE_TALL_MOST_BYTES_IN_FLIGHT {_int(tall.MOST_BYTES_IN_FLIGHT)}",
        f"#define AUTOTUNE_MAX_THREADS_PER_SM {_int(MAX_THREADS_PER_SM)}",
        f"#define AUTOTUNE_REGISTERS_PER_SM {_int(REGISTERS_PER_SM)}",
        f"#define AUTOTUNE_MAX_REGISTERS_PER_THREAD {_int(MAX_REGISTERS_PER_THREAD)}",
        "/* cuTensorMapEncodeTiled's arguments for TMA entries (cuda.h's enum values). */",
        f"#define AUTOTUNE_TMA_MAP_BYTES {_int(tma.MAP_BYTES)}",
    ]
    lines += [f"#define AUTOTUNE_TMA_{name} {_int(code)}" for name, code in _tma_codes().items()]
    lines.append(f"#define AUTOTUNE_ENTRY_COUNT ((size_t){_int(len(bundle.entries))})")
    return "\n".join(lines)


def _config_fields() -> str:
    return "\n  ".join(f"int {name};" for name in CONFIG_FIELDS)


def _entry(entry: Entry) -> str:
    p, launch = entry.problem, entry.launch
    unknown = sorted(set(entry.config) - set(CONFIG_FIELDS))
    if unknown:
        raise AutotuneError(f"{p}: the bundle header has no field for the parameters {', '.join(unknown)}")
    maps = launch.operand_maps
    boxes = [(0, 0, 0), (0, 0, 0)] if maps is None else [(b.rows, b.cols, b.swizzle) for b in (maps.a, maps.b)]
    fields = [
        _int(entry.index),
        c_string(p.op),
        c_string(p.dtype),
        DTYPE_CONSTANTS[p.dtype],
        _int(p.m),
        _int(p.n),
        _int(p.k),
        _int(int(p.trans)),
        FAMILY_CONSTANTS[entry.family],
        c_string(entry.family),
        "AUTOTUNE_BACKEND_KERNEL",
        c_string(entry.kernel_file),
        c_string(entry.kernel_name),
        c_string(entry.arg_types),
        _int(int(entry.swap_inputs)),
        _braces(entry.cluster),
        _int(int(entry.programmatic)),
        _int(int(maps is not None)),
        _braces(boxes[0]),
        _braces(boxes[1]),
        "{"
        + ", ".join(
            [
                _braces(launch.grid),
                _braces(launch.block),
                _int(launch.shared_bytes),
                _int(launch.workspace_floats),
                _int(launch.counters),
            ]
        )
        + "}",
        _double(entry.time_us),
        _braces(entry.config.get(name, 0) for name in CONFIG_FIELDS),
    ]
    return "  {" + ", ".join(fields) + "}"


def render(bundle: Bundle) -> str:
    """The header's text for `bundle` (at least one entry: C has no empty array initializer)."""
    if not bundle.entries:
        raise AutotuneError("a bundle needs at least one entry")
    table = "static const autotune_entry autotune_entries[] = {\n" + ",\n".join(map(_entry, bundle.entries)) + "\n};"
    text = TEMPLATE.read_text()
    for marker, filled in (
        ("/* @CONSTANTS@ */", _constants(bundle)),
        ("/* @CONFIG_FIELDS@ */", _config_fields()),
        ("/* @ENTRIES@ */", table),
    ):
        if text.count(marker) != 1:
            raise AutotuneError(f"{TEMPLATE} must hold {marker} once")
        text = text.replace(marker, filled)
    return text
