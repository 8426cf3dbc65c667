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
    return listed if isinstance(listed, str) and re.fullmatch(r"\d+\.\d+\.\d+", listed) else None


def kernel_driver_version() -> str | None:
    """The NVIDIA driver's version ('580.159.04') as its kernel module reports it in /proc, where
    nvidia-smi reads it too; None where the file is not there (no driver, or not Linux)."""
    try:
        text = Path(DRIVER_VERSION_FILE).read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


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


_LOCAL_INCLUDE = re.compile(rb'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def kernel_path(name: str, directory: Path | None = None) -> Path:
    """A file of kernels/ by its path there ("gemv/gemv.cu") or, as a kernel's own includes name
    them, by its file name alone when exactly one folder of kernels/ holds it ("common.cuh"). An
    absolute path names a kernel file outside kernels/ (an op kept in one folder with its kernel)."""
    if Path(name).is_absolute() and Path(name).is_file():
        return Path(name)
    root = directory or kernels_dir()
    if (root / name).is_file():
        return root / name
    # Each folder looked at directly: a first glob in a fresh process costs up to 4 ms, and this runs
    # on the launch path's first call.
    found = sorted(root / entry.name / name for entry in os.scandir(root) if (root / entry.name / name).is_file())
    if len(found) != 1:
        raise FileNotFoundError(f"kernels/ holds {len(found)} files named {name!r}: expected one")
    return found[0]


@functools.cache
def file_hash(name: str, directory: Path | None = None) -> str:
    """Hash of one file of kernels/ (its name included: the same text in another file is another
    kernel) and of the kernels/ files it includes with quotes, so an edit to a shared header stales
    every family that uses it. A file without such includes hashes as its name and text alone.
    `directory` stands in for kernels/ (another revision's, scripts/rehash_records.py)."""
    path = kernel_path(name, directory)
    text = path.read_bytes()
    digest = hashlib.sha256(path.name.encode() + b"\0" + text)
    for include in _LOCAL_INCLUDE.findall(text):
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
