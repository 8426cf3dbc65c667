"""Build the kernels that ship precompiled (db/kernels/): the release step after a change to the
kernels, the ops or the shipped records (tests/test_shipped.py fails until it is run: for the
records, under `pytest -m slow`).

Every config the shipped records can select (autotune/runtime/shipset.py) is compiled once per kernel
instance: sm_90a-only instances (the wgmma family) into a cubin, every other instance into a fatbin
with sm_80, sm_89 and sm_90 code and compute_90 PTX (the driver compiles the PTX for newer GPUs).
Where an instance does not compile for an architecture (kernels that use thread-block clusters need
sm_90), the fatbin leaves that code out and manifest.json says so. Each file is written
xz-compressed as db/kernels/<stem>.<cubin|fatbin>.xz; index.json maps the job key of every
architecture a file serves (autotune/build/compiler.py: job_key) to it, and manifest.json says what
each file holds and one use that selects it.

    python scripts/build_shipped_kernels.py           # bring db/kernels/ up to date (nvcc on PATH)
    python scripts/build_shipped_kernels.py --check   # only say whether db/kernels/ is current

An instance db/kernels/ already holds (the same file name: the same kernel name, translation unit and
included files) keeps its file; `--rebuild` compiles every instance again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's autotune, whatever else is installed

from autotune.build import shipped  # noqa: E402
from autotune.build.compiler import INCLUDE_FOLDERS, NVCC_OPTIONS, CompileJob, job_key  # noqa: E402
from autotune.core.fingerprint import nvcc_version  # noqa: E402
from autotune.runtime import shipset  # noqa: E402
from autotune.store import open_store  # noqa: E402

OUT = REPO / "db" / shipped.FOLDER
XZ_PRESET = 9 | lzma.PRESET_EXTREME


@dataclass
class Instance:
    """One kernel instance (name, translation unit, included files) and the uses that select it."""

    job: CompileJob  # with the arch of its first use
    uses: dict[str, shipset.Use] = field(default_factory=dict)  # by the arch asked for

    @property
    def only_arch(self) -> bool:
        """An architecture-specific instance (sm_90a): a cubin for that one architecture."""
        return self.job.arch.endswith("a")

    @property
    def stem(self) -> str:
        """The file's name: the job key of its PTX (of its one architecture for sm_90a), shortened."""
        return job_key(self.job if self.only_arch else replace(self.job, arch=shipped.PTX_ARCH))[:32]


@dataclass
class Built:
    instance: Instance
    kind: str  # cubin or fatbin
    image: bytes
    sass: list[str]
    ptx: str | None
    not_built: dict[str, str]  # arch -> nvcc's first error line
    seconds: float


def instances(uses: list[shipset.Use]) -> list[Instance]:
    found: dict[tuple[str, str, str, bool], Instance] = {}
    for use in uses:
        job = use.job()
        key = (job.name, job.source, job.depends_hash, job.arch.endswith("a"))
        instance = found.setdefault(key, Instance(job))
        instance.uses.setdefault(job.arch, use)
    return list(found.values())


def _nvcc(job: CompileJob, targets: list[str], output_flag: str, scratch: Path) -> tuple[bytes | None, str]:
    """nvcc with the launcher's own options, for `targets` (-arch or -gencode arguments); the first
    error line, without folders, where it fails."""
    kernels = REPO / "kernels"
    source = scratch / "kernel.cu"
    source.write_text(job.source)
    output = scratch / "kernel.out"
    includes = [arg for folder in INCLUDE_FOLDERS for arg in ("-I", folder)]
    command = [shutil.which("nvcc") or "nvcc", output_flag, *targets, *NVCC_OPTIONS, *includes]
    command += ["-o", str(output), str(source)]
    done = subprocess.run(command, cwd=kernels, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if "error" in line]
        return None, _FOLDERS.sub("", (lines or [f"exit {done.returncode}"])[0])
    return output.read_bytes(), ""


# Absolute folders and nvcc's temporary file prefixes in an error line.
_FOLDERS = re.compile(r"(?<!\S)(?:/[^\s/]+)*/(?:tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_)?(?=[^\s/]+)")


