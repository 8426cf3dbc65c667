"""Everything that can invalidate a measurement: the GPU, its driver and CUDA, nvcc, PyCUDA, kernel source."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.paths import kernels_dir

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as the worker reads it from the driver."""

    name: str
    uuid: str
    compute_capability: str  # "9.0"
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    driver: str  # NVIDIA driver version as nvidia-smi reports it, e.g. "580.159.04"
    cuda: str  # CUDA toolkit release that builds the kernels (nvcc), e.g. "13.0"

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def arch(self) -> str:
        """nvcc's target for this GPU: "9.0" -> "sm_90"."""
        return "sm_" + self.compute_capability.replace(".", "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Toolchain:
    """The software that built and ran a measurement."""

    nvcc: str
    pycuda: str
    autotune: str


def slugify(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (file names, `--gpu` matching)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


@functools.cache
def nvcc_version() -> str:
    """nvcc's full version ('13.0.88'), or 'none' where nvcc is not installed. Read from the toolkit's
    version.json beside nvcc's bin/ where it names nvcc (no process started: the launch path asks
    this at a first call), else from `nvcc --version`."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "none"
    listed = _listed_nvcc_version(Path(nvcc).resolve())
    if listed is not None:
        return listed
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1] if out.strip() else "unknown"


def _listed_nvcc_version(nvcc: Path) -> str | None:
    """The cuda_nvcc version a CUDA toolkit's version.json lists (CUDA 11.1 and newer), None without one."""
    try:
        listed = json.loads((nvcc.parent.parent / "version.json").read_text())["cuda_nvcc"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return listed if isinstance(listed, str) and dotted_number(listed, 3, 3) else None


def kernel_driver_version() -> str | None:
    """The NVIDIA driver's version ('580.159.04') as its kernel module reports it in /proc, where
    nvidia-smi reads it too; None where the file is not there (no driver, or not Linux)."""
    try:
        text = Path(DRIVER_VERSION_FILE).read_text()
    except OSError:
        return None
    # "... Kernel Module  580.159.04  ..." or "... Open Kernel Module for x86_64  580.159.04 ...":
    # read with string methods, as a regular expression's first use compiles it (0.5 ms of a first call).
    _, marker, rest = text.partition("Kernel Module")
    words = rest.split()
    if words[:1] == ["for"]:
        words = words[2:]
    return words[0] if marker and words and dotted_number(words[0], 2, 3) else None


def dotted_number(text: str, fewest: int, most: int) -> bool:
    """Whether `text` is `fewest` to `most` groups of ASCII digits joined by dots ('580.159.04')."""
    groups = text.split(".")
    return fewest <= len(groups) <= most and all(g.isascii() and g.isdigit() for g in groups)


DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
DISTRIBUTION = "autotune-kernels"  # the distribution's name (the import name is autotune)


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


@functools.cache
def toolchain() -> Toolchain:
    return Toolchain(nvcc=nvcc_version(), pycuda=package_version("pycuda"), autotune=package_version(DISTRIBUTION))


# `#include "name"` with nothing but whitespace before the `#` on its line. Found from the `#` on
# (a literal first character, which the regex engine skips to) and the line start checked after:
# anchoring at every line start (re.MULTILINE's `^\s*`) took 0.2 ms of a first call per 32 KB file.
_INCLUDE = re.compile(rb'#\s*include\s+"([^"]+)"')


def local_includes(text: bytes) -> list[bytes]:
    """The names a kernel file includes with quotes, in order."""
    found = []
    for match in _INCLUDE.finditer(text):
        line_start = text.rfind(b"\n", 0, match.start()) + 1
        if not text[line_start : match.start()].strip():
            found.append(match.group(1))
    return found


def kernel_path(name: str, directory: Path | None = None) -> Path:
    """A file of kernels/ by its path there ("gemv/gemv.cu") or, as a kernel's own includes name
    them, by its file name alone when exactly one folder of kernels/ holds it ("common.cuh"). An
    absolute path names a kernel file outside kernels/ (an op kept in one folder with its kernel)."""
    if Path(name).is_absolute() and Path(name).is_file():
        return Path(name)
    root = directory or kernels_dir()
    if (root / name).is_file():
        return root / name
    if "/" in name:  # a path inside one of the folders
        base = os.fspath(root)
        found = sorted(p for e in os.scandir(base) if os.path.isfile(p := os.path.join(base, e.name, name)))
    else:
        found = _files_by_name(os.fspath(root)).get(name, [])
    if len(found) != 1:
        raise FileNotFoundError(f"kernels/ holds {len(found)} files named {name!r}: expected one")
    return Path(found[0])


@functools.cache
def _files_by_name(root: str) -> dict[str, list[str]]:
    """The files in each folder of `root`, by file name: listed once per process, as file_hash
    reads each file once (resolving each include by a stat per folder took 0.1 ms of a first call)."""
    found: dict[str, list[str]] = {}
    for folder in sorted(entry.path for entry in os.scandir(root) if entry.is_dir()):
        for entry in os.scandir(folder):
            if entry.is_file():
                found.setdefault(entry.name, []).append(entry.path)
    return found


@functools.cache
def file_hash(name: str, directory: Path | None = None) -> str:
    """Hash of one file of kernels/ (its name included: the same text in another file is another
    kernel) and of the kernels/ files it includes with quotes, so an edit to a shared header stales
    every family that uses it. A file without such includes hashes as its name and text alone.
    `directory` stands in for kernels/ (another revision's, scripts/rehash_records.py)."""
    path = kernel_path(name, directory)
    text = path.read_bytes()
    digest = hashlib.sha256(path.name.encode() + b"\0" + text)
    for include in local_includes(text):
        digest.update(b"\0" + file_hash(include.decode(), directory).encode())
    return digest.hexdigest()[:16]


def cuda_release() -> str:
    """'13.0' from nvcc's '13.0.88'."""
    version = nvcc_version()
    return ".".join(version.split(".")[:2]) if version[:1].isdigit() else version


@dataclass(frozen=True)
class LocalGpu:
    """What nvidia-smi says of one GPU of this machine (no CUDA context needed)."""

    name: str
    uuid: str
    pci_bus_id: str
    driver: str


def local_gpus() -> list[LocalGpu]:
    """This machine's NVIDIA GPUs in device order, through nvidia-smi; [] where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = "--query-gpu=name,uuid,pci.bus_id,driver_version"
    try:
        out = subprocess.run([smi, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 4:
            gpus.append(LocalGpu(*fields))
    return gpus


@functools.cache
def local_compute_capabilities() -> tuple[str, ...]:
    """Compute capabilities ("9.0") of this machine's GPUs, through nvidia-smi (no CUDA context);
    () where there is no GPU or nvidia-smi cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip()))
