"""Kernels shipped precompiled in db/kernels/, and where the launch path finds a kernel's machine code.

scripts/build_shipped_kernels.py compiles every config the shipped records can select (the set is
autotune/runtime/shipset.py's) and writes one xz-compressed file per kernel instance (a cubin for the
sm_90a-only family, else a fatbin with sm_80, sm_89 and sm_90 code where the instance compiles there,
plus compute_90 PTX) and index.json, which maps job keys to files. A job key (compiler.job_key)
hashes what nvcc is given, not which nvcc this machine has: a kernel is found without nvcc, without
PyCUDA and without the database. Its first use unpacks it into the kernel cache
(~/.cache/autotune/shipped/), where `autotune warmup` puts it ahead of time.

find_kernel() is the launch path's order: shipped, else the kernel cache, else nvcc.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import lzma
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.build.compiler import CompileJob, cache_key, compile_kernel, failure_reason, job_key
from autotune.core import paths
from autotune.core.errors import AutotuneError

log = logging.getLogger(__name__)

FOLDER = "kernels"  # under db/
INDEX = "index.json"  # what the launch path reads: job key -> file
MANIFEST = "manifest.json"  # what each file holds and which problems select it (tests, people)
FORMAT = 1
SASS_ARCHS = ("sm_80", "sm_89", "sm_90")  # the machine code a fatbin holds, where its instance compiles
PTX_ARCH = "compute_90"  # and the PTX, which the driver compiles for newer GPUs
SUFFIX = ".xz"
NVCC_HINT = "install the CUDA toolkit and put its bin/ on PATH"


@dataclass(frozen=True)
class Kernel:
    """A kernel's machine code (a cubin or a fatbin image) and where it came from."""

    image: bytes
    key: str  # the key it is loaded under: one image, one module per GPU
    origin: str  # "shipped", "cached" or "compiled"


@dataclass(frozen=True)
class Index:
    folder: Path
    keys: dict[str, str]  # job key -> file stem
    files: dict[str, dict[str, Any]]  # file stem -> {"kind": "cubin" | "fatbin", "sha256": ...}


def folder() -> Path | None:
    """db/kernels/ of this installation (a checkout or the wheel's autotune/_data/), None without one."""
    try:
        found = paths.db_dir() / FOLDER
    except FileNotFoundError:
        return None
    return found if found.is_dir() else None


def index() -> Index | None:
    """The shipped kernels' index, read once per process (None where none ship)."""
    where = folder()
    return _read_index(where) if where is not None else None