def build(instance: Instance) -> Built:
    start = time.perf_counter()
    job = instance.job
    # One fixed folder per instance: -lineinfo writes the source's path into the code, so a rebuild of
    # the same checkout gives the same bytes (and rewrites no file that did not change).
    scratch = Path(tempfile.gettempdir()) / "autotune-ship" / instance.stem
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        if instance.only_arch:
            image, error = _nvcc(job, [f"-arch={job.arch}"], "--cubin", scratch)
            if image is None:
                raise SystemExit(f"{job.name} ({job.arch}) does not compile: {error}")
            return Built(instance, "cubin", image, [job.arch], None, {}, time.perf_counter() - start)
        archs = list(shipped.SASS_ARCHS)
        not_built: dict[str, str] = {}
        while archs:
            targets = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
            targets.append(f"-gencode=arch={shipped.PTX_ARCH},code={shipped.PTX_ARCH}")
            image, error = _nvcc(job, targets, "--fatbin", scratch)
            if image is not None:
                return Built(instance, "fatbin", image, archs, shipped.PTX_ARCH, not_built, time.perf_counter() - start)
            not_built[archs.pop(0)] = error  # the oldest architecture lacks what the kernel uses
        raise SystemExit(f"{job.name} compiles for none of {', '.join(shipped.SASS_ARCHS)}: {error}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def already_built(instance: Instance, manifest: dict[str, dict[str, object]]) -> Built | None:
    """The instance as db/kernels/ holds it already, where it does: its file is named by its job (name,
    translation unit, included files' hash), so the same file name is the same kernel. nvcc writes a
    few bytes that differ from run to run, so rebuilding it would rewrite a file for nothing."""
    entry = manifest.get(instance.stem)
    if entry is None or entry.get("name") != instance.job.name or entry.get("source_hash") != instance.job.depends_hash:
        return None
    kind = str(entry["kind"])
    target = OUT / f"{instance.stem}.{kind}{shipped.SUFFIX}"
    try:
        image = lzma.decompress(target.read_bytes())
    except (OSError, lzma.LZMAError):
        return None
    if hashlib.sha256(image).hexdigest() != entry.get("sha256"):
        return None
    sass, ptx, not_built = entry["sass"], entry["ptx"], entry["not_built"]
    assert isinstance(sass, list) and isinstance(not_built, dict) and (ptx is None or isinstance(ptx, str))
    return Built(instance, kind, image, [str(a) for a in sass], ptx, dict(not_built), 0.0)


def keys_of(built: Built) -> list[str]:
    job = built.instance.job
    archs = [*built.sass, *([built.ptx] if built.ptx else [])]
    return [job_key(replace(job, arch=arch)) for arch in archs]


def unshipped(todo: list[Instance]) -> list[str]:
    """The kernels of `todo` that db/kernels/ neither holds nor records as not building for their GPU."""
    try:
        keys = json.loads((OUT / shipped.INDEX).read_text())["keys"]
        kernels = json.loads((OUT / shipped.MANIFEST).read_text())["kernels"]
    except (OSError, ValueError, KeyError):
        return [f"{OUT.relative_to(REPO)} itself"]
    missing = []
    for instance in todo:
        fat = kernels.get(keys.get(job_key(replace(instance.job, arch=shipped.PTX_ARCH))), {})
        for arch in instance.uses:
            if job_key(replace(instance.job, arch=arch)) not in keys and arch not in fat.get("not_built", {}):
                missing.append(f"{instance.job.name} for {arch}")
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only say whether db/kernels/ is current")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes at once")
    parser.add_argument("--rebuild", action="store_true", help="compile every instance, also those already built")
    args = parser.parse_args()
    started = time.perf_counter()
    with open_store("sqlite://", import_shipped=False) as store:
        store.import_shipped(REPO / "db" / "records")
        uses = shipset.uses(store)
    todo = instances(uses)
    print(f"{len(uses)} uses select {len(todo)} kernel instances", file=sys.stderr)
    if args.check:
        missing = unshipped(todo)
        example = f", {missing[0]} among them" if missing else ""
        print(f"{len(missing)} kernels are not in {OUT.relative_to(REPO)}{example}", file=sys.stderr)
        sys.exit(1 if missing else 0)
    if shutil.which("nvcc") is None:
        raise SystemExit("nvcc is not on PATH: the shipped kernels are built with the CUDA toolkit")
    try:
        manifest = {} if args.rebuild else json.loads((OUT / shipped.MANIFEST).read_text())["kernels"]
    except (OSError, ValueError, KeyError):
        manifest = {}
    results = [found for instance in todo if (found := already_built(instance, manifest)) is not None]
    kept = {built.instance.stem for built in results}
    todo = [instance for instance in todo if instance.stem not in kept]
    print(f"{len(kept)} already built, {len(todo)} to compile", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done, result in enumerate(pool.map(build, todo), 1):
            results.append(result)
            if done % 20 == 0 or done == len(todo):
                print(f"  {done}/{len(todo)} built ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    write(results)
    total = sum(path.stat().st_size for path in OUT.iterdir())
    print(f"{len(results)} files, {total / 2**20:.2f} MiB in {OUT.relative_to(REPO)}", file=sys.stderr)


def write(results: list[Built]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    keys: dict[str, str] = {}
    files: dict[str, dict[str, str]] = {}
    manifest: dict[str, dict[str, object]] = {}
    for built in sorted(results, key=lambda b: b.instance.stem):
        instance, stem = built.instance, built.instance.stem
        for key in keys_of(built):
            keys[key] = stem
        digest = hashlib.sha256(built.image).hexdigest()
        files[stem] = {"kind": built.kind, "sha256": digest}
        target = OUT / f"{stem}.{built.kind}{shipped.SUFFIX}"
        packed = lzma.compress(built.image, preset=XZ_PRESET)
        if not target.is_file() or lzma.decompress(target.read_bytes()) != built.image:
            target.write_bytes(packed)
        use = next(iter(instance.uses.values()))
        manifest[stem] = {
            "name": instance.job.name,
            "kind": built.kind,
            "sass": built.sass,
            "ptx": built.ptx,
            "not_built": built.not_built,
            "source_hash": instance.job.depends_hash,
            "bytes": len(built.image),
            "sha256": digest,
            "asked_for": sorted(instance.uses),
            "use": use.to_dict(),
        }
    for stale in OUT.iterdir():
        if stale.name.endswith(shipped.SUFFIX) and stale.name.split(".")[0] not in files:
            stale.unlink()
    index = {"format": shipped.FORMAT, "nvcc": nvcc_version(), "options": " ".join(NVCC_OPTIONS)}
    (OUT / shipped.INDEX).write_text(json.dumps({**index, "files": files, "keys": keys}, sort_keys=True) + "\n")
    (OUT / shipped.MANIFEST).write_text(json.dumps({**index, "kernels": manifest}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
