"""`autotune export --format bundle`: a folder a C or C++ program deploys without Python, autotune,
nvcc or the database.

    DIR/autotune_bundle.h   entries, shape rules, launch geometry, kernel arguments, autotune_find()
    DIR/manifest.json       the same entries as data, the kernel files' hashes, what was left out
    DIR/kernels/NAME.fatbin (or .cubin) each entry's kernel: the shipped image where it ships,
                            else the kernel cache's or nvcc's cubin

One entry per problem the database holds for the GPU (optionally only some ops): its measured best
config, the kernel that runs it, and its launch. The header answers for other shapes too: the
nearest tuned problem whose config runs the shape as it is (`runs`: the family the GPU would pick
for that shape is the entry's, and the config is a point of that family's space there). The Python
selector can also fit a config onto a shape or fall back to a default; those need kernels a bundle
does not hold, so the header answers NULL where no entry runs. `runs` and `find` here are the
reference the header's C is tested against. docs/deploy.md describes the format.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import __version__, api, ops
from autotune.build import shipped
from autotune.build.compiler import CompileJob, cache_key
from autotune.core.errors import AutotuneError
from autotune.core.output import umask
from autotune.core.problem import BLAS_PREFIX, Problem
from autotune.core.space import Config
from autotune.core.target import targeting
from autotune.gpu.geometry import Launch
from autotune.store import selection_table as table

if TYPE_CHECKING:
    from autotune.store.store import Store

log = logging.getLogger(__name__)

FORMAT = 1
KIND = "autotune-bundle"
HEADER = "autotune_bundle.h"
MANIFEST = "manifest.json"
KERNELS = "kernels"
BUNDLE_OPS = ("gemv", "gemm")
ALIGNMENT = 16  # bytes: the launch path runs these configs only on arrays aligned so (launcher.run)
# What a bundle does not cover, for people reading the manifest (docs/deploy.md says more).
NOT_COVERED = (
    "arrays whose address is not a multiple of 16 bytes: the Python launch path runs a scalar-load "
    "stand-in for those, a bundle holds none",
    "shapes no entry's config runs: autotune_find returns NULL (the Python selector would fit a config "
    "or take the op's default, whose kernels a bundle does not hold)",
    "cuBLAS: every entry is our kernel, also where cuBLASLt was measured faster (the Python launch path "
    "runs it there); AUTOTUNE_BACKEND_CUBLAS is reserved for entries that name a cuBLASLt algorithm",
    "leading dimensions: an entry runs matrices whose rows are contiguous (lda = K, ldb, ldc = N)",
    "ops other than GEMV and GEMM (qgemm's int4 weights): their problems are left out; the Python launch "
    "path runs them",
)


@dataclass(frozen=True)
class BundleGpu:
    name: str
    compute_capability: str
    sm_count: int

    @property
    def arch(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")


@dataclass(frozen=True)
class Entry:
    """One tuned problem: its best config and how to launch the kernel that runs it."""

    index: int
    problem: Problem
    family: str  # gemv, skinny (also transposed GEMVs of 9-15 columns), skinny_tc, simt, mma, wgmma, narrow, tall
    config: Config
    kernel_name: str
    kernel_file: str  # relative to the bundle folder
    arg_types: str
    swap_inputs: bool  # the kernel takes (x, A, y): the transposed GEMV
    cluster: tuple[int, int, int]  # compiled into the kernel with __cluster_dims__
    programmatic: bool  # launched with programmatic dependent launch
    launch: Launch  # at the tuned problem
    time_us: float
    gbs: float | None
    source_hash: str


@dataclass
class Bundle:
    gpu: BundleGpu
    entries: list[Entry] = field(default_factory=list)
    kernels: dict[str, bytes] = field(default_factory=dict)  # file (relative) -> image
    skipped: list[dict[str, Any]] = field(default_factory=list)
    format: int = FORMAT
    alignment: int = ALIGNMENT


def kernel_family(problem: Problem, config: Config) -> str:
    """The family whose kernel runs `config` on `problem` (under the current target)."""
    if problem.op == "gemv" and not problem.trans:
        return "gemv"  # one template; Op.family names its tilings, not kernels
    return ops.for_problem(problem).family(problem, config)


def _problem_dict(problem: Problem) -> dict[str, Any]:
    return {
        "op": problem.op,
        "dtype": problem.dtype,
        "m": problem.m,
        "n": problem.n,
        "k": problem.k,
        "trans": problem.trans,
    }


def _launch_dict(launch: Launch) -> dict[str, Any]:
    maps = launch.operand_maps
    return {
        "grid": list(launch.grid),
        "block": list(launch.block),
        "shared_bytes": launch.shared_bytes,
        "workspace_floats": launch.workspace_floats,
        "counters": launch.counters,
        "operand_maps": None
        if maps is None
        else {
            name: {"rows": b.rows, "cols": b.cols, "swizzle": b.swizzle} for name, b in (("a", maps.a), ("b", maps.b))
        },
    }


# -- which problems ----------------------------------------------------------------------------


def wanted_ops(names: Sequence[str]) -> set[tuple[str, str | None]]:
    """`--op` values as (op, dtype or None for every dtype): gemv, gemm or a BLAS name (hgemv, sgemm)."""
    wanted: set[tuple[str, str | None]] = set()
    for given in names:
        name = given.strip().lower()
        if not name:  # resolve_op reads no op as the default one: here it would mean hgemv alone
            raise AutotuneError("--op is empty: name an op (gemv, gemm, hgemv, sgemm, ...) or leave --op out")
        op, dtype = (name, None) if name in BUNDLE_OPS else ops.resolve_op(name)
        if op not in BUNDLE_OPS:
            choices = ", ".join([*BUNDLE_OPS, *(p + o for o in BUNDLE_OPS for p in BLAS_PREFIX)])
            raise AutotuneError(f"a bundle holds GEMV and GEMM kernels, not {given!r}: --op takes {choices}")
        wanted.add((op, dtype))
    return wanted


def _selected(problem: Problem, wanted: set[tuple[str, str | None]]) -> bool:
    if problem.op not in BUNDLE_OPS:
        return False
    return not wanted or (problem.op, None) in wanted or (problem.op, problem.dtype) in wanted


def _gpu(store: Store, gpu: str | None) -> BundleGpu:
    known = store.gpu_names()
    if gpu is None:
        raise AutotuneError(f"a bundle holds one GPU: give --gpu, one of {', '.join(known) or 'none stored yet'}")
    name = api.match_gpu(gpu, known)
    rows = [row for row in store.gpus() if row.name == name]
    if not rows:
        raise AutotuneError(f"nothing stored for GPU {gpu!r}; the database holds: {', '.join(known) or 'no GPU yet'}")
    newest = max(rows, key=lambda row: (row.created_at, row.id))
    return BundleGpu(newest.name, newest.compute_capability, newest.sm_count)


# -- building ----------------------------------------------------------------------------------


def _kernel_image(job: CompileJob) -> tuple[bytes, str]:
    """The machine code of `job` and its kind ("fatbin" or "cubin"): shipped, else cached or nvcc's."""
    stem = shipped.lookup(job)
    found = shipped.index()
    if stem is not None and found is not None:
        return shipped.image(stem), str(found.files[stem]["kind"])
    return shipped.find_kernel(job).image, "cubin"


