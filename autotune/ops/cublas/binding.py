"""cuBLASLt through ctypes: find the library, ask its heuristic for a problem's algorithms, run one.

No torch and no cuda-bindings: the library is loaded from AUTOTUNE_CUBLASLT (a path), an already
loaded or system-wide libcublasLt, the CUDA toolkit (CUDA_HOME, CUDA_ROOT, /usr/local/cuda), or
NVIDIA's `nvidia-cublas` wheel in site-packages, in that order. A `LtCall` holds the descriptors of
one problem and layout (made once, as a launch plan does), the heuristic's answer and the chosen
algorithm; `run` is one cublasLtMatmul on the caller's stream with host-side alpha and beta.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from pathlib import Path
from typing import Any

from autotune.core.errors import AutotuneError
from autotune.ops.cublas.mapping import MAX_ALGOS, SOURCE_PREFIX, WORKSPACE_BYTES, Matmul, Matrix

# cublasLt.h and library_types.h enums (CUDA 12 and 13).
CUDA_DATA_TYPE = {"float32": 0, "float16": 2, "bfloat16": 14}  # cudaDataType_t
COMPUTE_32F = 68  # cublasComputeType_t: float32 accumulation, no TF32 (as torch's default and ours)
SCALE_32F = 0
DESC_TRANSA, DESC_TRANSB = 3, 4  # cublasLtMatmulDescAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1  # cublasLtMatmulPreferenceAttributes_t
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # ..._MIN_ALIGNMENT_{A,B,C,D}_BYTES
STATUS_NAMES = {
    1: "NOT_INITIALIZED",
    3: "ALLOC_FAILED",
    7: "INVALID_VALUE",
    8: "ARCH_MISMATCH",
    11: "MAPPING_ERROR",
    13: "EXECUTION_FAILED",
    14: "INTERNAL_ERROR",
    15: "NOT_SUPPORTED",
    16: "LICENSE_ERROR",
}
SONAMES = ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so")


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [
        ("algo", Algo),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


_P = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "cublasLtGetVersion": ([], ctypes.c_size_t),
    "cublasLtCreate": ([ctypes.POINTER(_P)], ctypes.c_int),
    "cublasLtMatmulDescCreate": ([ctypes.POINTER(_P), ctypes.c_int, ctypes.c_int], ctypes.c_int),
    "cublasLtMatmulDescSetAttribute": ([_P, ctypes.c_int, _P, ctypes.c_size_t], ctypes.c_int),
    "cublasLtMatrixLayoutCreate": (
        [ctypes.POINTER(_P), ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
        ctypes.c_int,
    ),
    "cublasLtMatmulPreferenceCreate": ([ctypes.POINTER(_P)], ctypes.c_int),
    "cublasLtMatmulPreferenceSetAttribute": ([_P, ctypes.c_int, _P, ctypes.c_size_t], ctypes.c_int),
    "cublasLtMatmulAlgoGetHeuristic": (
        [_P, _P, _P, _P, _P, _P, _P, ctypes.c_int, ctypes.POINTER(HeuristicResult), ctypes.POINTER(ctypes.c_int)],
        ctypes.c_int,
    ),
    "cublasLtMatmul": (
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, ctypes.POINTER(Algo), _P, ctypes.c_size_t, _P],
        ctypes.c_int,
    ),
}


def candidates() -> list[str]:
    """Where the library is looked for, in order (names for the dynamic loader, then paths)."""
    found: list[str] = []
    given = os.environ.get("AUTOTUNE_CUBLASLT")
    if given:
        return [given]
    found.extend(SONAMES)
    for variable in ("CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"):
        root = os.environ.get(variable)
        if root:
            found.extend(str(Path(root) / "lib64" / name) for name in SONAMES[:2])
    found.extend(f"/usr/local/cuda/lib64/{name}" for name in SONAMES[:2])
    for site in sys.path:  # NVIDIA's wheels: nvidia/cublas/lib (CUDA 12), nvidia/cu13/lib (CUDA 13)
        found.extend(sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcublasLt.so*"))))
    return found


@functools.cache
def lib() -> Any:
    """libcublasLt, loaded once; a clear error where it is nowhere to be found."""
    tried = []
    for name in candidates():
        try:
            library = ctypes.CDLL(name)
        except OSError:
            tried.append(name)
            continue
        for function, (argtypes, restype) in _SIGNATURES.items():
            entry = getattr(library, function)
            entry.argtypes, entry.restype = argtypes, restype
        return library
    raise AutotuneError(
        "cuBLASLt was not found (looked for libcublasLt.so.13/.12 system-wide, in the CUDA toolkit and in "
        "the nvidia-cublas wheel): pip install nvidia-cublas, or set AUTOTUNE_CUBLASLT to the library's path"
    )


@functools.cache
def available() -> bool:
    """Whether the library loads here (asked once a process: a miss of the selector asks too)."""
    try:
        lib()
    except AutotuneError:
        return False
    return True


@functools.cache
def version() -> int:
    """The library's version number (CUBLAS_VERSION: 130000 and up for CUDA 13)."""
    return int(lib().cublasLtGetVersion())


