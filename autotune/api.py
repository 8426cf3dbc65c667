"""The library surface: best(), sweep(), gemv(), plus what the CLI lists. Each validates its input
first, so bad input fails with one AutotuneError line before any database or GPU is touched."""

from __future__ import annotations

import dataclasses
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import ops
from autotune.core.asked import Asked
from autotune.core.errors import AutotuneError, AutotuneWarning
from autotune.core.fingerprint import LocalGpu, cuda_release, local_gpus, slugify
from autotune.core.gpus import capability as gpu_capability
from autotune.core.gpus import described
from autotune.core.log import show_on_stderr
from autotune.core.output import printable
from autotune.core.problem import Problem, parse_input_dtypes, read_shapes_file
from autotune.ops import make_problem, q8gemm, qdequant, qgemm, resolve_op, shape_dims, standard_shapes
from autotune.ops.base import Op
from autotune.runtime import process, tune_on_miss
from autotune.runtime.launcher import Runtime
from autotune.runtime.misses import Misses
from autotune.select.choose import Choice, Selector
from autotune.store import selection_table as table  # at import: its first use is a launch's first call
from autotune.store_session import Session

if TYPE_CHECKING:
    from autotune.store import Store
    from autotune.tune.devices import DeviceResult
    from autotune.tune.search import Budget
    from autotune.tune.tuner import Progress, SweepReport, TrialHook

# Kept equal to autotune.tune.search.SAMPLERS (tests/test_search.py checks), which imports Optuna: the
# CLI validates --sampler without paying for that import.
SAMPLERS = ("tpe", "tpe-valid", "tpe-local", "tpe-ranked", "tpe-fresh", "random", "grid")
DEFAULT_SAMPLER = "tpe-fresh"  # autotune.tune.search.DEFAULT_SAMPLER, checked the same way
# A sweep's budget per shape: trials, and the trials without a 1% gain after which a shape has stopped
# improving. A shape nothing stored seeds (no earlier sweep, no other GPU's, no tuned neighbour) gets
# the UNSEEN budget when the sweep runs at the default one: replayed on fully measured spaces, a blind
# search stopped at 64/32 most often before it came within 2% of the optimum, at 128/64 up to 7 times
# as often (docs/findings.md, "Search on spaces never seen").
DEFAULT_TRIALS, DEFAULT_PATIENCE = 64, 32
UNSEEN_TRIALS, UNSEEN_PATIENCE = 128, 64
# sweep --retime: a problem whose earlier best, measured again under edited kernels, is at most this
# much slower than stored keeps it instead of being re-swept.
RETIME_TOLERANCE = 0.02
# A problem's input dtypes, each input array's in the kernel's order: "int4,float16" or a list of names.
Inputs = str | Sequence[str]


# The process's store session (autotune/store_session.py): the databases it opened and the selectors over
# them. new_session() starts another, as a later process would.
_SESSION = Session()


def session() -> Session:
    """The process's current store session."""
    return _SESSION


def new_session() -> Session:
    """Start a new store session for this process, as a later process starts: each database is opened
    afresh at its next use (shipped records files that changed imported), every choice is made again,
    and no earlier without_shipped() request holds. Returns it."""
    global _SESSION
    _SESSION = Session()
    _RUNTIME.forget()
    return _SESSION


def default_store_opened() -> bool:
    """Whether this process opened the default database: from then on the launch path selects from
    the store, before that from the selection table (scripts/bench_first_call.py reports which)."""
    return _SESSION.default_store_opened()


def store(db: str | None = None) -> Store:
    """The database (opened once per session and URL; shipped records imported on first use)."""
    return _SESSION.store(db)


def without_shipped(db: str | None = None) -> None:
    """Open the database, when this process first opens it, as one that never takes the shipped
    records (--no-shipped): a new one starts empty and stays without them in every later process;
    one that holds them already is refused. Not opened here: bad input found first creates nothing."""
    _SESSION.without_shipped(db)


def match_gpu(wanted: str, known: Sequence[str]) -> str:
    """`--gpu` matching: the full name or its slug ('nvidia-h200'), any case, or a unique part of it."""
    if not isinstance(wanted, str):
        raise AutotuneError("--gpu must name a GPU, e.g. 'NVIDIA H200'")
    key = slugify(wanted)
    exact = [name for name in known if slugify(name) == key]
    if exact:
        return exact[0]
    partial = [name for name in known if key and key in slugify(name)]
    if len(partial) == 1:
        return partial[0]
    if len(partial) > 1:
        raise AutotuneError(f"--gpu {wanted!r} is ambiguous: it matches {', '.join(partial)}")
    return wanted  # a GPU nothing was tuned for: the selector answers with the default config


def unknown_gpu(gpu: str, known: Sequence[str]) -> str:
    """The one message for a `--gpu` that names no GPU the database holds, in every command."""
    return f"unknown GPU {gpu!r}: the database holds {', '.join(known) or 'no GPU yet'}"


def stored_gpu(gpu: str, known: Sequence[str]) -> str:
    """The stored GPU `gpu` names (match_gpu's matching), for the commands that show what the
    database holds (list, show, report, export): any other name is refused with the list."""
    name = match_gpu(gpu, known)
    if name not in known:
        raise AutotuneError(unknown_gpu(gpu, known))
    return name


def _local_gpu() -> LocalGpu | None:
    found = local_gpus()
    return found[0] if found else None


def local_gpu_name() -> str | None:
    """The name of this machine's first GPU, None where it has none."""
    local = _local_gpu()
    return local.name if local else None


