"""Kernel source -> cubin through nvcc: a content-addressed cache with atomic writes, and a compile pool.

PyCUDA's own compiler (pycuda.compiler.compile) runs this same nvcc command, but it imports the CUDA
driver, which the orchestrator must not load (it never touches the GPU, and CI has no driver). So we
call nvcc directly with the flags PyCUDA uses; the worker loads each cubin as the launch path does
(autotune/gpu/device.py). Compiling many kernels at once is what makes tuning fast: nvcc is
an external process, so a thread pool keeps every core busy without pickling anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from autotune.build.procgroup import GROUPS
from autotune.core.fingerprint import nvcc_version

# The compiler's input, defined below the op registry that makes jobs; its users import it from here.
from autotune.core.jobs import CompileJob as CompileJob
from autotune.core.paths import cache_home, kernels_dir

NVCC_OPTIONS = ("-O3", "-lineinfo")
COMPILE_TIMEOUT_S = 300

log = logging.getLogger(__name__)


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
    """The kernel cache's key: what nvcc is given, and nvcc's own version."""
    return _digest(job.source, job.arch, job.depends_hash, " ".join(NVCC_OPTIONS), nvcc_version())


def job_key(job: CompileJob) -> str:
    """The key of the kernels shipped precompiled (autotune/build/shipped.py): what nvcc is given
    (the extern "C" name, the translation unit, -arch, the hash of the kernels/ files it includes,
    the options), without the version of whatever nvcc this machine has."""
    return _digest(job.name, job.source, job.arch, job.depends_hash, " ".join(NVCC_OPTIONS))


def _digest(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cubin_cache_dir() -> Path:
    return cache_home() / "cubins"


# Include folders under kernels/: its root (instances include "<op>/<file>.cu") and the shared headers.
INCLUDE_FOLDERS = (".", "common")


def nvcc_command(job: CompileJob, source_file: Path, output: Path, kernels: Path | None = None) -> list[str]:
    """nvcc's command line for `job`; `kernels` stands in for kernels/ as the include root."""
    nvcc = shutil.which("nvcc") or "nvcc"
    root = kernels or kernels_dir()
    includes = [arg for folder in INCLUDE_FOLDERS for arg in ("-I", str(root / folder))]
    return [
        nvcc,
        "--cubin",
        f"-arch={job.arch}",
        *NVCC_OPTIONS,
        *includes,
        "-o",
        str(output),
        str(source_file),
    ]


def cubin_is_sound(path: Path) -> bool:
    """Whether `path` is a regular file (not a link) holding a whole CUDA ELF: its header, and its
    section and program header tables and every section's bytes inside the file. A truncated copy
    (nvcc puts the program headers last) or garbage fails; the cache then rebuilds it."""
    read = _read_regular(path)
    return read is not None and _elf_is_whole(read[0])