@functools.cache
def _read_index(where: Path) -> Index | None:
    try:
        data = json.loads((where / INDEX).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        log.warning("the shipped kernels' index %s cannot be read (%s): kernels are compiled instead", where, exc)
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        log.warning("the shipped kernels' index %s has format %r, not %d: ignored", where, found, FORMAT)
        return None
    keys, files = data.get("keys"), data.get("files")
    if not isinstance(keys, dict) or not isinstance(files, dict):
        log.warning("the shipped kernels' index %s lacks its keys or files: kernels are compiled instead", where)
        return None
    good_keys = {key: stem for key, stem in keys.items() if _is_stem(stem)}
    good_files = {stem: entry for stem, entry in files.items() if _entry_fault(stem, entry) is None}
    if len(good_keys) < len(keys) or len(good_files) < len(files):
        bad = next(((stem, entry) for stem, entry in files.items() if stem not in good_files), None)
        why = _entry_fault(*bad) if bad is not None else "a key maps to no file name"
        _warn_damaged(where, f"{len(keys) - len(good_keys) + len(files) - len(good_files)} entries dropped ({why})")
    return Index(where, good_keys, good_files)


# What an index entry must hold: a file stem that names a file inside db/kernels/ (no separator, no
# dot: it is joined into a path), the image's kind and the SHA-256 it is checked against.
_STEM = re.compile(r"[0-9A-Za-z_-]{1,128}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
KINDS = ("cubin", "fatbin")


def _is_stem(stem: object) -> bool:
    return isinstance(stem, str) and _STEM.fullmatch(stem) is not None


def _entry_fault(stem: object, entry: object) -> str | None:
    """What is wrong with the index's entry of file `stem`, None where it is usable."""
    if not _is_stem(stem):
        return f"file name {str(stem)[:80]!r}"
    if not isinstance(entry, dict) or set(entry) != {"kind", "sha256"}:
        return f"{stem} needs exactly a kind and a sha256"
    if entry["kind"] not in KINDS:
        return f"{stem} has kind {str(entry['kind'])[:80]!r}"
    if not isinstance(entry["sha256"], str) or _SHA256.fullmatch(entry["sha256"]) is None:
        return f"{stem} has no SHA-256 of 64 hex digits"
    return None


@functools.cache
def _warn_damaged(where: Path, why: str) -> None:
    """One warning per index and kind of damage: the launch path meets it on every lookup."""
    log.warning("the shipped kernels' index %s is damaged (%s): those kernels are compiled instead", where, why)


@functools.cache
def _index_text(where: Path) -> bytes | None:
    """The index's bytes, read once per process, where it has this format. A first call looks up its
    one kernel by searching them: parsing all 300 KB took 0.7 ms of a first call's 4-6 ms, and
    decoding them as text, 0.1 ms more."""
    try:
        data = (where / INDEX).read_bytes()
    except OSError:
        return None
    return data if f'"format": {FORMAT},'.encode() in data else None


def _searchable() -> tuple[Path, bytes] | None:
    """(db/kernels/, its index's bytes) where both are there and of this format; else None, and the
    parsed index() answers (or says why there is none)."""
    where = folder()
    data = _index_text(where) if where is not None else None
    return (where, data) if where is not None and data is not None else None


def _stem_of(key: str) -> str | None:
    """The file stem the index maps job `key` to ("<key>": "<stem>" in its keys: job keys are
    64-digit hex strings, found nowhere else), None where it maps none."""
    searchable = _searchable()
    if searchable is None:
        found = index()
        return found.keys.get(key) if found is not None else None
    where, data = searchable
    marker = f'"{key}": "'.encode()
    at = data.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    end = data.find(b'"', start)
    stem = data[start:end].decode("ascii", "replace") if end >= 0 else None
    if not _is_stem(stem):
        _warn_damaged(where, f"key {key} maps to no file name")
        return None
    return stem


def _file_entry(stem: str) -> tuple[Path, dict[str, Any]] | None:
    """(db/kernels/, the index's entry of file `stem`: {"kind", "sha256"}), None where none ships
    or its entry is damaged (warned once; the kernel is then compiled)."""
    searchable = _searchable()
    if searchable is None:
        found = index()
        return (found.folder, found.files[stem]) if found is not None and stem in found.files else None
    where, data = searchable
    marker = f'"{stem}": '.encode()  # a file name followed by a colon: only the files map has those
    at = data.find(marker)
    if at < 0:
        return None
    start = at + len(marker)
    end = data.find(b"}", start) if data.startswith(b"{", start) else -1
    entry: Any = None  # no object there, or one cut short: damaged, as below
    with contextlib.suppress(ValueError):
        entry = json.loads(data[start : end + 1]) if end >= 0 else None
    fault = _entry_fault(stem, entry)
    if fault is not None:
        _warn_damaged(where, fault)
        return None
    return where, entry


def _arch_number(arch: str) -> int | None:
    """90 of "sm_90" or "compute_90" (string methods: a regular expression compiles at its first use)."""
    kind, _, number = arch.partition("_")
    return int(number) if kind in ("sm", "compute") and number.isascii() and number.isdigit() else None


def lookup(job: CompileJob) -> str | None:
    """The stem of the shipped file that runs `job`: its own machine code, else (on a GPU newer than
    the PTX's, for an instance not tied to one architecture) the PTX the driver compiles."""
    stem = _stem_of(job_key(job))
    if stem is not None:
        return stem if _file_entry(stem) is not None else None
    number, ptx = _arch_number(job.arch), _arch_number(PTX_ARCH)
    if number is not None and ptx is not None and number > ptx:
        stem = _stem_of(job_key(replace(job, arch=PTX_ARCH)))
        return stem if stem is not None and _file_entry(stem) is not None else None
    return None


def unpacked_dir() -> Path:
    return paths.cache_home() / "shipped"


def image(stem: str) -> bytes:
    """A shipped file's bytes: its unpacked copy in the kernel cache where it is whole, else
    decompressed from db/kernels/ (and the copy written for the next process, where it can be)."""
    found = _file_entry(stem)
    if found is None:
        raise AutotuneError(f"no kernel {stem} ships with this installation")
    where, entry = found
    packed = where / f"{stem}.{entry['kind']}{SUFFIX}"
    copy = unpacked_dir() / f"{stem}.{entry['kind']}"
    try:
        data = copy.read_bytes()
        if hashlib.sha256(data).hexdigest() == entry["sha256"]:
            return data
    except OSError:
        pass
    try:
        data = lzma.decompress(packed.read_bytes())
    except (OSError, lzma.LZMAError) as exc:
        raise AutotuneError(f"the shipped kernel {packed} cannot be read: {exc}") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise AutotuneError(f"the shipped kernel {packed} is damaged: reinstall autotune-kernels")
    try:
        _write_atomically(copy, data)
    except OSError as exc:  # a read-only cache: every process decompresses it again
        log.debug("cannot keep the unpacked kernel at %s: %s", copy, exc)
    return data


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f"{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as staged:
            staged.write(data)
        os.replace(name, target)
    except OSError:
        Path(name).unlink(missing_ok=True)
        raise


def find_kernel(job: CompileJob) -> Kernel:
    """`job`'s machine code: shipped with autotune, else from the kernel cache, else built by nvcc
    into it. Without nvcc, a kernel that does not ship is a one-line AutotuneError."""
    stem = lookup(job)
    if stem is not None:
        return Kernel(image(stem), f"shipped:{stem}", "shipped")
    if shutil.which("nvcc") is None:
        raise AutotuneError(
            f"{job.name} for {job.arch} is not among the kernels shipped with autotune and compiling it needs "
            f"nvcc, which is not on PATH: {NVCC_HINT}"
        )
    compiled = compile_kernel(job)
    if compiled.cubin is None:
        raise AutotuneError(f"compiling {job.name} failed: {failure_reason(compiled.message)}")
    return Kernel(compiled.cubin.read_bytes(), cache_key(job), "cached" if compiled.cached else "compiled")
