"""`autotune doctor`: what this machine has for each thing autotune does, and what to do where
something is missing, among it every header and library that building PyCUDA (`pip install
'.[cuda]'`, minutes of compiling) needs, checked before that build. No check creates a CUDA context or
compiles (nvcc runs with --dryrun only, to say where its toolkit is); the database is opened as every
command opens it (created where it does not exist yet)."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
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


# What building PyCUDA (the `cuda` extra; read from PyCUDA 2026.1's setup.py and src/cpp/*.hpp) needs:
# g++ compiles src/cpp against cuda.h, cudaProfiler.h and curand.h (cuRAND is on by default; curand.h
# brings cuda_runtime.h and crt/host_config.h) and links -lcuda -lcurand. The build looks only in
# CUDA_ROOT/include and CUDA_ROOT/{lib,lib64}[/stubs], besides the compiler's own folders and CPATH /
# LIBRARY_PATH. CUDA_ROOT is the folder above the `nvcc` found on PATH, taken as written (a wrapper
# script or a symlink in /usr/local/bin gives /usr/local), or what ~/.aksetup-defaults.py or
# /etc/aksetup-defaults.py set; PyCUDA reads no CUDA_ROOT environment variable.


@dataclass(frozen=True)
class BuildFile:
    """A header or library the PyCUDA build needs, and what provides it."""

    name: str
    debian: str  # Debian's package (non-free)
    wheel: str  # NVIDIA's PyPI wheel that ships it; "" where none does


BUILD_HEADERS = (
    BuildFile("cuda.h", "nvidia-cuda-dev", "nvidia-cuda-runtime"),
    BuildFile("cudaProfiler.h", "nvidia-cuda-dev", "nvidia-cuda-profiler-api"),
    BuildFile("curand.h", "nvidia-cuda-dev", "nvidia-curand"),
    # curand.h includes cuda_runtime.h (nvidia-cuda-runtime's, as cuda.h), which includes this one.
    BuildFile("crt/host_config.h", "nvidia-cuda-dev", "nvidia-cuda-crt"),
)
BUILD_LIBRARIES = (
    BuildFile("libcuda.so", "libcuda1 (the driver)", ""),
    BuildFile("libcurand.so", "nvidia-cuda-dev", "nvidia-curand"),
)
_UNSEARCHED = "not where the build looks"
_AKSETUP_FILES = ("/etc/aksetup-defaults.py", "~/.aksetup-defaults.py")


@dataclass(frozen=True)
class BuildSearch:
    """Where the PyCUDA build looks, and where a toolkit sits that it does not look in."""

    include_dirs: list[Path]
    library_dirs: list[Path]
    other_include_dirs: list[Path]
    other_library_dirs: list[Path]


def _env_dirs(name: str) -> list[Path]:
    return [Path(part) for part in os.environ.get(name, "").split(os.pathsep) if part]


def _aksetup_settings() -> dict[str, object]:
    """The literal assignments of PyCUDA's config files (CUDA_ROOT = "...", CUDA_INC_DIR = [...])."""
    settings: dict[str, object] = {}
    for name in _AKSETUP_FILES:
        try:
            tree = ast.parse(Path(name).expanduser().read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    settings[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return settings


def _as_dirs(value: object) -> list[Path] | None:
    if isinstance(value, str):
        return [Path(value)]
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return [Path(item) for item in value]
    return None


def _nvcc_toolkit(nvcc: str) -> Path | None:
    """The toolkit nvcc really runs from: a wrapper script that execs it hides it from the path."""
    try:
        done = subprocess.run(
            [nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("#$ _HERE_="):  # nvcc's own folder, as nvcc itself reports it
            return Path(line.split("=", 1)[1].strip()).parent
    return None


def _toolkit_dirs(root: Path, kind: str) -> list[Path]:
    """A toolkit's include or library folders, the targets/<arch>/ layout included."""
    if kind == "include":
        return [root / "include", *sorted(root.glob("targets/*/include"))]
    libs = [root / "lib64", root / "lib", *sorted(root.glob("targets/*/lib"))]
    return [*libs, *(lib / "stubs" for lib in libs)]


def _site_dirs() -> list[str]:
    return [entry for entry in sys.path if entry]


def _wheel_dirs(kind: str) -> list[Path]:
    """NVIDIA's wheels in this Python: nvidia/cu13/{include,lib} (CUDA 13), nvidia/<name>/... (12)."""
    return sorted({path for entry in _site_dirs() for path in Path(entry).glob(f"nvidia/*/{kind}")})


def _compiler_include_dirs() -> list[Path]:
    return [Path("/usr/local/include"), Path("/usr/include")]


def _usual_toolkits() -> list[Path]:
    return [Path("/usr/local/cuda"), *sorted(Path("/usr/local").glob("cuda-*"))]


def _system_library_dirs() -> list[Path]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    names = (f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib64", "/usr/lib", "/lib", "/usr/local/lib")
    return [Path(name) for name in names]


def _pycuda_root(settings: dict[str, object], nvcc: str | None) -> Path | None:
    configured = settings.get("CUDA_ROOT")
    if isinstance(configured, str):
        return Path(configured)
    if nvcc:
        return Path(os.path.normpath(Path(nvcc).parent / ".."))  # as written: not through links
    return None


def _unsearched_roots(nvcc: str | None) -> list[Path]:
    """Toolkits the build may not look in: the one nvcc runs from, those the environment names (which
    PyCUDA ignores), the usual places."""
    roots = [Path(os.environ[name]) for name in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH") if os.environ.get(name)]
    real = _nvcc_toolkit(nvcc) if nvcc else None
    return [*roots, *([real] if real else []), *_usual_toolkits()]


def build_search() -> BuildSearch:
    """Where PyCUDA's build will look for headers and libraries, as its setup.py computes it, and
    where else a toolkit or NVIDIA's wheels hold them."""
    settings = _aksetup_settings()
    nvcc = shutil.which("nvcc")
    root = _pycuda_root(settings, nvcc)
    include = _as_dirs(settings.get("CUDA_INC_DIR")) or ([root / "include"] if root else [])
    libraries = [root / sub for sub in ("lib", "lib64", "lib/stubs", "lib64/stubs")] if root else []
    for key in ("CUDADRV_LIB_DIR", "CURAND_LIB_DIR"):
        libraries += _as_dirs(settings.get(key)) or []
    others = _unsearched_roots(nvcc)
    # Debian's libcuda1 puts libcuda.so in <multiarch>/nvidia/current.
    driver = [folder / "nvidia" / "current" for folder in _system_library_dirs()[:1]]
    return BuildSearch(
        include_dirs=[*include, *_env_dirs("CPATH"), *_env_dirs("CPLUS_INCLUDE_PATH"), *_compiler_include_dirs()],
        library_dirs=[*libraries, *_env_dirs("LIBRARY_PATH"), *_system_library_dirs()],
        other_include_dirs=[*(d for r in others for d in _toolkit_dirs(r, "include")), *_wheel_dirs("include")],
        other_library_dirs=[*(d for r in others for d in _toolkit_dirs(r, "lib")), *_wheel_dirs("lib"), *driver],
    )


def _providers(need: BuildFile) -> str:
    if need.name == "libcuda.so":
        return "the driver (Debian: libcuda1) or the CUDA toolkit's lib64/stubs/libcuda.so"
    return f"Debian: apt install {need.debian}, or pip install {need.wheel}"


def _found(
    name: str, searched: Sequence[Path], others: Sequence[Path], variable: str, present: Callable[[Path], bool]
) -> Check | None:
    """The check of a file the build looks for in `searched`: found there, or found in one of
    `others` with the export of `variable` that makes the build see it; None where neither holds it."""
    for folder in searched:
        if present(folder / name):
            return Check(name, True, str(folder / name))
    for folder in others:
        if present(folder / name):
            return Check(name, False, str(folder / name), f"{_UNSEARCHED}: export {variable}={folder}")
    return None


def _header_check(need: BuildFile, search: BuildSearch) -> Check:
    found = _found(need.name, search.include_dirs, search.other_include_dirs, "CPATH", Path.is_file)
    return found or Check(need.name, False, "missing", f"the PyCUDA build needs it: {_providers(need)}")


def _library_check(need: BuildFile, search: BuildSearch) -> Check:
    found = _found(need.name, search.library_dirs, search.other_library_dirs, "LIBRARY_PATH", Path.exists)
    if found is not None:
        return found
    # A runtime copy only (libcurand.so.10, as NVIDIA's wheel and Debian's libcurand10 ship it): the
    # linker's -lcurand needs the unversioned name.
    for folder in [*search.library_dirs, *search.other_library_dirs]:
        versioned = sorted(folder.glob(f"{need.name}.*"))
        if versioned:
            return Check(
                need.name,
                False,
                f"only {versioned[0]}",
                f"-l{need.name[3:-3]} needs {need.name}: ln -s {versioned[0]} DIR/{need.name}, export LIBRARY_PATH=DIR",
            )
    return Check(need.name, False, "missing", f"the PyCUDA build needs it: {_providers(need)}")


def _compiler_name() -> str:
    return str(sysconfig.get_config_var("CXX") or "g++").split()[0]


def _compiler() -> Check:
    compiler = _compiler_name()
    path = shutil.which(compiler)
    if path is None:
        return Check(compiler, False, "not on PATH", "the PyCUDA build needs it: Debian: apt install g++")
    return Check(compiler, True, path)


def _python_headers() -> Check:
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if header.is_file():
        return Check("Python.h", True, str(header))
    return Check("Python.h", False, "missing", "the PyCUDA build needs it: Debian: apt install python3-dev")


def pycuda_build() -> list[Check]:
    """What building PyCUDA needs, each file where the build will find it or what provides it; one
    line where PyCUDA is installed already."""
    if importlib.util.find_spec("pycuda") is not None:
        return [Check("PyCUDA build", True, "not needed: PyCUDA is installed")]
    return build_checks()


def build_checks() -> list[Check]:
    """Each tool, header and library the PyCUDA build needs: where the build finds it, or what to do."""
    search = build_search()
    return [
        _compiler(),
        _python_headers(),
        *(_header_check(need, search) for need in BUILD_HEADERS),
        *(_library_check(need, search) for need in BUILD_LIBRARIES),
    ]


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
        _shipped(),
        _module("pycuda", "PyCUDA", f"tuning needs it: {PYCUDA_HINT} (docs/install.md)"),
        *pycuda_build(),
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
        ("build PyCUDA (`pip install '.[cuda]'`)", all(ok[name] for name in ok if name in _build_check_names())),
    ]


def _build_check_names() -> set[str]:
    needs = [*BUILD_HEADERS, *BUILD_LIBRARIES]
    return {"PyCUDA build", "Python.h", _compiler_name(), *(need.name for need in needs)}