def short_gpu_name(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3': the vendor's name is the same on every row."""
    return name.removeprefix("NVIDIA ").strip() or name


def resolve_gpu(gpu: str | None, known: Sequence[str], *, answerable: bool = True) -> tuple[str, str | None]:
    """(GPU name, local driver or None): the named GPU, or this machine's first GPU. Where an answer
    must be built for it (`answerable`), a name must be one the database holds measurements for
    (`known`), a described model (db/gpus.json) or this machine's GPU; any other is refused with
    the list, since which kernel families run on it is unknown."""
    if gpu is not None:
        if not isinstance(gpu, str) or not gpu.strip():
            raise AutotuneError("--gpu must name a GPU, e.g. 'NVIDIA H200'")
        name = match_gpu(gpu, known)
        if name in known or not answerable:
            return name, None
        model = _model_named(gpu, known)
        if model is not None:
            return model, None
        raise AutotuneError(
            f"{unknown_gpu(gpu, known)}; described without measurements: "
            f"{', '.join(n for n in described() if n not in known)}"
        )
    local = _local_gpu()
    if local is None:
        tuned = ", ".join(known) if known else "none yet"
        raise AutotuneError(f"no NVIDIA GPU on this machine: name one with --gpu (tuned GPUs: {tuned})")
    return local.name, local.driver


def _model_named(gpu: str, known: Sequence[str]) -> str | None:
    """The described model (db/gpus.json) or local GPU, none of `known`, that `gpu` names; None where
    none does. A part must be whole words of the name ('a100-sxm4', not 'x'): a stray letter would
    otherwise pick a model no one meant."""
    others = [n for n in [*described(), *(g.name for g in local_gpus())] if n not in known]
    words = slugify(gpu)
    wordwise = [n for n in others if f"-{words}-" in f"-{slugify(n)}-"]
    name = match_gpu(gpu, wordwise)
    return name if name in wordwise else None


def best(
    op: str | None = None,
    m: int = 4096,
    n: int = 8192,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    gpu: str | None = None,
    db: str | None = None,
    vendor: bool = True,
    inputs: Inputs = (),
    variant: str = "",
) -> Choice:
    """Which config for this problem on this GPU: measured, estimated from the nearest tuned shape,
    or the safe default, and which of the three it is (Choice.source). GEMM needs `k`. With `vendor`
    False, among our kernels only (a cuBLASLt algorithm is a config {"cublas_algo": rank}). `inputs`
    ("int4,float16" or a list) and `variant` name a problem of an op that defines them (Problem)."""
    problem = _problem(op, dtype, m, n, k, trans, inputs, variant)
    known = _SESSION.store(db).gpu_names()
    gpu_name, local_driver = resolve_gpu(gpu, known)
    cuda = cuda_release() if local_driver else None
    choice = _SESSION.selector(db).choose(problem, gpu_name, local_driver, cuda, vendor=vendor)
    if gpu_name not in known:
        model = described().get(gpu_name)
        if model is not None:
            note = (
                f"no record exists for {gpu_name}: answered with the kernel families that run on compute "
                f"capability {model.compute_capability}; the database holds measurements for: "
                f"{', '.join(known) or 'no GPU yet'}"
            )
        else:
            note = f"the database holds measurements for: {', '.join(known) or 'no GPU yet'}"
        choice = dataclasses.replace(choice, notes=(*choice.notes, note))
    return choice


def best_on_every_gpu(
    op: str | None = None,
    m: int = 4096,
    n: int = 8192,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    db: str | None = None,
    inputs: Inputs = (),
    variant: str = "",
) -> list[Choice]:
    """best() for every GPU the database holds measurements for (what `autotune best` answers on a
    machine without a GPU); a one-line error where it holds none."""
    problem = _problem(op, dtype, m, n, k, trans, inputs, variant)
    known = _SESSION.store(db).gpu_names()
    if not known:
        raise AutotuneError("no NVIDIA GPU on this machine and nothing tuned yet: name a GPU with --gpu")
    return [_SESSION.selector(db).choose(problem, name) for name in known]


def _problem(
    op: str | None,
    dtype: str | None,
    m: int,
    n: int,
    k: int | None,
    trans: bool,
    inputs: Inputs = (),
    variant: str = "",
) -> Problem:
    """One checked problem from the user's op, dtype, sizes, input dtypes and variant."""
    name, kind = resolve_op(op, dtype)
    return make_problem(name, kind, m, n, k, trans, inputs=_input_dtypes(inputs), variant=variant)


def _input_dtypes(inputs: Inputs) -> tuple[str, ...]:
    """Input dtypes given as "int4,float16" or as a list of names."""
    if not inputs:
        return ()
    return parse_input_dtypes(inputs if isinstance(inputs, str) else ",".join(inputs))


def problems_for(
    op: str | None,
    dtype: str | None,
    m: int | None,
    n: int | None,
    shapes_file: Path | None,
    k: int | None = None,
    trans: bool = False,
    *,
    inputs: Inputs = (),
    variant: str = "",
) -> list[Problem]:
    """What a sweep tunes: one shape, a shapes file, or the standard set that ships with autotune."""
    name, kind = resolve_op(op, dtype)
    dims = shape_dims(name)
    given = {"M": m, "N": n, "K": k}
    if k is not None and "K" not in dims:
        raise AutotuneError(f"--k applies to GEMM only; {name} is M x N")
    named = [d for d in dims if given[d] is not None]
    flags = [f"--{d.lower()}" for d in dims]
    every = f"both {flags[0]} and {flags[1]}" if len(flags) == 2 else f"all of {', '.join(flags[:-1])} and {flags[-1]}"
    if named and len(named) != len(dims):
        raise AutotuneError(f"give {every}, or neither (to tune a shapes file or the standard set)")
    if named and shapes_file is not None:
        raise AutotuneError(f"give either {'/'.join(flags)} or --shapes, not both")
    if named:
        shapes = [tuple(value for value in (given[d] for d in dims) if value is not None)]
    elif shapes_file is not None:
        shapes = read_shapes_file(shapes_file, dims)
    else:
        shapes = standard_shapes(name)
    # A shape is (M, N) or, for GEMM, (M, N, K).
    typed = _input_dtypes(inputs)
    return [
        make_problem(
            name, kind, shape[0], shape[1], shape[2] if len(shape) > 2 else None, trans, inputs=typed, variant=variant
        )
        for shape in shapes
    ]


def sweep(
    op: str | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    shapes_file: Path | None = None,
    trials: int = DEFAULT_TRIALS,
    timeout: float | None = None,
    patience: int | None = DEFAULT_PATIENCE,
    sampler: str = DEFAULT_SAMPLER,
    seed: int | None = None,
    db: str | None = None,
    device: int = 0,
    progress: Progress | None = None,
    stale: bool = False,
    pending: bool = False,
    retime: bool = False,
    lease: float | None = None,
    on_trial: TrialHook | None = None,
    shipped: bool = True,
    inputs: Inputs = (),
    variant: str = "",
) -> SweepReport:
    """Tune each problem on this machine's GPU and store every measurement. With `stale`, re-tune
    instead every stored problem of this GPU (of `op`/`dtype` when given) that has no measurement
    with the current kernel source, driver and CUDA; with `pending`, the problems queued for this
    GPU's model (asked for by the launch path, most asked first). Problems are claimed one at a
    time through the database, for `lease` seconds renewed while tuning, so that the same sweep
    on several machines sharing a database splits the work. With `retime` (after a kernel edit), the
    stale problems' earlier best configs are measured first under the current kernels, and a problem
    is re-swept only where they come out more than 2% slower than stored.
    `on_trial(problem, config, outcome)` is called after every trial. Without `shipped`, a new
    database is made without the shipped records (without_shipped)."""
    given = m is not None or n is not None or k is not None or shapes_file is not None
    if sum((stale, pending, retime)) > 1:
        raise AutotuneError("--stale, --retime and --pending are different sweeps: give one of them")
    if pending:
        if given or op is not None or dtype is not None:
            raise AutotuneError("--pending tunes the queued problems: give no --op, --m, --n, --k, --dtype or --shapes")
        problems: list[Problem] | tuple[str | None, str | None] | None = None
    elif stale or retime:
        if given:
            what = "--stale" if stale else "--retime"
            raise AutotuneError(f"{what} re-tunes stored problems: give no --m, --n, --k or --shapes with it")
        problems = _filters(op, dtype)
    else:
        problems = problems_for(op, dtype, m, n, shapes_file, k, trans, inputs=inputs, variant=variant)
    return sweep_problems(
        problems,
        trials=trials,
        timeout=timeout,
        patience=patience,
        sampler=sampler,
        seed=seed,
        db=db,
        device=device,
        progress=progress,
        retime=retime,
        lease=lease,
        on_trial=on_trial,
        shipped=shipped,
    )


def sweep_problems(
    problems: list[Problem] | tuple[str | None, str | None] | None,
    *,
    trials: int = DEFAULT_TRIALS,
    timeout: float | None = None,
    patience: int | None = DEFAULT_PATIENCE,
    sampler: str = DEFAULT_SAMPLER,
    seed: int | None = None,
    db: str | None = None,
    device: int = 0,
    progress: Progress | None = None,
    retime: bool = False,
    lease: float | None = None,
    on_trial: TrialHook | None = None,
    shipped: bool = True,
) -> SweepReport:
    """sweep() of these problems (a list; (op, dtype) filters of the stored ones for --stale and
    --retime; None for the queue), its options checked first: what sweep() runs, and what
    autotune.tune_model runs on the problems a model met."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise AutotuneError(f"trials (--trials) must be a positive integer, got {trials!r}")
    if timeout is not None and not timeout > 0:
        raise AutotuneError(f"timeout (--timeout) must be a positive number of seconds, got {timeout!r}")
    if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
        never = "or None for no early stop (--patience 0 on the command line)"
        raise AutotuneError(f"patience must be a positive integer, {never}, got {patience!r}")
    if sampler not in SAMPLERS:
        raise AutotuneError(f"unknown sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    from autotune.store import check_url
    from autotune.tune.fleet import lease as claim_lease
    from autotune.tune.tuner import run_sweep

    check_url(db)
    if not shipped:
        without_shipped(db)
    held_for = claim_lease(lease)
    report = run_sweep(
        problems,
        lambda: _SESSION.store(db),
        sampler=sampler,
        budget=sweep_budget(trials, timeout, patience),
        seed=seed,
        device=device,
        progress=progress,
        on_trial=on_trial,
        lease=held_for,
        retime=RETIME_TOLERANCE if retime else None,
    )
    _SESSION.selector(db).forget()
    return report


def sweep_budget(trials: int, timeout: float | None, patience: int | None) -> Budget:
    """The budget per shape; at the default trials and patience, with the UNSEEN one for shapes nothing
    stored seeds (asked for explicitly, a budget holds for every shape)."""
    from autotune.tune.search import Budget

    unseen = (
        Budget(UNSEEN_TRIALS, timeout, UNSEEN_PATIENCE)
        if (trials, patience) == (DEFAULT_TRIALS, DEFAULT_PATIENCE)
        else None
    )
    return Budget(trials, timeout, patience, unseen=unseen)


def sweep_devices(devices: str, *, log_level: int = logging.INFO, **options: Any) -> list[DeviceResult]:
    """`sweep(**options)` on several GPUs of this machine at once ('all', or indices such as '0,1'):
    a claiming sweep process per GPU, sharing the problems through the database's queue. Returns
    each GPU's SweepReport, or why it has none (a GPU that failed does not stop the others). Their
    log goes to stderr at `log_level`, each line naming its GPU; `progress` and `on_trial` cannot
    cross into those processes."""
    if options.get("progress") is not None or options.get("on_trial") is not None:
        raise AutotuneError("a sweep over several GPUs reports through its log: give no progress or on_trial")
    if "device" in options:
        raise AutotuneError("give --device or --devices, not both")
    from autotune.tune.devices import parse_devices, run_on_devices  # multiprocessing: not at import

    indices = parse_devices(devices, len(local_gpus()))
    return run_on_devices(indices, _sweep_on, log_level=log_level, **options)


def _sweep_on(device: int, log_level: int, **options: Any) -> SweepReport:
    """One GPU's part of sweep_devices(), in that GPU's process."""
    show_on_stderr(log_level, prefix=f"GPU {device} ")
    return sweep(device=device, **options)


def choose_on(problem: Problem, device: Any, db: str | None) -> Choice:
    """The config for `problem` on the GPU the operands live on."""
    gpu = device.gpu
    return _SESSION.launch_selector(db).choose(problem, gpu.name, gpu.driver, gpu.cuda)


# The launch path's per-process state: made here (it touches neither the driver nor torch until the
# first call), so that gemv() and gemm() are its own methods, one Python call less on every launch.
def _note_asked(db: str | None, gpu: str, asked: Mapping[Problem, Asked]) -> None:
    """Add the launch path's counts of untuned problems to the database's queue (not a read-only one)."""
    database = _SESSION.store(db)
    if not database.db.read_only:
        database.note_asked(gpu, asked)


def forget_choices() -> None:
    """New measurements were stored (by another process tuning on a miss, or autotune.tune_model):
    later calls select again, from a selection table or store read afresh."""
    _SESSION.forget_choices()
    _RUNTIME.forget()


_MISS_TUNER = tune_on_miss.MissTuner(forget_choices)


def _on_miss(choice: Choice, db: str | None) -> None:
    """An untuned problem's first call (of a signature): tuned in the background where asked for."""
    if tune_on_miss.enabled():
        _MISS_TUNER.submit(choice.problem, db, choice.gpu)


def wait_for_tuning(timeout: float | None = None) -> bool:
    """Wait until every problem that AUTOTUNE_TUNE_ON_MISS=1 sent to background tuning so far is
    tuned (or failed, which the `autotune` logger says): True unless `timeout` seconds ran out first.
    The next call of each such problem then selects its new best config."""
    return _MISS_TUNER.wait(timeout)


_RUNTIME = Runtime(choose_on, Misses(_note_asked, on_miss=_on_miss))
gemv = _RUNTIME.gemv
gemm = _RUNTIME.gemm


def launch_path() -> Runtime:
    """The process's launch path, which gemv(), gemm(), linear() and call() use (torch's custom ops
    call it directly: autotune/runtime/torch_ops.py)."""
    return _RUNTIME


def call(
    op: str,
    *arrays: Any,
    out: Any = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    stream: Any = None,
    db: str | None = None,
    options: tuple[Any, ...] = (),
) -> Any:
    """out = alpha * op(arrays) + beta * out for any registered op that binds arrays (`op` by name:
    "gemv", "gemm", a plug-in's), with the tuned kernel for the arrays' problem on their GPU; returns
    out (`out`, or a new array). Streams and graphs as for gemv(); `options`: the op's own, such as
    the GEMV's (trans,)."""
    return _RUNTIME.call(ops.get(op), *arrays, out=out, alpha=alpha, beta=beta, stream=stream, db=db, options=options)


def linear(x: Any, weight: Any, bias: Any = None, *, db: str | None = None) -> Any:
    """torch.nn.functional.linear's product, y = x Wᵀ + bias with x of shape (..., K) and W (N, K)
    (an nn.Linear's weight), on torch's current stream; returns a new tensor of shape (..., N).

    One row of x (decode with batch 1) is the GEMV y = W x; more rows are the GEMM X Wᵀ with B
    stored N x K, which the skinny families serve up to 16 rows and the tiled ones beyond. W is read
    in place in both; the bias is the GEMM's C with beta = 1, read by the kernel, not added after.

    W may be an int4 weight (autotune.quantize's QuantizedWeight): up to 64 rows of x run the int4
    kernels (autotune/ops/qgemm) on the packed weight; more rows dequantize it and run the GEMM. An
    8-bit weight (Quantized8Weight) runs the q8gemm op's kernels up to 64 rows, the GEMM past them.

    Where autograd records the call (an input requires a gradient, outside torch.no_grad() and
    inference_mode()), y carries its gradient function as F.linear's does: dX through our GEMM, dW
    through torch's matmul, db a sum (autotune/runtime/linear_grad.py); an int4 weight is frozen."""
    quantized = isinstance(weight, QUANTIZED_TYPES)
    # Written out, not a function: in eager decode every Python call of a linear() costs host time.
    if (
        getattr(x, "requires_grad", False)
        or getattr(bias, "requires_grad", False)
        or getattr(weight._buffers["scales"] if quantized else weight, "requires_grad", False)
    ) and _recording():
        from autotune.runtime import linear_grad

        return linear_grad.linear(x, weight, bias, db, quantized, linear, gemm)
    if quantized:
        return _linear_quantized(x, weight, bias, db)
    shape, k = x.shape, weight.shape[-1]
    if bias is None and len(shape) == 2 == len(weight.shape) and shape[1] == k and shape[0] and k and weight.shape[0]:
        # A model's usual call (rows of x, no bias) goes straight to the launch path: in eager mode a
        # decoder step is bound by host time, and the reshapes below cost about as much as a launch.
        # A (1, K) x gives the GEMV's (1, N) y (K > 1: a (1, 1) x is a vector of one); more rows are
        # the GEMM X Wᵀ, already (rows, N).
        if shape[0] > 1:
            return _RUNTIME.gemm(x, weight.T, db=db)
        if k > 1:
            return _RUNTIME.gemv(weight, x, db=db)
    elif (
        bias is None
        and len(shape) == 3
        and shape[0] == 1 == shape[1]
        and shape[2] == k > 1
        and len(weight.shape) == 2
        and weight.shape[0]
    ):
        # A transformers decode step's (batch 1, one token, K) x: the GEMV takes it as it is and
        # gives its (1, 1, N) y, no reshape on either side.
        return _RUNTIME.gemv(weight, x, db=db)
    _check_tensors(x, weight)
    if x.shape[-1] != k:
        raise AutotuneError(f"x has {x.shape[-1]} features, W expects {k} (x: (..., K), W: (N, K))")
    n = weight.shape[0]
    rows = x.numel() // k if k else 0
    out_shape = (*x.shape[:-1], n)
    sizes = (("K (x's and W's columns)", k), ("N (W's rows)", n), ("x's rows", rows))
    empty = [name for name, size in sizes if not size]
    if empty:
        raise AutotuneError(f"linear of x {tuple(x.shape)} and W {tuple(weight.shape)}: {empty[0]} is empty")
    if bias is not None and getattr(bias, "shape", None) != (n,):
        _check_odd_bias(bias, n, "W's")
    if rows == 1:
        vector = x.reshape(k)
        if bias is None:
            return _RUNTIME.gemv(weight, vector, db=db).reshape(out_shape)
        # A new y holding the bias (broadcast, as F.linear does, where it is one value), which the
        # kernel reads (beta = 1) and overwrites: never the caller's bias itself.
        y = bias.new_empty(n)
        y.copy_(bias)
        _RUNTIME.gemv(weight, vector, out=y, beta=1.0, db=db)
        return y.reshape(out_shape)
    x2 = x.reshape(rows, k)
    if bias is None:
        return _RUNTIME.gemm(x2, weight.T, db=db).reshape(out_shape)
    c = bias.expand(rows, n).contiguous()
    _RUNTIME.gemm(x2, weight.T, out=c, beta=1.0, db=db)
    return c.reshape(out_shape)


def _check_odd_bias(bias: Any, n: int, whose: str) -> None:
    """A bias of another shape than (N,): one value for all outputs ((), (1,)) as F.linear takes it,
    else refused, as is a bias that is no tensor (a float, a list)."""
    shape = getattr(bias, "shape", None)
    if not hasattr(bias, "new_empty") or shape is None:
        raise AutotuneError(f"bias is {type(bias).__name__}: give a tensor of shape ({n},), or None")
    if tuple(shape) not in ((), (1,)):
        raise AutotuneError(
            f"bias has shape {tuple(shape)}: {whose} outputs take ({n},), or one value (shape () or (1,))"
        )


def _check_tensors(x: Any, weight: Any) -> None:
    """linear's x and W as F.linear takes them: torch tensors, x of at least one dimension, W of two
    (other arrays go to autotune.gemv and gemm, which take torch, cupy and PyCUDA arrays)."""
    for name, value in (("x", x), ("W", weight)):
        if not hasattr(value, "numel") or not hasattr(value, "shape"):
            raise AutotuneError(
                f"{name} is {type(value).__name__}: linear takes torch tensors (gemv() and gemm() take other arrays)"
            )
    if len(x.shape) == 0 or len(weight.shape) != 2:
        raise AutotuneError(f"linear takes x (..., K) and W (N, K), got x {tuple(x.shape)} and W {tuple(weight.shape)}")


def _recording() -> bool:
    """Whether torch's autograd records operations here (a tensor that requires a gradient means
    torch is imported already)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.is_grad_enabled())


def _linear_quantized(x: Any, weight: Any, bias: Any, db: str | None) -> Any:
    """linear() with an int4 or 8-bit weight: x (..., K) in the scales' dtype."""
    # In eager mode a decoder step is bound by host time, so every launch reads the least it can.
    # The buffers come from the module's own dict: weight.scales would run nn.Module.__getattr__, a
    # Python call per buffer. .to() and load_state_dict replace buffers within that same dict, so
    # it is never stale. The sizes are plain attributes; the `shape` property builds a torch.Size.
    buffers = weight._buffers
    scales = buffers["scales"]
    options = weight.__dict__.get("options")  # an 8-bit weight's (kind,) for the q8gemm op; int4: none
    op: Op
    if options is None:
        op, what, most = qgemm.OP, "int4", qgemm.MAX_M
    else:
        op, what, most = q8gemm.OP, options[0], q8gemm.LINEAR_MAX_M
    n, k = weight.out_features, weight.in_features
    shape = x.shape
    if not shape or shape[-1] != k:
        got = shape[-1] if shape else "no"
        raise AutotuneError(f"x has {got} features, the {what} weight expects {k} (x: (..., K), W: (N, K))")
    if x.dtype != scales.dtype:
        raise AutotuneError(f"x is {x.dtype}, the {what} weight's scales {scales.dtype}: cast x (or quantize for it)")
    if bias is not None and getattr(bias, "shape", None) != (n,):  # inline: a decode step pays each call
        _check_odd_bias(bias, n, f"the {what} weight's")
    rows = shape[0] if len(shape) == 2 else x.numel() // k
    if rows == 0:
        raise AutotuneError(f"linear of x {tuple(shape)} and an {what} weight: x has no rows")
    if rows > most:
        # A prefill's batch: the GEMM's tensor cores in the activations' dtype beat any low-bit kernel
        # here, so the dense weight is made (int4: one kernel writes the bits of weight.dequantize(),
        # which takes several torch kernels and temporaries) and the dense linear runs on it.
        if options is None:
            packed = (buffers["qweight"], scales, buffers["zeros"])
            dense = _RUNTIME._call(qdequant.OP, packed, None, 1.0, 0.0, None, db, ())
        else:
            dense = weight.dequantize()
        return linear(x, dense, bias, db=db)
    # x goes in as it is, in any shape (..., K): the op reads its leading dimensions as rows and
    # makes the output (..., N), so a (K,) vector or a (1, 1, K) decode step costs no reshape on
    # either side. contiguous() is x itself where x is.
    if options is None:
        arrays: tuple[Any, ...] = (x.contiguous(), buffers["qweight"], scales, buffers["zeros"])
    else:
        arrays = (x.contiguous(), buffers["qweight"], scales)
    if bias is None:
        return _RUNTIME._call(op, arrays, None, 1.0, 0.0, None, db, options or ())
    # A new C holding the bias, which the kernel reads (beta = 1) and overwrites. Not
    # bias.expand(...).contiguous(): for one row that view counts as contiguous already, and the
    # kernel would write into the caller's bias.
    out = bias.new_empty((*shape[:-1], n))
    out.copy_(bias)
    return _RUNTIME._call(op, arrays, out, 1.0, 1.0, None, db, options or ())


# torch's custom ops (autotune/runtime/torch_ops.py), below this module, launch through these.
process.install(process.Surface(launch_path, linear))


# The weight formats quantize() makes (docs/lowbit.md), and the types of weights linear() runs in
# them (QuantizedWeight adds itself when autotune/model/quantized.py is imported: it needs torch).
# linear() reads of such a weight its out_features and in_features, its buffers in `_buffers`
# (torch.nn.Module's: qweight, scales and zeros).
QUANTIZED_FORMATS = ("int4",)  # what patch(weights=...) quantizes to, and quantize
EIGHT_BIT_FORMATS = ("int8", "fp8")  # quantize's and patch's too
QUANTIZED_TYPES: tuple[type, ...] = ()


def linear_takes(weight_type: type) -> None:
    """Make linear(x, weight) take a low-bit weight module of `weight_type` as W (model/quantized.py's
    and quantized8.py's call it on import: this module cannot name their classes, which need torch)."""
    global QUANTIZED_TYPES
    if weight_type not in QUANTIZED_TYPES:
        QUANTIZED_TYPES = (*QUANTIZED_TYPES, weight_type)


def quantize(weight: Any, format: str = "int4", *, group: int = 128, sym: bool = True, scale_dtype: Any = None) -> Any:
    """A float weight (N, K) in nn.Linear's layout -> its low-bit form (docs/lowbit.md). "int4": the
    canonical int4 format, a torch tensor giving a QuantizedWeight module, a numpy array an Int4Weight;
    groups of `group` (32, 64 or 128) along K, symmetric or with a zero per group. "int8" or "fp8" (float8
    e4m3): one byte a weight and one scale a row, symmetric (group and sym do not apply), a tensor giving a
    Quantized8Weight module, a numpy array a Weight8. The scales are in `scale_dtype`, by default a
    float16 or bfloat16 tensor's own dtype, else float16."""
    if format not in QUANTIZED_FORMATS + EIGHT_BIT_FORMATS:
        known = ", ".join(QUANTIZED_FORMATS + EIGHT_BIT_FORMATS)
        raise AutotuneError(f"unknown weight format {format!r}: quantize knows {known}")
    from autotune.ops.qgemm import format as int4

    if format in EIGHT_BIT_FORMATS:
        if (group, sym) != (128, True):
            raise AutotuneError(f"{format} weights have one scale a row and no zero points: leave group and sym out")
        if int4.is_torch_tensor(weight):
            from autotune.model.quantized8 import Quantized8Weight

            return Quantized8Weight.from_float(weight, format, scale_dtype)
        from autotune.ops.q8gemm import format as eight_bit

        return eight_bit.quantize8(weight, format, scale_dtype or "float16")
    if int4.is_torch_tensor(weight):
        from autotune.model.quantized import QuantizedWeight

        return QuantizedWeight.from_float(weight, group, sym, scale_dtype)
    return int4.quantize_int4(weight, group, sym, scale_dtype)


def from_awq(qweight: Any, qzeros: Any, scales: Any, group: int, *, version: str = "gemm") -> Any:
    """An AWQ checkpoint's linear (AutoAWQ's "gemm" packing: qweight K x N/8 int32, qzeros, float16
    scales) -> the same weight in the canonical int4 format, bit for bit the values AWQ's own unpack
    gives: torch tensors give a QuantizedWeight on their device, numpy arrays an Int4Weight
    (docs/lowbit.md, "AWQ and GPTQ checkpoints"). Other versions are refused."""
    from autotune.ops.qgemm import format as int4

    if int4.is_torch_tensor(qweight):
        from autotune.model.quantized import QuantizedWeight

        return QuantizedWeight.from_awq(qweight, qzeros, scales, group, version)
    from autotune.ops.qgemm import checkpoints

    return checkpoints.from_awq(qweight, qzeros, scales, group, version)


def from_gptq(
    qweight: Any,
    qzeros: Any,
    scales: Any,
    g_idx: Any = None,
    group: int = 128,
    sym: bool | None = None,
    checkpoint_format: str = "gptq",
) -> Any:
    """A GPTQ checkpoint's linear (qweight K/8 x N int32, qzeros, scales, g_idx) -> the canonical int4
    weight, exactly; checkpoint_format "gptq" (v1: zeros stored minus one) or "gptq_v2". A g_idx
    other than k // group (act-order) is refused; sym=True checks that every zero is 8. Torch
    tensors give a QuantizedWeight, numpy arrays an Int4Weight (docs/lowbit.md)."""
    from autotune.ops.qgemm import format as int4

    if int4.is_torch_tensor(qweight):
        from autotune.model.quantized import QuantizedWeight

        return QuantizedWeight.from_gptq(qweight, qzeros, scales, g_idx, group, sym, checkpoint_format)
    from autotune.ops.qgemm import checkpoints

    return checkpoints.from_gptq(qweight, qzeros, scales, g_idx, group, sym, checkpoint_format)


def load_quantized(
    path: Path | str,
    *,
    format: str | None = None,
    group: int | None = None,
    sym: bool | None = None,
    checkpoint_format: str | None = None,
    device: Any = None,
) -> dict[str, Any]:
    """Every int4 linear of an AWQ or GPTQ safetensors file or folder -> {module name: QuantizedWeight
    on `device`}, for autotune.patch(model, weights=...). The folder's config.json says the format;
    the arguments override it (docs/lowbit.md). Needs torch; without it, read_checkpoint in
    autotune/ops/qgemm/checkpoints.py gives Int4Weights of numpy arrays."""
    from autotune.model.quantized import QuantizedWeight
    from autotune.ops.qgemm import checkpoints

    weights = checkpoints.read_checkpoint(
        path, format=format, group=group, sym=sym, checkpoint_format=checkpoint_format
    )
    return {name: QuantizedWeight.from_int4(weight, device) for name, weight in weights.items()}


def patch(
    model: Any,
    weights: str | Mapping[str, Any] | None = None,
    *,
    group: int = 128,
    sym: bool = True,
    fuse: bool = False,
    db: str | None = None,
) -> Any:
    """Run a torch model's linears on our kernels; returns the model, changed in place (docs/models.md).

    Each module of type exactly nn.Linear, wherever it sits (a peft LoRA layer's base_layer and
    adapters too), keeps its weight and bias Parameters (ties hold, state_dict keys stay) and runs
    autotune.linear where its weight is on a GPU (torch.ops.autotune.linear under torch.compile),
    F.linear elsewhere. nn.Linear subclasses (bitsandbytes' quantized layers) and modules whose
    forward is replaced on the instance are left as they are, each with a log line; modules already
    patched stay as they are. Weights on the meta device are refused before anything changes, but
    for those a `weights` mapping replaces.

    `weights` may also map module names to QuantizedWeights (autotune.load_quantized's, an AWQ or
    GPTQ checkpoint's): those linears run them, their float weights dropped, the rest in float.
    `weights="int4"` quantizes each weight (QuantizedWeight.from_float, groups of `group` along K,
    `sym`) and drops the float one; a tied weight, peft's LoRA adapters, float32 weights and K not a
    multiple of `group` stay in float. `weights="int8"` or `"fp8"` does the same with an 8-bit weight
    (Quantized8Weight.from_float: a scale a row; K a multiple of 16; fp8 runs on sm_89 and newer).
    `fuse` runs sibling projections reading one input (q_proj/k_proj/v_proj, gate_proj/up_proj) as one
    launch on their concatenated weight, whose views the siblings' weights become. `db` is the database
    eager calls select from (a compiled graph's op uses the default)."""
    if not isinstance(weights, Mapping) and weights not in (None, *QUANTIZED_FORMATS, *EIGHT_BIT_FORMATS):
        formats = ", ".join(repr(f) for f in (None, *QUANTIZED_FORMATS, *EIGHT_BIT_FORMATS))
        raise AutotuneError(f"unknown weights {weights!r}: patch takes {formats}")
    from autotune.ops.qgemm import format as int4

    int4.check_group(group)
    from autotune.model import patch as patching

    return patching.patch(model, weights, group, bool(sym), bool(fuse), db)


def tune_model(
    model: Any,
    example_inputs: Any,
    *,
    decode_steps: int = 1,
    trials: int = 32,
    timeout: float | None = None,
    patience: int | None = DEFAULT_PATIENCE,
    db: str | None = None,
    export: Path | str | None = None,
    show: bool = True,
) -> Any:
    """Run a patched model once as it will run (a prefill and `decode_steps` decode steps where it has
    transformers' `generate`, else one forward call on `example_inputs`), then sweep each GEMV/GEMM
    problem its linears met that this GPU has not tuned (`trials` each, within `timeout` seconds for all
    of them), with progress bars and a closing table (`show`); `export` writes their records for
    `autotune import`. Returns a ModelTuning (autotune/model/tune.py; docs/models.md)."""
    from autotune.model import tune

    return tune.tune_model(
        model,
        example_inputs,
        decode_steps=decode_steps,
        trials=trials,
        timeout=timeout,
        patience=patience,
        db=db,
        export=export,
        show=show,
    )


def unpatch(model: Any) -> Any:
    """Undo autotune.patch: each patched linear becomes a plain nn.Linear again, with the same
    Parameters; an int4 one gets its weight dequantized to a new float Parameter in the scales' dtype
    (the float weight quantized away is not restored). Returns the model, changed in place."""
    from autotune.model import patch as patching

    return patching.unpatch(model)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """One kernel a problem will run on one GPU, and where `prepare` found it."""

    problem: Problem
    gpu: str
    source: str  # the selector's: measured, estimate or default
    kernel: str  # the extern "C" name
    arch: str  # nvcc's target ("sm_90", "sm_90a")
    unaligned: bool  # the scalar-load stand-in for arrays that are not 16-byte aligned
    origin: str  # shipped, cached or compiled


def problems(
    op: str | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    shapes_file: Path | None = None,
    inputs: Inputs = (),
    variant: str = "",
) -> list[Problem]:
    """Checked problems, as a sweep takes them: one shape, a shapes file, or the op's standard set."""
    return problems_for(op, dtype, m, n, shapes_file, k, trans, inputs=inputs, variant=variant)


def stored_problems(
    op: str | None = None, dtype: str | None = None, *, gpu: str | None = None, db: str | None = None
) -> list[Problem]:
    """The problems the database holds (for `gpu` where given, of `op`/`dtype` where given), each once."""
    rows = list_problems(gpu, op, dtype, db)
    return list(dict.fromkeys(row.problem for row in rows if row.op in ops.names()))


def prepare(
    wanted: Sequence[Problem], *, gpu: str | None = None, device: int = 0, db: str | None = None
) -> list[Prepared]:
    """Have every kernel `wanted` will run (the selected config, and its stand-in for unaligned
    arrays) ready on disk, for GPU `device` of this machine, or the GPU named `gpu`, or on a machine
    without a GPU every GPU the database holds: shipped kernels are unpacked into the kernel cache,
    others found there or compiled into it by nvcc. Touches no GPU; warmup() loads them."""
    from autotune.build.shipped import find_kernel
    from autotune.runtime.shipset import Use, unaligned

    database = _SESSION.store(db)
    capabilities = {row.name: row.compute_capability for row in database.gpus()}
    if gpu is not None:
        name, _ = resolve_gpu(gpu, list(capabilities))
        capability = capabilities.get(name) or gpu_capability(name)
        if capability is None:
            raise AutotuneError(f"no compute capability is known for {name!r}: name a GPU the database holds")
        targets = [(name, capability)]
    elif (local := _local_target(device)) is not None:
        targets = [local]
    elif capabilities:
        targets = sorted(capabilities.items())
    else:
        raise AutotuneError("no NVIDIA GPU on this machine and none in the database: name one with --gpu")
    done = []
    for name, capability in targets:
        for problem in wanted:
            # Our kernel, also where cuBLAS answers: it runs wherever that library is missing.
            choice = _SESSION.selector(db).choose(problem, name, vendor=False)
            use = Use(name, capability, problem, choice.config, choice.source, False)
            for each in (use, unaligned(use)):
                if each is None:
                    continue
                job = each.job()
                kernel = find_kernel(job)
                done.append(Prepared(problem, name, each.source, job.name, job.arch, each.unaligned, kernel.origin))
    return done


def _local_target(device: int) -> tuple[str, str] | None:
    """(name, compute capability) of GPU `device` of this machine, through nvidia-smi."""
    from autotune.core.fingerprint import local_compute_capabilities

    found, capabilities = local_gpus(), local_compute_capabilities()
    if not found:
        return None
    if not 0 <= device < min(len(found), len(capabilities)):
        raise AutotuneError(f"GPU {device} does not exist ({len(found)} found)")
    return found[device].name, capabilities[device]


def warmup(
    gemv: Sequence[tuple[Any, ...]] = (),
    gemm: Sequence[tuple[Any, ...]] = (),
    *,
    trans: bool = False,
    problems: Sequence[Problem] = (),
    device: int = 0,
    captures: int = 1,
    db: str | None = None,
) -> None:
    """Make later calls cheap and safe to capture into CUDA graphs: for each `gemv` (A, x) and `gemm`
    (A, B) pair, select the config, compile and load its kernel, run it once on the current stream
    (into a new output) and set aside split-K scratch for `captures` graph captures; for each of
    `problems` (autotune.problems() makes them), select, find or compile and load on GPU `device`
    (`autotune warmup` does the same from the command line). Call it before capturing."""
    runtime = _RUNTIME
    for pair in gemv:
        runtime.gemv(*pair[:2], trans=trans, db=db)
    for pair in gemm:
        runtime.gemm(*pair[:2], db=db)
    for problem in problems:
        target = runtime.device(device)
        choice = choose_on(problem, target, db)
        runtime.plan(choice, target, True)  # its kernel found (shipped, cached or compiled) and loaded
        runtime.warmup_scratch(choice, target, captures)
    for signature in runtime.signatures():
        runtime.warmup_scratch(signature.choice, signature.device, captures, signature.leading)


def _filters(op: str | None, dtype: str | None) -> tuple[str | None, str | None]:
    """(op, dtype) filters, None meaning any: a bare `gemv` is every dtype, `hgemv` only float16."""
    if op is None and dtype is None:
        return None, None
    name, kind = resolve_op(op or "gemv", dtype)
    bare = (op or "gemv").strip().lower() == name
    return name, kind if (dtype is not None or not bare) else None


def list_problems(
    gpu: str | None = None,
    op: str | None = None,
    dtype: str | None = None,
    db: str | None = None,
    variant: str = "",
) -> list[Any]:
    """One summary per tuned problem, optionally for one GPU, op, dtype or variant ('g128')."""
    name, kind = _filters(op, dtype)
    if variant:
        _check_variant_filter(variant, name)
    database = _SESSION.store(db)
    gpu_name = stored_gpu(gpu, database.gpu_names()) if gpu is not None else None
    rows: list[Any] = database.problems(gpu_name, name, kind)
    return [r for r in rows if r.problem.variant == variant] if variant else rows


def _check_variant_filter(variant: str, op_name: str | None) -> None:
    """A variant to list by: one the op defines, or, without an op, one some registered op defines."""
    owners = [name for name in ops.names() if variant in ops.get(name).variants]
    if op_name is not None and op_name not in owners:
        defined = ops.get(op_name).variants
        raise AutotuneError(
            f"unknown variant {variant!r} of {op_name}: "
            + (f"choose one of {', '.join(defined)}" if defined else f"{op_name} has no variants")
        )
    if not owners:
        known = sorted({v for name in ops.names() for v in ops.get(name).variants})
        raise AutotuneError(f"no op defines a variant {variant!r}: the variants are {', '.join(known)}")


def listed_choices(rows: Sequence[Any], db: str | None = None) -> list[Choice]:
    """`best`'s answer for each row of list_problems(), from the same Selector (so where cuBLASLt's
    time ties ours within choose.VENDOR_MARGIN, ours, as `best` says), over one snapshot of the
    database held as a selection table: one read, where asking the store takes two queries a problem.
    This machine's GPU is asked about with its driver and CUDA, as `best` without --gpu asks."""
    selector = Selector(table.in_memory(_SESSION.store(db).selection_rows(table.PER_SOURCE)))
    local = _local_gpu()
    cuda = cuda_release() if local is not None else None

    def here(gpu_name: str) -> tuple[str | None, str | None]:
        return (local.driver, cuda) if local is not None and gpu_name == local.name else (None, None)

    return [selector.choose(r.problem, r.gpu_name, *here(r.gpu_name)) for r in rows]


def queued(gpu: str | None = None, db: str | None = None) -> list[Any]:
    """The queue a fleet shares: every queued problem (of one GPU model) with its state and counts."""
    database = _SESSION.store(db)
    gpu_name = match_gpu(gpu, database.gpu_names()) if gpu else None
    rows: list[Any] = database.queue_rows(gpu_name)
    return rows


def enqueue(
    gpu: str,
    op: str | None = None,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    shapes_file: Path | None = None,
    db: str | None = None,
    inputs: Inputs = (),
    variant: str = "",
) -> int:
    """Queue problems for GPUs named `gpu` (`sweep --pending` on such a machine tunes them); the
    standard shape set when no shape is given. Returns how many problems were given."""
    if not gpu or not gpu.strip():
        raise AutotuneError("queueing needs the GPU model the problems are for: --gpu 'NVIDIA H200', say")
    problems = problems_for(op, dtype, m, n, shapes_file, k, trans, inputs=inputs, variant=variant)
    database = _SESSION.store(db)
    known = database.gpu_names()
    name = match_gpu(gpu.strip(), known)
    if name not in known:
        name = _described_or_new_gpu(name)
    database.enqueue(name, problems)
    return len(problems)


def _described_or_new_gpu(wanted: str) -> str:
    """A GPU model the database holds nothing of yet: the described or local model it names ('h200':
    NVIDIA H200, as nvidia-smi names it, which is what a machine claims by), else the name itself,
    checked as a records file's GPU line is (at most 200 printable characters) and warned about: a
    typo ('NVIDIA H2000') would queue problems no machine ever claims."""
    if len(wanted) > 200 or not wanted.isprintable():
        raise AutotuneError(f"--gpu '{printable(wanted[:80])}' is no GPU name: at most 200 printable characters")
    named = _model_named(wanted, ())
    if named is not None:
        return named
    warnings.warn(
        f"no GPU the database holds, db/gpus.json describes or this machine has is named {wanted!r}: queued"
        " all the same, for machines that claim by that nvidia-smi name",
        AutotuneWarning,
        stacklevel=3,
    )
    return wanted


def problem_trials(
    op: str | None,
    m: int,
    n: int,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    gpu: str | None = None,
    db: str | None = None,
    inputs: Inputs = (),
    variant: str = "",
) -> tuple[Problem, list[tuple[str, list[Any]]]]:
    """Every stored trial of one problem, fastest first, per GPU: of the GPU named (one the database
    holds), else of this machine's GPU, else (as `best` answers) of every GPU the database holds."""
    problem = _problem(op, dtype, m, n, k, trans, inputs, variant)
    database = _SESSION.store(db)
    known = database.gpu_names()
    if gpu is not None:
        names = [stored_gpu(gpu, known)]
    elif (local := local_gpu_name()) is not None:
        names = [local]
    elif known:
        names = known
    else:
        raise AutotuneError("no NVIDIA GPU on this machine and nothing tuned yet: name a GPU with --gpu")
    found = []
    for name in names:
        problem_id = database.problem_id(problem, name, create=False)
        found.append((name, [] if problem_id is None else list(database.trials(problem_id))))
    return problem, found


def bench(
    op: str | None,
    m: int,
    n: int,
    k: int | None = None,
    *,
    trans: bool = False,
    dtype: str | None = None,
    db: str | None = None,
) -> tuple[Any, float, Choice]:
    """Time the selected config for this shape beside cuBLAS (torch) on this machine's GPU, with the
    same method and buffers; returns (BenchRow or GemmRow, copy bandwidth GB/s, the choice timed)."""
    problem = _problem(op, dtype, m, n, k, trans)
    if problem.op not in ("gemv", "gemm"):  # cuBLAS has no counterpart to time beside
        raise AutotuneError(f"bench times GEMV and GEMM beside cuBLAS, not {problem.blas_name}")
    from autotune.bench.compare import Bench

    runner = Bench()
    choice = choose_on(problem, runner.device, db)
    if ops.for_problem(problem).compute_bound:  # rated in TFLOP/s beside cuBLAS's GEMM
        return runner.compare_gemm(choice), runner.copy_gbs(), choice
    row = runner.compare(choice)
    floor = runner.read_floor(problem.matrix_bytes)
    # Kept beside the trials, so that listings and reports can set results against it.
    store(db).record_read_floor(runner.launcher.gpu, problem.matrix_bytes, floor.us, floor.kernel)
    row.set_floor(floor)
    copy_gbs = runner.copy_gbs()
    row.pct_copy = 100.0 * row.ours_gbs / copy_gbs
    return row, copy_gbs, choice
