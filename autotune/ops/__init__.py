"""The registry of operations, and what needs an op to be understood: op names on the command line,
problems and their sizes, standard shapes, kernel source hashes, compile jobs.

Each op is an `Op` (autotune/ops/base.py) in its own folder; `register` adds one (the shipped ops
are registered here; a plug-in or a test registers its own), `for_problem` finds the op whose
kernels run a problem. A library family (autotune/ops/library.py: cuBLASLt's algorithms, in
ops/cublas/) is registered beside them with `register_library`; `library_for` and
`library_of_source` say which one a config or a trial's source hash belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import file_hash
from autotune.core.jobs import CompileJob
from autotune.core.problem import (
    BLAS_PREFIX,
    INPUT_BITS,
    INPUT_DTYPES,
    MAX_MATRIX_BYTES,
    Problem,
    check_dim,
    parse_dtype,
    parse_shapes,
)
from autotune.ops import cublas, gemm, gemv, q8gemm, qdequant, qgemm
from autotune.ops.base import Op
from autotune.ops.library import Library

DEFAULT_OP = "hgemv"
DEFAULT_DTYPE = "float16"
_OPS: dict[str, Op] = {}
_MODULES: dict[str, str] = {}  # op name -> the module whose import registers it
_LIBRARIES: dict[str, Library] = {}  # family name -> the library family


def register(op: Op, module: str | None = None) -> Op:
    """Make `op` known by its name to every stage (problems, the tuner, the worker, the store).
    `module` is the module whose import registers it (its class's module unless given): the tuning
    worker, a process of its own, imports it before measuring a problem of the op."""
    if not op.name.isidentifier() or (op.name[0] in BLAS_PREFIX and op.name[1:] in _OPS):
        raise AutotuneError(f"cannot register an op named {op.name!r}")
    _OPS[op.name] = op
    _MODULES[op.name] = module or type(op).__module__
    return op


def unregister(name: str) -> None:
    """Forget a registered op (a test's, a plug-in's); unknown names are ignored."""
    _OPS.pop(name, None)
    _MODULES.pop(name, None)


def register_library(library: Library) -> Library:
    """Make a library family (its configs, sources, plans) known to every stage."""
    _LIBRARIES[library.name] = library
    return library


def libraries() -> tuple[Library, ...]:
    return tuple(_LIBRARIES.values())


def library_for(config: Mapping[str, object]) -> Library | None:
    """The library family whose candidate `config` names, None for a config of our kernels."""
    for library in _LIBRARIES.values():
        if library.owns(config):
            return library
    return None


def library_of_source(source_hash: str) -> Library | None:
    """The library family a trial of this source hash timed, None for a source of our kernels."""
    for library in _LIBRARIES.values():
        if library.owns_source(source_hash):
            return library
    return None


def library_named(name: str) -> Library:
    try:
        return _LIBRARIES[name]
    except KeyError:
        raise AutotuneError(f"unknown library family {name!r}: choose one of {', '.join(_LIBRARIES)}") from None


def registering_module(name: str) -> str:
    """The module whose import registers the op `name`."""
    get(name)
    return _MODULES[name]


def names() -> tuple[str, ...]:
    return tuple(_OPS)


def shipped() -> tuple[str, ...]:
    """The ops that ship with autotune: those this package registers (plug-ins and tests register others)."""
    return tuple(name for name, module in _MODULES.items() if module.startswith(f"{__name__}."))


def get(name: str) -> Op:
    try:
        return _OPS[name]
    except KeyError:
        raise AutotuneError(f"unknown op {name!r}: choose one of {', '.join(_OPS)}") from None


def for_problem(problem: Problem) -> Op:
    """The op whose kernels run this problem."""
    return get(problem.op).serving(problem)


def resolve_op(op: str | None, dtype: str | None = None) -> tuple[str, str]:
    """Map `--op` and `--dtype` to (op, dtype): BLAS names (sgemv, hgemv, bgemv) or `gemv` + dtype."""
    # --dtype alone names the dtype of the default op's kind (GEMV), not a clash with hgemv.
    name = (op or (DEFAULT_OP[1:] if dtype is not None else DEFAULT_OP)).strip().lower()
    wanted = parse_dtype(dtype) if dtype is not None else None
    if name in _OPS:
        return name, wanted or DEFAULT_DTYPE
    if len(name) > 1 and name[0] in BLAS_PREFIX and name[1:] in _OPS:
        implied = BLAS_PREFIX[name[0]]
        if wanted is not None and wanted != implied:
            raise AutotuneError(f"--op {name} means dtype {implied}, but --dtype says {wanted}")
        return name[1:], implied
    base, slash, variant = name.partition("/")
    if slash and base and variant:  # as list and export write a variant beside its op: hqgemm/g128a
        raise AutotuneError(f"--op {name} names a variant: give it as --op {base} --variant {variant}")
    known = ", ".join([*_OPS, *(p + o for o in _OPS for p, d in BLAS_PREFIX.items() if d in _OPS[o].dtypes)])
    raise AutotuneError(f"unknown op {op!r}: choose one of {known}")


def make_problem(
    op: str,
    dtype: str,
    m: object,
    n: object,
    k: object = None,
    trans: bool = False,
    *,
    inputs: Sequence[str] = (),
    variant: str = "",
) -> Problem:
    """A checked problem: the sizes its op takes (M and N, and K where the op has it), a transposed
    layout only where the op has one, input dtypes and a variant the op takes (key_fault). Input
    dtypes that all equal `dtype` name the plain problem: they are left out of it."""
    kind = get(op)
    if "K" in kind.sizes:
        if k is None:
            operands = "A is M x K, B is K x N" if op == "gemm" else "the reduction length"
            raise AutotuneError(f"{op.upper()} needs K (--k): {operands}")
        checked_k = check_dim("K", k)
    elif k is not None:
        raise AutotuneError(f"--k applies to GEMM only; {op} is {' x '.join(kind.sizes)}")
    else:
        checked_k = 0
    if trans and not kind.transposable:
        raise AutotuneError(f"--trans applies to GEMV and GEMM only ({op.upper()} takes row-major operands)")
    problem = Problem(op, dtype, check_dim("M", m), check_dim("N", n), checked_k, bool(trans), tuple(inputs), variant)
    problem = kind.complete(problem)
    if problem.inputs or problem.variant:
        fault = key_fault(problem)
        if fault is not None:
            raise AutotuneError(fault)
        if set(problem.inputs) == {dtype}:
            problem = replace(problem, inputs=())
    if problem.matrix_bytes > MAX_MATRIX_BYTES:
        raise AutotuneError(
            f"{problem}: the matrix would take {problem.matrix_bytes / 2**30:.0f} GiB, more than any GPU holds"
        )
    return problem


def key_fault(problem: Problem) -> str | None:
    """Why the problem's op cannot serve its input dtypes and variant, or None: a variant the op
    defines, one known dtype for each of its input arrays, a combination its kernels read. One rule
    for make_problem, a records line and a stored row."""
    kind = get(problem.op)
    if problem.variant and problem.variant not in kind.variants:
        if not kind.variants:
            # A variant of another op here is most likely that op misnamed (hgemv for hqgemm): name it.
            owners = [name for name, other in _OPS.items() if problem.variant in other.variants]
            owned = f": it is a variant of {', '.join(owners)}" if owners else ""
            return f"{problem.op} has no variants (got {_short(problem.variant)}){owned}"
        return f"unknown variant {_short(problem.variant)} of {problem.op}: choose one of {', '.join(kind.variants)}"
    if problem.inputs:
        unknown = [name for name in problem.inputs if name not in INPUT_BITS]
        if unknown:
            return f"unknown input dtype {_short(unknown[0])}: choose from {', '.join(INPUT_DTYPES)}"
        if len(problem.inputs) != len(kind.input_names):
            named = ",".join(problem.inputs)
            return f"{problem.op} reads {len(kind.input_names)} input arrays, not {len(problem.inputs)} ({named})"
    return kind.input_fault(problem)


def _short(value: str) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def shape_dims(op: str) -> tuple[str, ...]:
    """The sizes a shapes-file line gives for this op."""
    return get(op).sizes


def standard_shapes(op: str = "gemv") -> list[tuple[int, ...]]:
    """The shape set that ships with the op (what `autotune sweep` tunes by default)."""
    path = get(op).shapes_file
    if path is None:
        raise AutotuneError(f"{op} has no standard shapes: pass --m and --n, or --shapes")
    return parse_shapes(Path(path).read_text(), f"standard {op} shapes", shape_dims(op))


def source_hash(problem: Problem) -> str:
    """Hash of the kernel source file that serves this problem: a measurement of an older source is stale."""
    return file_hash(for_problem(problem).kernel_file(problem))


def compile_job(problem: Problem, config: Mapping[str, int], gpu_arch: str, op: Op | None = None) -> CompileJob:
    """The nvcc job that builds this config's kernel for a GPU of `gpu_arch` (e.g. "sm_90"), keyed by
    the kernel source file's hash so that a cubin of an older source is never reused. `op` is the
    problem's own op unless given (the launcher runs unaligned arrays in another family)."""
    op = op or for_problem(problem)
    return CompileJob(
        op.kernel_name(problem, config),
        op.kernel_source(problem, config),
        op.compile_arch(problem, gpu_arch, config),
        file_hash(op.kernel_file(problem)),
    )


def in_space_order(problem: Problem, config: Mapping[str, int]) -> dict[str, int]:
    """The config with its parameters in the order of the problem's space (records and the database
    keep them sorted by name); parameters the space does not know come last."""
    order = list(for_problem(problem).space(problem).names)
    return {k: config[k] for k in sorted(config, key=lambda k: order.index(k) if k in order else len(order))}


register(gemv.OP)
register(gemm.OP)
register(qgemm.OP)
register(qdequant.OP)
register(q8gemm.OP)
register_library(cublas.FAMILY)