def make_entry(target: BundleGpu, index: int, problem: Problem, config: Config, kernel_file: str) -> Entry:
    """The entry that runs `config` on `problem` on the GPU `target` from `kernel_file` (its time unknown)."""
    with targeting(target.compute_capability):
        op = ops.for_problem(problem)
        job = ops.compile_job(problem, config, target.arch, op)
        cluster = config.get("cluster", 1)
        return Entry(
            index=index,
            problem=problem,
            family=kernel_family(problem, config),
            config=dict(config),
            kernel_name=job.name,
            kernel_file=kernel_file,
            arg_types=op.arg_types,
            swap_inputs=problem.trans and problem.op == "gemv",  # the transposed GEMV takes x first
            cluster=(1, cluster, 1) if cluster > 1 else (1, 1, 1),
            programmatic=op.waits_for_prior_grid(problem) and int(target.compute_capability.split(".")[0]) >= 9,
            launch=op.launch(problem, config, target.sm_count),
            time_us=0.0,
            gbs=None,
            source_hash=job.depends_hash,
        )


# An absolute path in a reason (the shipped kernel's file, nvcc's source): the folders are the
# build machine's, which the manifest travels without; the file's name says which.
_FOLDERS = re.compile(r"(?<![\w.~])/(?:[^\s/]+/)+")