def _read_regular(path: Path, limit: int = -1) -> tuple[bytes, os.stat_result] | None:
    """The bytes (at most `limit`) and the status of `path` where it is a regular file, not a link."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit), status
    except OSError:
        return None
    finally:
        os.close(fd)


# The cache keeps each cubin's SHA-256 beside it (<key>.cubin.sha256), written when it is published:
# the ELF check sees a cut or a garbage file, the digest any byte changed inside a section. A cubin
# whose digest is missing (a cache of an older autotune) or differs is rebuilt.
DIGEST_SUFFIX = ".sha256"
# Cubins of this process already checked, by path, with the file status they were checked at: the
# launch path pays for one hash per file and process, however often it asks.
_CHECKED: dict[str, tuple[int, int, int, int, int]] = {}


def digest_path(cubin: Path) -> Path:
    return cubin.with_name(cubin.name + DIGEST_SUFFIX)


def _identity(status: os.stat_result) -> tuple[int, int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def cached_cubin_is_whole(cubin: Path) -> bool:
    """Whether the cache's `cubin` is sound and its bytes are the ones published (its digest file
    agrees). Checked once per process while the file stays the same one, unchanged."""
    try:
        if _CHECKED.get(str(cubin)) == _identity(os.lstat(cubin)):
            return True
    except OSError:
        return False
    read = _read_regular(cubin)
    if read is None:
        return False
    data, status = read
    recorded = _read_regular(digest_path(cubin), limit=128)
    whole = (
        recorded is not None
        and _elf_is_whole(data)
        and recorded[0].decode("ascii", "replace").strip() == hashlib.sha256(data).hexdigest()
    )
    if whole:
        _CHECKED[str(cubin)] = _identity(status)
    elif data:
        log.debug("the cached kernel %s does not match its recorded digest (or has none): rebuilt", cubin)
    return whole


def _elf_is_whole(data: bytes) -> bool:
    if len(data) < _ELF_HEADER.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return False  # not a 64-bit little-endian ELF file
    machine, phoff, shoff, phentsize, phnum, shentsize, shnum = _ELF_HEADER.unpack_from(data)
    if machine != _EM_CUDA or shnum == 0 or shentsize < _SECTION.size:
        return False
    if phoff + phnum * phentsize > len(data) or shoff + shnum * shentsize > len(data):
        return False
    for index in range(shnum):
        kind, offset, size = _SECTION.unpack_from(data, shoff + index * shentsize)
        if kind != _SHT_NOBITS and offset + size > len(data):
            return False
    return True


# e_machine at 18, e_phoff at 32, e_shoff at 40, then e_phentsize, e_phnum, e_shentsize, e_shnum.
_ELF_HEADER = struct.Struct("<18xH12xQQ6xHHHH2x")
_SECTION = struct.Struct("<4xI16xQQ")  # sh_type, then sh_offset and sh_size
_EM_CUDA = 190
_SHT_NOBITS = 8


def compile_kernel(job: CompileJob, cache_dir: Path | None = None, *, owner: object | None = None) -> CompileResult:
    """Compile one kernel, or return it from the cache. Never raises: a bad kernel, a missing nvcc
    or a cache that cannot be written comes back as a failed CompileResult with the reason. nvcc runs
    as `owner`'s (a pool's), which ends it on closing."""
    start = time.perf_counter()
    folder = cache_dir or cubin_cache_dir()
    key = cache_key(job)
    target = folder / key[:2] / f"{key}.cubin"
    if cached_cubin_is_whole(target):
        return CompileResult(job, target, "", time.perf_counter() - start, cached=True)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="autotune-nvcc-"))  # private (0700), random name
    except OSError as exc:
        return _failure(job, [], f"cannot prepare the kernel cache: {exc}", start)
    try:
        return _build(job, scratch, target, key, start, owner)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _build(job: CompileJob, scratch: Path, target: Path, key: str, start: float, owner: object | None) -> CompileResult:
    source_file = scratch / "kernel.cu"
    source_file.write_text(job.source)
    output = scratch / "kernel.cubin"
    command = nvcc_command(job, source_file, output)
    try:
        # nvcc and the cicc and ptxas it starts form a group of their own, ended with this process.
        done = GROUPS.run(command, COMPILE_TIMEOUT_S, scratch, owner)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _failure(job, command, str(exc), start)
    if done.returncode != 0 or not cubin_is_sound(output):
        return _failure(job, command, done.stderr or done.stdout or f"exit {done.returncode}", start)
    try:
        _publish(output.read_bytes(), target, key)
    except OSError as exc:
        return _failure(job, command, f"cannot store the compiled kernel at {target}: {exc}", start)
    return CompileResult(job, target, "", time.perf_counter() - start, cached=False)


def _stage(data: bytes, folder: Path, key: str) -> str:
    """The cubin's bytes in a new file of a unique, unpredictable name beside its target: mkstemp
    creates it (O_EXCL, so never through a link planted there) and the bytes go through that very
    descriptor. Threads of one process may stage the same kernel at once (configs that differ only
    in launch parameters share a cubin)."""
    handle, name = tempfile.mkstemp(prefix=f"{key}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as staged:
            staged.write(data)
    except OSError:
        os.unlink(name)
        raise
    return name


def _publish(data: bytes, target: Path, key: str) -> None:
    """Atomic publish: a reader sees either no file or the whole cubin, even across processes.
    Whatever else stands at the target (a folder, a link, a damaged cubin) is replaced. The digest
    goes first: a reader between the two renames sees a digest that does not match and rebuilds,
    never an unchecked cubin."""
    _replace(hashlib.sha256(data).hexdigest().encode() + b"\n", digest_path(target), key)
    _replace(data, target, key)


def _replace(data: bytes, target: Path, key: str) -> None:
    staged = _stage(data, target.parent, key)
    try:
        try:
            os.replace(staged, target)
        except IsADirectoryError:
            shutil.rmtree(target)  # a folder at a cubin's name in our own cache: debris, never ours to keep
            os.replace(staged, target)
    except OSError:
        os.unlink(staged)
        raise


def _failure(job: CompileJob, command: list[str], errors: str, start: float) -> CompileResult:
    """A failed compile: its message is the nvcc command (a line, empty where nvcc never ran), then the
    last 20 lines of what went wrong; failure_reason() picks the line a one-line error shows."""
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    message = " ".join(command) + "\n" + "\n".join(lines[-20:])
    return CompileResult(job, None, message, time.perf_counter() - start, cached=False)


def failure_reason(message: str) -> str:
    """The line of a failed compile's message (_failure) that says why: the first that names an error,
    else the first after the command (the command itself said nothing of what went wrong)."""
    reasons = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    named = [line for line in reasons if "error" in line.lower()]
    return (named or reasons or [message.strip() or "no reason given"])[0]


class CompilePool:
    """Compiles ahead of the GPU on every core; results come back as futures."""

    def __init__(self, workers: int | None = None, cache_dir: Path | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._cache_dir = cache_dir
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="nvcc")

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        return self._executor.submit(compile_kernel, job, self._cache_dir, owner=self)

    def wait_any(self, futures: Sequence[Future[CompileResult]]) -> None:
        """Until one of these compiles is done (a replay's pool moves its clock instead: scripts/search_replay.py)."""
        wait(futures, return_when=FIRST_COMPLETED)

    def close(self) -> None:
        """Queued jobs are dropped and running compiles ended: nothing outlives the sweep."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        GROUPS.kill_all(self)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compile_fixed(file_name: str, arch: str, what: str) -> Path:
    """A kernels/ file that is not tuned (it holds its own extern "C" kernels), compiled for `arch`;
    `what` names it in the error where it does not compile."""
    from autotune.core.errors import AutotuneError

    stem = Path(file_name).stem
    source = (kernels_dir() / file_name).read_text()
    result = compile_kernel(CompileJob(stem, source, arch, stem))
    if result.cubin is None:
        raise AutotuneError(f"cannot compile {what}: {result.message}")
    return result.cubin


def compile_support(arch: str) -> Path:
    """The support kernels (random fill, float64 references, comparison, spin) for `arch`."""
    return compile_fixed("measure/support.cu", arch, "the support kernels")
