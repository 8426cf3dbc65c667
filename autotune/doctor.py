"""`autotune doctor`: what this machine has for each thing autotune does, and what to do where
something is missing. No check creates a CUDA context or compiles; the database is opened as every
command opens it (created where it does not exist yet)."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from autotune.core.errors import PYCUDA_HINT, AutotuneError
from autotune.core.fingerprint import local_compute_capabilities, local_gpus, nvcc_version, package_version


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    found: str  # what is there, or what is missing
    fix: str = ""  # what to do about it, where it is missing


def _driver() -> Check:
    gpus = local_gpus()
    if not shutil.which("nvidia-smi"):
        return Check("NVIDIA driver", False, "nvidia-smi not found", "install the NVIDIA driver (a GPU machine)")
    if not gpus:
        return Check("NVIDIA driver", False, "nvidia-smi lists no GPU", "check the driver with `nvidia-smi`")
    capabilities = local_compute_capabilities()
    listed = ", ".join(f"{gpu.name} ({cc})" for gpu, cc in zip(gpus, capabilities or ("?",) * len(gpus), strict=False))
    return Check("NVIDIA driver", True, f"{gpus[0].driver}: {listed}")


def _nvcc() -> Check:
    path = shutil.which("nvcc")
    if path is None:
        return Check(
            "nvcc", False, "not on PATH", "install the CUDA toolkit and put its bin/ on PATH (tuning compiles)"
        )
    return Check("nvcc", True, f"{nvcc_version()} at {path}")


def _cuda_headers() -> Check:
    """cuda.h, which building PyCUDA needs: under CUDA_ROOT, CUDA_HOME or the toolkit of nvcc."""
    roots = [os.environ.get(name) for name in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parents[1]))
    for root in filter(None, roots):
        header = Path(root) / "include" / "cuda.h"
        if header.is_file():
            return Check("cuda.h", True, str(header))
    return Check(
        "cuda.h", False, "not found", "set CUDA_ROOT to the toolkit (its include/ holds cuda.h) before building PyCUDA"
    )


def _shipped() -> Check:
    """The kernels shipped precompiled (db/kernels/): what the launch path runs without nvcc."""
    from autotune.build import shipped

    found = shipped.index()
    if found is None:
        return Check("shipped kernels", False, "none in this installation", "every kernel is compiled: needs nvcc")
    try:
        kernels = json.loads((found.folder / shipped.MANIFEST).read_text())["kernels"].values()
        archs = sorted({arch for entry in kernels for arch in [*entry["sass"], entry["ptx"]] if arch})
    except (OSError, ValueError, KeyError, TypeError):
        archs = ["?"]
    return Check("shipped kernels", True, f"{len(found.files)} kernels ({', '.join(archs)}) in {found.folder}")


def _module(name: str, label: str, fix: str) -> Check:
    if importlib.util.find_spec(name) is None:
        return Check(label, False, "not installed", fix)
    return Check(label, True, package_version(name))


def _database(url: str | None) -> Check:
    from autotune.store import open_store

    try:
        with open_store(url, import_shipped=False) as store:
            names = store.gpu_names()
            return Check("database", True, f"{store.url}: {len(names)} GPUs ({', '.join(names) or 'none yet'})")
    except AutotuneError as exc:
        return Check("database", False, str(exc), "pass --db a file or URL that can be opened")


def checks(db: str | None = None) -> list[Check]:
    return [
        Check("Python", True, f"{platform.python_version()} ({platform.machine()})"),
        _driver(),
        _nvcc(),
        _cuda_headers(),
        _shipped(),
        _module("pycuda", "PyCUDA", f"tuning needs it: {PYCUDA_HINT} (README: Install)"),
        _module("torch", "torch", "optional: autotune.gemv()/gemm() on torch tensors, and `autotune bench`"),
        _module("cupy", "cupy", "optional: autotune.gemv()/gemm() on cupy arrays"),
        _database(db),
    ]


def abilities(found: list[Check]) -> list[tuple[str, bool]]:
    """What this machine can do, from the checks."""
    ok = {check.name: check.ok for check in found}
    gpu = ok["NVIDIA driver"]
    return [
        ("answer `autotune best` from the database", ok["database"]),
        ("tune (`autotune sweep`)", gpu and ok["nvcc"] and ok["PyCUDA"] and ok["database"]),
        (
            "launch autotune.gemv()/gemm() on torch or cupy arrays"
            + ("" if ok["nvcc"] else " (shipped kernels only: others need nvcc)"),
            gpu and (ok["nvcc"] or ok["shipped kernels"]) and (ok["torch"] or ok["cupy"]),
        ),
        ("compare with cuBLAS (`autotune bench`)", gpu and ok["nvcc"] and ok["PyCUDA"] and ok["torch"]),
    ]