def _skip(bundle: Bundle, problem: Problem, reason: str) -> None:
    log.warning("%s is left out of the bundle: %s", problem, reason)
    bundle.skipped.append({**_problem_dict(problem), "reason": _FOLDERS.sub("", reason)})


def _ours_measured(store: Store, problem: Problem, gpu: str) -> bool:
    """Whether any trial of one of our kernels, of any source, is stored for the problem on `gpu`."""
    problem_id = store.problem_id(problem, gpu, create=False)
    trials = store.trials(problem_id) if problem_id is not None else []
    return any(ops.library_of_source(t.source_hash) is None for t in trials)


def build(gpu: str | None, op_names: Sequence[str] = (), db: str | None = None) -> Bundle:
    """The bundle of one GPU's tuned problems (of the ops `op_names` name, else of every op), in
    memory; nothing is written."""
    from autotune.select.choose import MEASURED, Selector

    wanted = wanted_ops(op_names)
    store = api.store(db)
    bundle = Bundle(_gpu(store, gpu))
    target = bundle.gpu
    # One read of the selector's rows for every problem (as `autotune list` asks), not two queries a problem.
    selector = Selector(table.in_memory(store.selection_rows(table.PER_SOURCE)))
    jobs: dict[str, tuple[CompileJob, str]] = {}  # kernel name -> its job and file in the bundle
    # The header looks a problem up by op, dtype, layout and shape: a problem that names input dtypes
    # or a variant has no key there, and is left out rather than answer for the plain problem.
    rows = [row for row in store.problems(target.name) if not (row.input_dtypes or row.variant)]
    problems = sorted(
        {row.problem for row in rows if _selected(row.problem, wanted)}, key=lambda p: (p.op, p.dtype, p.trans, p.shape)
    )
    for problem in problems:
        choice = selector.choose(problem, target.name, vendor=False)  # a bundle carries our kernels only
        if choice.source != MEASURED:
            if not _ours_measured(store, problem, target.name):
                # Only cuBLASLt was timed on it here (a shape whose family changed since this GPU's
                # sweep): not a problem of ours to bundle, nor one the bundle lost.
                log.info("%s: only cuBLASLt was measured on %s, not in the bundle", problem, target.name)
                continue
            reason = "no correct measurement of the current kernel source that its space still allows"
            _skip(bundle, problem, reason)
            continue
        with targeting(target.compute_capability):  # the target's families, not this machine's
            if ops.for_problem(problem).launch(problem, choice.config, target.sm_count).cluster_dims is not None:
                # The header's launches carry no attributes: its clusters are those compiled in.
                reason = "its kernel takes its thread-block clusters at launch, which a bundle cannot give"
                _skip(bundle, problem, reason)
                continue
            job = ops.compile_job(problem, choice.config, target.arch)
            if job.name in jobs:  # another problem's pick: the kernel taken for it (nvcc's bytes differ
                # from one build to the next, and another process may rebuild the cached cubin meanwhile)
                if cache_key(jobs[job.name][0]) != cache_key(job):
                    raise AutotuneError(f"two different kernels are named {job.name}: cannot write both")
                kernel_file = jobs[job.name][1]
            else:
                try:
                    image, kind = _kernel_image(job)
                except AutotuneError as exc:
                    _skip(bundle, problem, f"no kernel: {exc}")
                    continue
                kernel_file = f"{KERNELS}/{job.name}.{kind}"
                bundle.kernels[kernel_file] = image
                jobs[job.name] = (job, kernel_file)
        entry = make_entry(target, len(bundle.entries), problem, choice.config, kernel_file)
        bundle.entries.append(replace(entry, time_us=float(choice.time_us or 0.0), gbs=choice.gbs))
    if not bundle.entries:
        what = " and ".join(sorted(f"{dtype or 'any dtype'} {op}" for op, dtype in wanted)) or "any op"
        raise AutotuneError(f"nothing to bundle: no problem of {what} is tuned on {target.name}")
    return bundle


