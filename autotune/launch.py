"""autotune.gemv() and autotune.gemm(): run the selected kernel on the caller's GPU arrays, in the caller's process.

Arrays come as PyCUDA GPUArrays, torch tensors, or anything with __cuda_array_interface__ (cupy,
numba). Kernels are compiled once per config (cubin cache on disk) and loaded once per process.
Launches go to the legacy default stream, which orders them with torch's and cupy's default streams;
GEMVs go with programmatic dependent launch on sm_90+ (autotune/pdl.py), which keeps that order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from autotune import ops
from autotune.compiler import compile_kernel
from autotune.errors import AutotuneError
from autotune.gpu import (
    DEFAULT_SHARED_LIMIT,
    Kernels,
    Scratch,
    context,
    device_info,
    opt_in_shared,
    programmatic_launch,
)
from autotune.ops import gemm
from autotune.problem import ITEMSIZE, Problem
from autotune.select import Choice
from autotune.space import Config, config_key

_TYPESTR = {"<f4": "float32", "<f2": "float16"}
_TORCH_DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


@dataclass(frozen=True)
class DeviceArray:
    obj: Any
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  # in elements; None means C-contiguous
    dtype: str
    kind: str  # "torch", "pycuda" or "cai"


def describe(obj: Any, name: str) -> DeviceArray:
    module = type(obj).__module__
    if module.startswith("torch"):  # torch's array interface cannot express bfloat16
        dtype = _TORCH_DTYPES.get(str(obj.dtype))
        if dtype is None or not obj.is_cuda:
            raise AutotuneError(f"{name} must be a CUDA tensor of float32, float16 or bfloat16, got {obj.dtype}")
        return DeviceArray(obj, obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dtype, "torch")
    if hasattr(obj, "gpudata") and hasattr(obj, "shape"):
        dtype = _TYPESTR.get(obj.dtype.str)
        if dtype is None:
            raise AutotuneError(f"{name} must hold float32 or float16, got {obj.dtype}")
        strides = tuple(s // obj.dtype.itemsize for s in obj.strides)
        return DeviceArray(obj, int(obj.gpudata), tuple(obj.shape), strides, dtype, "pycuda")
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        raise AutotuneError(
            f"{name} must be a GPU array (PyCUDA GPUArray, torch tensor or __cuda_array_interface__), "
            f"got {type(obj).__name__}"
        )
    dtype = _TYPESTR.get(interface["typestr"])
    if dtype is None:
        raise AutotuneError(f"{name} must hold float32 or float16, got typestr {interface['typestr']}")
    raw = interface.get("strides")
    element_strides = tuple(s // ITEMSIZE[dtype] for s in raw) if raw else None
    return DeviceArray(obj, int(interface["data"][0]), tuple(interface["shape"]), element_strides, dtype, "cai")


def _contiguous(array: DeviceArray) -> bool:
    if array.strides is None:
        return True
    expected, step = [], 1
    for extent in reversed(array.shape):
        expected.append(step)
        step *= extent
    pairs = zip(array.strides, reversed(expected), array.shape, strict=True)
    return all(s == e or extent == 1 for s, e, extent in pairs)


def _empty_like(a: DeviceArray, shape: tuple[int, ...]) -> Any:
    if a.kind == "torch":
        import torch

        return torch.empty(shape, dtype=a.obj.dtype, device=a.obj.device)
    if type(a.obj).__module__.startswith("cupy"):
        import cupy

        return cupy.empty(shape, dtype=a.obj.dtype)
    import numpy as np
    import pycuda.gpuarray as gpuarray

    return gpuarray.empty(shape, dtype=np.dtype(a.dtype))


class Launcher:
    """Per-process state: loaded kernels, device facts, and the split-K workspace."""

    def __init__(self) -> None:
        context()
        self.gpu = device_info()
        self._kernels = Kernels()
        self._scratch = Scratch()
        self._functions: dict[tuple[Problem, str], Any] = {}
        # Unaligned arrays: (op, config) with scalar loads per problem and config. Fitting takes tens
        # of microseconds of Python, more than a launch, so it is done once.
        self._scalar: dict[tuple[Problem, str], tuple[Any, Config]] = {}

    def _function(self, op: Any, problem: Problem, config: Config) -> Any:
        # Kernels do not depend on the shape: key by dtype and compiled parameters only (the kernel
        # name also names the family).
        key = (replace(problem, m=1, n=1, k=1), op.kernel_name(problem, config))
        if key not in self._functions:
            self._functions[key] = self._load(op, problem, config)
        return self._functions[key]

    def _load(self, op: Any, problem: Problem, config: Config) -> Any:
        job = ops.compile_job(problem, config, self.gpu.arch, op)
        compiled = compile_kernel(job)
        if compiled.cubin is None:
            raise AutotuneError(f"compiling {job.name} failed: {compiled.message.splitlines()[0]}")
        return self._kernels.function(
            compiled.cubin, job.name, op.ARG_TYPES, programmatic=programmatic_launch(op, self.gpu)
        )

    def gemv(self, choice: Choice, a: DeviceArray, x: DeviceArray, y: DeviceArray, alpha: float, beta: float) -> None:
        problem = choice.problem
        if problem.trans:  # a one-row GEMM: yᵀ = xᵀ A
            self._call(choice, (x.pointer, a.pointer, y.pointer), (1, problem.n, problem.m), alpha, beta)
        else:
            self._call(choice, (a.pointer, x.pointer, y.pointer), (problem.m, problem.n), alpha, beta)

    def gemm(self, choice: Choice, a: DeviceArray, b: DeviceArray, c: DeviceArray, alpha: float, beta: float) -> None:
        problem = choice.problem
        self._call(choice, (a.pointer, b.pointer, c.pointer), (problem.m, problem.n, problem.k), alpha, beta)

    def _call(
        self, choice: Choice, pointers: tuple[int, int, int], sizes: tuple[int, ...], alpha: float, beta: float
    ) -> None:
        problem, config = choice.problem, choice.config
        op: Any = ops.for_problem(problem)
        if any(pointer % 16 for pointer in pointers):
            key = (problem, config_key(config))
            if key not in self._scalar:
                self._scalar[key] = scalar_loads(problem, config)
            op, config = self._scalar[key]
        geom = op.launch(problem, config, self.gpu.sm_count)
        workspace, counters = self._scratch.for_launch(geom, problem.dtype, sizes, pointers[0], pointers[1])
        function = self._function(op, problem, config)
        if geom.shared_bytes > DEFAULT_SHARED_LIMIT:
            opt_in_shared(function, geom.shared_bytes)
        function.prepared_async_call(
            geom.grid,
            geom.block,
            None,
            *pointers,
            *sizes,
            alpha,
            beta,
            workspace,
            counters,
            shared_size=geom.shared_bytes,
        )


def scalar_loads(problem: Problem, config: Config) -> tuple[Any, Config]:
    """(op, config) that run `problem` with one element per load. Tuned configs may use 16-byte
    vector loads, which need aligned rows, and a sliced view may not give them; scalar loads always
    work. The config keeps its tiling where it can (Space.fit: a prefetch that needs 16-byte loads
    goes with them). A GEMM family without scalar loads (wgmma) hands over to its stand-in family."""
    op: Any = ops.for_problem(problem)
    if problem.op == "gemm":
        standin = gemm.unaligned_family(problem)
        if standin is not gemm.family(problem):
            op = gemm.FamilyOp(standin)
    space = op.space(problem)
    for candidate in (config, op.default_config(problem)):
        scalar = space.fit(candidate, {"vec": 1})
        if scalar is not None:
            return op, scalar
    raise AutotuneError(f"{problem}: no config with scalar loads fits; pass 16-byte aligned arrays")


def check_gemv_operands(
    a: DeviceArray, x: DeviceArray, out: DeviceArray | None, trans: bool = False
) -> tuple[int, int]:
    """(m, n) of A; x has n entries and y m (with `trans`, x has m and y n)."""
    if len(a.shape) != 2:
        raise AutotuneError(f"A must be a 2-D matrix, got shape {a.shape}")
    m, n = a.shape
    if not _contiguous(a):
        raise AutotuneError("A must be row-major and contiguous (copy it, e.g. A.contiguous())")
    x_len, y_len = (m, n) if trans else (n, m)
    what = f"A{'ᵀ' if trans else ''}x with A {m}x{n}"
    if x.shape not in ((x_len,), (x_len, 1)) or not _contiguous(x):
        raise AutotuneError(f"x must be a contiguous vector of length {x_len} ({what}), got shape {x.shape}")
    if x.dtype != a.dtype:
        raise AutotuneError(f"A and x must share a dtype, got {a.dtype} and {x.dtype}")
    if out is not None:
        if out.shape not in ((y_len,), (y_len, 1)) or not _contiguous(out):
            raise AutotuneError(f"out must be a contiguous vector of length {y_len} ({what}), got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
    if m == 0 or n == 0 or math.prod(a.shape) == 0:
        raise AutotuneError(f"A must not be empty, got shape {a.shape}")
    return m, n


def new_output(a: DeviceArray, *shape: int) -> tuple[Any, DeviceArray]:
    """A new array of A's kind and dtype for the result."""
    obj = _empty_like(a, shape)
    return obj, describe(obj, "out")


def check_gemm_operands(a: DeviceArray, b: DeviceArray, out: DeviceArray | None) -> tuple[int, int, int]:
    for name, array in (("A", a), ("B", b)):
        if len(array.shape) != 2 or 0 in array.shape:
            raise AutotuneError(f"{name} must be a non-empty 2-D matrix, got shape {array.shape}")
        if not _contiguous(array):
            raise AutotuneError(f"{name} must be row-major and contiguous (copy it, e.g. {name}.contiguous())")
    (m, k), (k_b, n) = a.shape, b.shape
    if k_b != k:
        raise AutotuneError(f"A is {m}x{k} and B is {k_b}x{n}: A's columns must equal B's rows")
    if b.dtype != a.dtype:
        raise AutotuneError(f"A and B must share a dtype, got {a.dtype} and {b.dtype}")
    if out is not None:
        if out.shape != (m, n) or not _contiguous(out):
            raise AutotuneError(f"out must be a contiguous {m}x{n} matrix, got shape {out.shape}")
        if out.dtype != a.dtype:
            raise AutotuneError(f"out must have A's dtype {a.dtype}, got {out.dtype}")
    return m, n, k
