"""Kernel source -> cubin through nvcc: a content-addressed cache with atomic writes, and a compile pool.

PyCUDA's own compiler (pycuda.compiler.compile) runs this same nvcc command, but it imports the CUDA
driver, which the orchestrator must not load (it never touches the GPU, and CI has no driver). So we
call nvcc directly with the flags PyCUDA uses and let the worker load the cubin with
pycuda.driver.module_from_buffer. Compiling many kernels at once is what makes tuning fast: nvcc is
an external process, so a thread pool keeps every core busy without pickling anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from autotune.fingerprint import nvcc_version
from autotune.paths import cache_home, kernels_dir

NVCC_OPTIONS = ("-O3", "-lineinfo")
COMPILE_TIMEOUT_S = 300


@dataclass(frozen=True)
class CompileJob:
    name: str  # the extern "C" kernel name inside the cubin
    source: str  # a translation unit that includes a file of kernels/
    arch: str  # "sm_90"
    depends_hash: str  # hash of the kernels/ files the source includes


@dataclass(frozen=True)
class CompileResult:
    job: CompileJob
    cubin: Path | None  # None when compiling failed
    message: str  # nvcc's command line and errors, when it failed
    seconds: float
    cached: bool

    @property
    def ok(self) -> bool:
        return self.cubin is not None


def cache_key(job: CompileJob) -> str:
    digest = hashlib.sha256()
    for part in (job.source, job.arch, job.depends_hash, " ".join(NVCC_OPTIONS), nvcc_version()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cubin_cache_dir() -> Path:
    return cache_home() / "cubins"


def nvcc_command(job: CompileJob, source_file: Path, output: Path, kernels: Path | None = None) -> list[str]:
    """nvcc's command line for `job`; `kernels` stands in for kernels/ as the include folder."""
    nvcc = shutil.which("nvcc") or "nvcc"
    return [
        nvcc,
        "--cubin",
        f"-arch={job.arch}",
        *NVCC_OPTIONS,
        "-I",
        str(kernels or kernels_dir()),
        "-o",
        str(output),
        str(source_file),
    ]


def compile_kernel(job: CompileJob, cache_dir: Path | None = None) -> CompileResult:
    """Compile one kernel, or return it from the cache. Never raises for a bad kernel."""
    start = time.perf_counter()
    folder = cache_dir or cubin_cache_dir()
    key = cache_key(job)
    target = folder / key[:2] / f"{key}.cubin"
    if target.is_file():
        return CompileResult(job, target, "", time.perf_counter() - start, cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autotune-nvcc-") as tmp:
        source_file = Path(tmp) / "kernel.cu"
        source_file.write_text(job.source)
        output = Path(tmp) / "kernel.cubin"
        command = nvcc_command(job, source_file, output)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _failure(job, command, str(exc), start)
        if done.returncode != 0 or not output.is_file():
            return _failure(job, command, done.stderr or done.stdout, start)
        # Atomic publish: a reader sees either no file or the whole cubin, even across processes. The
        # staging name is unique: threads of one process may compile the same kernel at once (configs
        # that differ only in launch parameters share a cubin).
        handle, staging_name = tempfile.mkstemp(prefix=f"{key}.", suffix=".tmp", dir=target.parent)
        os.close(handle)
        shutil.copyfile(output, staging_name)
        os.replace(staging_name, target)
    return CompileResult(job, target, "", time.perf_counter() - start, cached=False)


def _failure(job: CompileJob, command: list[str], errors: str, start: float) -> CompileResult:
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    message = " ".join(command) + "\n" + "\n".join(lines[-20:])
    return CompileResult(job, None, message, time.perf_counter() - start, cached=False)


class CompilePool:
    """Compiles ahead of the GPU on every core; results come back as futures."""

    def __init__(self, workers: int | None = None, cache_dir: Path | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._cache_dir = cache_dir
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="nvcc")

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        return self._executor.submit(compile_kernel, job, self._cache_dir)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compile_fixed(file_name: str, arch: str, what: str) -> Path:
    """A kernels/ file that is not tuned (it holds its own extern "C" kernels), compiled for `arch`;
    `what` names it in the error where it does not compile."""
    from autotune.errors import AutotuneError

    stem = Path(file_name).stem
    source = (kernels_dir() / file_name).read_text()
    result = compile_kernel(CompileJob(stem, source, arch, stem))
    if result.cubin is None:
        raise AutotuneError(f"cannot compile {what}: {result.message}")
    return result.cubin


def compile_support(arch: str) -> Path:
    """The support kernels (random fill, float64 references, comparison, spin) for `arch`."""
    return compile_fixed("support.cu", arch, "the support kernels")