def manifest(bundle: Bundle) -> dict[str, Any]:
    """manifest.json: the bundle as data, for tools and people (the header holds the same entries)."""
    gpu = bundle.gpu
    return {
        "kind": KIND,
        "format": bundle.format,
        "autotune": __version__,
        "gpu": {
            "name": gpu.name,
            "compute_capability": gpu.compute_capability,
            "arch": gpu.arch,
            "sm_count": gpu.sm_count,
        },
        "header": HEADER,
        "alignment": bundle.alignment,
        "entries": [
            {
                "index": e.index,
                **_problem_dict(e.problem),
                "family": e.family,
                "backend": "kernel",
                "kernel_file": e.kernel_file,
                "kernel_name": e.kernel_name,
                "arg_types": e.arg_types,
                "swap_inputs": e.swap_inputs,
                "cluster": list(e.cluster),
                "programmatic": e.programmatic,
                "launch": _launch_dict(e.launch),
                "time_us": e.time_us,
                "gbs": e.gbs,
                "config": e.config,
                "source_hash": e.source_hash,
            }
            for e in bundle.entries
        ],
        "kernels": [
            {"file": name, "bytes": len(image), "sha256": hashlib.sha256(image).hexdigest()}
            for name, image in sorted(bundle.kernels.items())
        ],
        "skipped": bundle.skipped,
        "not_covered": list(NOT_COVERED),
    }


# -- writing -----------------------------------------------------------------------------------


def _check_output(output: Path) -> None:
    """Refuse, before anything is built, a target that is a file, the folder this process works in (or
    one above it), or a folder of something else: an earlier bundle is replaced whole, so a folder that
    holds anything besides one (a program built beside its header) would lose it."""
    if output.is_symlink() or (output.exists() and not output.is_dir()):
        raise AutotuneError(f"{output} is a file: a bundle is written into a folder, give a new one with -o")
    if not output.is_dir():
        return
    try:
        here = Path.cwd().resolve()
    except OSError:  # the working folder was deleted: no folder of the bundle's can be it
        here = None
    if here is not None and output.resolve() in (here, *here.parents):
        raise AutotuneError(f"{output} is the folder you are in (or one above it): give the bundle a folder of its own")
    if any(output.iterdir()) and not _is_bundle(output):
        raise AutotuneError(f"{output} is a folder that holds something else than a bundle: give a new folder")
    others = _not_the_bundles(output)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise AutotuneError(
            f"{output} holds files that are not the bundle's ({shown}): the bundle replaces its folder whole;"
            " move them, or give a new folder"
        )


def _not_the_bundles(folder: Path) -> list[str]:
    """What a bundle's folder holds that no bundle writes: anything but the header, the manifest and
    the kernels folder, and anything in that folder that is not a file."""
    others = sorted(entry.name for entry in folder.iterdir() if entry.name not in (HEADER, MANIFEST, KERNELS))
    kernels = folder / KERNELS
    if kernels.is_symlink() or (kernels.exists() and not kernels.is_dir()):
        others.append(KERNELS)
    elif kernels.is_dir():
        others += sorted(f"{KERNELS}/{e.name}" for e in kernels.iterdir() if e.is_symlink() or not e.is_file())
    return others


def _is_bundle(folder: Path) -> bool:
    try:
        return json.loads((folder / MANIFEST).read_text()).get("kind") == KIND  # type: ignore[no-any-return]
    except (OSError, ValueError, AttributeError):
        return False