def fingerprint() -> str:
    """What a vendor trial's source hash is: the library's version (a new version may answer other
    algorithms, so older trials no longer replay and are left aside)."""
    return f"{SOURCE_PREFIX}{version()}"


def check(status: int, what: str) -> None:
    if status:
        raise AutotuneError(f"cuBLASLt {what} failed: CUBLAS_STATUS_{STATUS_NAMES.get(status, status)}")


def create_handle() -> int:
    """A cuBLASLt handle for the CUDA context current on this thread."""
    handle = _P()
    check(lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return int(handle.value or 0)


def _layout(dtype: str, matrix: Matrix) -> _P:
    layout = _P()
    status = lib().cublasLtMatrixLayoutCreate(
        ctypes.byref(layout), CUDA_DATA_TYPE[dtype], matrix.rows, matrix.cols, matrix.ld
    )
    check(status, "cublasLtMatrixLayoutCreate")
    return layout


def _set(setter: Any, target: _P, attribute: int, value: ctypes._SimpleCData[Any], what: str) -> None:
    check(setter(target, attribute, ctypes.byref(value), ctypes.sizeof(value)), what)


class LtCall:
    """One problem's cuBLASLt descriptors (made once; descriptors live as long as the process, as a
    launch plan's do), the heuristic's algorithms for them, and one chosen by rank."""

    def __init__(self, handle: int, call: Matmul, alignment: int, workspace_bytes: int = WORKSPACE_BYTES) -> None:
        library = lib()
        self.call = call
        self._handle = _P(handle)
        self._desc = _P()
        check(library.cublasLtMatmulDescCreate(ctypes.byref(self._desc), COMPUTE_32F, SCALE_32F), "MatmulDescCreate")
        for attribute, op in ((DESC_TRANSA, call.op_a), (DESC_TRANSB, call.op_b)):
            _set(library.cublasLtMatmulDescSetAttribute, self._desc, attribute, ctypes.c_int32(op), "MatmulDesc")
        self._a, self._b = _layout(call.dtype, call.a), _layout(call.dtype, call.b)
        self._d = _layout(call.dtype, call.d)
        preference = _P()
        check(library.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "MatmulPreferenceCreate")
        setter = library.cublasLtMatmulPreferenceSetAttribute
        _set(setter, preference, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(workspace_bytes), "MatmulPreference")
        for attribute in PREF_MIN_ALIGNMENT:
            _set(setter, preference, attribute, ctypes.c_uint32(alignment), "MatmulPreference")
        results = (HeuristicResult * MAX_ALGOS)()
        count = ctypes.c_int()
        status = library.cublasLtMatmulAlgoGetHeuristic(
            self._handle, self._desc, self._a, self._b, self._d, self._d, preference, MAX_ALGOS, results,
            ctypes.byref(count),
        )  # fmt: skip
        check(status, "cublasLtMatmulAlgoGetHeuristic")
        self.algos = [results[i] for i in range(count.value) if results[i].state == 0]
        self._alpha, self._beta = ctypes.c_float(), ctypes.c_float()
        self._alpha_ref, self._beta_ref = ctypes.byref(self._alpha), ctypes.byref(self._beta)
        self._matmul = library.cublasLtMatmul
        self._chosen: HeuristicResult | None = None

    def choose(self, rank: int) -> None:
        """Run the heuristic's algorithm of this rank from now on."""
        if not 0 <= rank < len(self.algos):
            raise AutotuneError(
                f"cuBLASLt offers {len(self.algos)} algorithms for this problem here, not rank {rank} "
                f"(another cuBLASLt version than the one that was tuned?)"
            )
        self._chosen = self.algos[rank]

    @property
    def workspace_bytes(self) -> int:
        return int(self._chosen.workspace_size) if self._chosen is not None else 0

    def run(self, pointers: tuple[int, int, int], alpha: float, beta: float, workspace: int, stream: int) -> None:
        """D = alpha op(A') op(B') + beta C on `stream`, the arrays at `pointers` in our kernels' order."""
        chosen = self._chosen
        if chosen is None:
            raise AutotuneError("cuBLASLt call run before an algorithm was chosen")
        call = self.call
        self._alpha.value, self._beta.value = alpha, beta
        d = pointers[call.d_arg]
        status = self._matmul(
            self._handle, self._desc, self._alpha_ref, pointers[call.a_arg], self._a, pointers[call.b_arg], self._b,
            self._beta_ref, d, self._d, d, self._d, ctypes.byref(chosen.algo), workspace or None,
            chosen.workspace_size, stream or None,
        )  # fmt: skip
        check(status, "cublasLtMatmul")