def write(bundle: Bundle, output: Path) -> None:
    """Write `bundle` into the folder `output` whole or not at all: into a new folder beside it,
    renamed into place (an earlier bundle there is replaced)."""
    from autotune.bundle import header

    _check_output(output)
    text = header.render(bundle)
    parent = output.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".tmp", dir=parent))
        # mkdtemp makes it 0700: the bundle gets a new folder's usual mode, for the accounts
        # that deploy it to read.
        os.chmod(staged, 0o777 & ~umask())
    except OSError as exc:
        raise AutotuneError(f"cannot write into {parent}: {exc.strerror or exc}") from None
    try:
        (staged / KERNELS).mkdir()
        for name, image in bundle.kernels.items():
            (staged / name).write_bytes(image)
        (staged / HEADER).write_text(text)
        (staged / MANIFEST).write_text(json.dumps(manifest(bundle), indent=1, allow_nan=False) + "\n")
        _replace(staged, output)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise AutotuneError(f"cannot write the bundle {output}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise


def _replace(staged: Path, output: Path) -> None:
    if not output.exists():
        os.rename(staged, output)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".old", dir=staged.parent))
    try:  # the retired folder goes whatever fails, the first rename included
        os.rename(output, retired / "bundle")
        try:
            os.rename(staged, output)
        except OSError:
            os.rename(retired / "bundle", output)  # put the earlier bundle back
            raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)


def export_bundle(
    output: Path, gpu: str | None, op_names: Sequence[str] = (), db: str | None = None, *, allow_partial: bool = False
) -> Bundle:
    """Build the bundle of `gpu` and write it into the folder `output`; returns it. A bundle that
    would leave problems out is refused, nothing written, unless `allow_partial`: a deployment
    should not find out from a missing entry that its kernel was damaged."""
    _check_output(output)
    bundle = build(gpu, op_names, db)
    if bundle.skipped and not allow_partial:
        count, first = len(bundle.skipped), bundle.skipped[0]
        raise AutotuneError(
            f"{count} problem{'s' if count > 1 else ''} cannot be bundled (the first, {_problem_text(first)}: "
            f"{first['reason']}); nothing written: --allow-partial writes the bundle without them, "
            "listed in its manifest"
        )
    write(bundle, output)
    return bundle


def _problem_text(skipped: dict[str, Any]) -> str:
    fields = ("op", "dtype", "m", "n", "k", "trans")
    return str(Problem(*(skipped[name] for name in fields)))


# -- the look-up the header implements ----------------------------------------------------------


def runs(bundle: Bundle, entry: Entry, m: int, n: int, k: int) -> bool:
    """Whether `entry`'s config runs its op, dtype and layout at this shape on the bundle's GPU: the
    family the GPU would pick for the shape is the entry's, and the config is a point of its space."""
    p = entry.problem
    try:
        problem = ops.make_problem(p.op, p.dtype, m, n, k or None, p.trans)
    except AutotuneError:
        return False
    with targeting(bundle.gpu.compute_capability):
        if kernel_family(problem, entry.config) != entry.family:
            return False
        return ops.for_problem(problem).space(problem).check(entry.config) is None


def distance(entry: Entry, m: int, n: int, k: int) -> float:
    """The header's autotune_distance: squared distance in log2 space (the selector's, squared)."""
    p = entry.problem
    pairs = [(p.m, m), (p.n, n)] + ([(p.k, k)] if p.k and k else [])
    return sum(math.log2(tuned / asked) ** 2 for tuned, asked in pairs)


def find(bundle: Bundle, op: str, dtype: str, m: int, n: int, k: int, trans: bool) -> Entry | None:
    """The header's autotune_find: the exact entry, else the nearest one whose config runs the shape
    (the smaller tuned shape first among equally near ones), else None."""
    same = [e for e in bundle.entries if (e.problem.op, e.problem.dtype, e.problem.trans) == (op, dtype, trans)]
    for entry in same:
        if (entry.problem.m, entry.problem.n, entry.problem.k) == (m, n, k):
            return entry

    def nearest_first(entry: Entry) -> tuple[float, tuple[int, int, int]]:
        return distance(entry, m, n, k), (entry.problem.m, entry.problem.n, entry.problem.k)

    # The nearest that runs the shape: entries in order of nearness (a stable sort keeps the entries'
    # order among equal ones, as min() would) and checked until one runs, not every entry checked.
    return next((e for e in sorted(same, key=nearest_first) if runs(bundle, e, m, n, k)), None)
