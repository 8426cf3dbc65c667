"""The runtime selector: which config for this problem on this GPU? The exact measurement, else the
candidate the cost model (cost.py) predicts fastest, else the nearest tuned shape's config, else the
default."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune import ops
from autotune.core import gpus
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.core.target import targeting
from autotune.ops import cublas, source_hash
from autotune.select.cost import CostModel, Prediction, Timed, shape_distance

# The selection policy is the one place outside its folder that knows the `cublas` family is the
# vendor's: it takes cuBLASLt only where that beats our kernels by VENDOR_MARGIN (or where nothing of
# ours is known), and answers it from the library's own heuristic where it cannot tell.
VENDOR = cublas.FAMILY
vendor_config = VENDOR.config

# Stored trials per tuned shape the cost model learns from: what the shipped records keep, and what
# it was judged on (scripts/eval_cost_model.py).
EVIDENCE_TOP = 3

MEASURED, ESTIMATE, DEFAULT = "measured", "estimate", "default"
# Further than this (shape_distance, octaves) from every tuned shape of its kernel family, a shape gets
# cuBLASLt's own pick where the library is there: the cost model's corrections are learned among the
# tuned shapes (its weights fall off with a width of 0.5 octaves). On the held-out GEMVs 5.1-9.4 octaves
# out its picks ran 0.41-1.53x cuBLAS, 8 of 12 slower (docs/findings.md).
EXTRAPOLATION_OCTAVES = 4.0
# cuBLASLt answers a tuned shape only where its stored best is more than this much faster than ours:
# within it the two tie under measurement noise (cuBLASLt's algorithms timed again on fresh buffers
# moved its best by -6.3% to +1.2% on 36 GEMMs, docs/findings.md), and a tie goes to our kernel, which
# ships with its record and needs no library load or workspace: a pick stays >= 0.98x cuBLASLt's best.
VENDOR_MARGIN = 0.02


class TunedRow(Protocol):
    """What the selector reads of a stored best trial (autotune.store's BestRow has these fields)."""

    @property
    def m(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def problem(self) -> Problem: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def time_us(self) -> float: ...
    @property
    def gbs(self) -> float | None: ...
    @property
    def driver(self) -> str: ...
    @property
    def cuda(self) -> str: ...
    @property
    def source_hash(self) -> str: ...


class GpuFacts(Protocol):
    """What the selector reads of a stored GPU."""

    @property
    def name(self) -> str: ...
    @property
    def compute_capability(self) -> str: ...
    @property
    def sm_count(self) -> int: ...


class SelectionSource(Protocol):
    """What the selector reads: autotune.store's Store, or a selection table (store/selection_table.py) that holds
    the same rows without the database."""

    def gpus(self) -> Sequence[GpuFacts]: ...
    def best(self, gpu_name: str, problem: Problem, source_hash: str | None) -> TunedRow | None: ...
    def tuned(
        self,
        gpu_name: str,
        op: str,
        dtype: str,
        source_hash: str | None,
        *,
        trans: bool = ...,
        inputs: tuple[str, ...] = ...,
        variant: str = ...,
    ) -> Sequence[TunedRow]: ...
    def vendor_best(self, gpu_name: str, problem: Problem) -> TunedRow | None: ...
    def problem_id(self, problem: Problem, gpu_name: str, *, create: bool = ...) -> int | None: ...
    def leaders(self, problem_id: int, source_hash: str, top: int) -> Sequence[Timed]: ...


@dataclass(frozen=True)
class Choice:
    problem: Problem
    gpu: str
    config: Config
    source: str  # MEASURED for this exact problem, ESTIMATE from a tuned neighbour, or DEFAULT
    time_us: float | None = None  # measured time (for an estimate: the neighbour's, not this shape's)
    gbs: float | None = None
    from_shape: tuple[int, ...] | None = None  # the tuned shape an estimate came from
    notes: tuple[str, ...] = field(default_factory=tuple)
    predicted_us: float | None = None  # the cost model's time for this config on this shape
    basis: str | None = None  # what the prediction is made of (cost.Prediction.basis)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.problem.blas_name,
            "dtype": self.problem.dtype,
            "m": self.problem.m,
            "n": self.problem.n,
            **({"k": self.problem.k} if self.problem.k else {}),
            **({"trans": True} if self.problem.trans else {}),
            **({"inputs": list(self.problem.inputs)} if self.problem.inputs else {}),
            **({"variant": self.problem.variant} if self.problem.variant else {}),
            "gpu": self.gpu,
            "source": self.source,
            "config": self.config,
            "time_us": self.time_us,
            "gbs": self.gbs,
            "from_shape": list(self.from_shape) if self.from_shape else None,
            "predicted_us": self.predicted_us,
            "basis": self.basis,
            "notes": list(self.notes),
        }


def nearest(rows: Sequence[TunedRow], shape: tuple[int, ...]) -> list[TunedRow]:
    """Tuned rows ordered from the nearest shape outwards (the exact shape excluded)."""
    others = [r for r in rows if r.problem.shape != shape and len(r.problem.shape) == len(shape)]
    return sorted(others, key=lambda r: (shape_distance(r.problem.shape, shape), r.problem.shape))


def choose(
    problem: Problem,
    gpu: str,
    exact: TunedRow | None,
    tuned: Sequence[TunedRow],
    notes: Sequence[str] = (),
    model: CostModel | None = None,
) -> Choice:
    """Pure decision: the exact measurement, else the candidate `model` predicts fastest, else (no
    model, or nothing it can rate) the nearest tuned shape's config (moved to the nearest config this
    shape allows where it does not run here as it is), else the default."""
    op = ops.for_problem(problem)
    space = op.space(problem)
    if exact is not None and space.check(exact.config) is None:
        return Choice(problem, gpu, dict(exact.config), MEASURED, exact.time_us, exact.gbs, notes=tuple(notes))
    ranked = model.rank(problem) if model is not None else []
    if ranked:
        return predicted(problem, gpu, ranked[0], len(ranked), notes)
    for row in nearest(tuned, problem.shape):
        fitted = space.fit(row.config)
        if fitted is None:
            continue
        note = f"not tuned for {_text(problem.shape)}: config of the nearest tuned shape {_text(row.problem.shape)}"
        changed = {name: value for name, value in fitted.items() if row.config[name] != value}
        if not changed:
            return Choice(
                problem, gpu, dict(row.config), ESTIMATE, row.time_us, row.gbs, row.problem.shape, (*notes, note)
            )
        # Its time is that of another config: the selector reports none rather than a wrong one.
        was = " ".join(f"{name}={row.config[name]}" for name in changed)
        now = " ".join(f"{name}={value}" for name, value in changed.items())
        note += f", with {now} in place of {was} so that it runs on this shape (never timed so)"
        return Choice(problem, gpu, fitted, ESTIMATE, None, None, row.problem.shape, (*notes, note))
    if tuned:
        note = f"no config tuned for {problem.blas_name} on {gpu} fits {_text(problem.shape)}: safe default config"
    else:
        note = f"nothing tuned for {problem.blas_name} on {gpu}: safe default config"
    return Choice(problem, gpu, op.default_config(problem), DEFAULT, notes=(*notes, note))


def predicted(problem: Problem, gpu: str, best: Prediction, candidates: int, notes: Sequence[str]) -> Choice:
    """The cost model's pick: its predicted time instead of another shape's measured one."""
    origin = best.candidate.origin
    note = f"not tuned for {_text(problem.shape)}: the fastest of {candidates} candidates by the cost model ({origin})"
    source = DEFAULT if origin == "default" else ESTIMATE
    return Choice(
        problem,
        gpu,
        dict(best.config),
        source,
        from_shape=best.candidate.from_shape,
        notes=(*notes, note),
        predicted_us=best.time_us if best.rated else None,
        basis=best.basis,
    )


def vendor_fingerprint() -> str | None:
    """This machine's cuBLASLt as a vendor trial's source hash, None where it has none."""
    return VENDOR.fingerprint()


def vendor_evidence(model: CostModel, timed: dict[Problem, float]) -> dict[Problem, float]:
    """cuBLASLt's times on the tuned shapes that the problem's own kernel family serves (the shapes
    `model` was fitted to), where it holds any: the library, too, runs other kernels at other sizes.
    Timed on every tuned shape of the dtype and layout, the float32 K x N GEMM of 129 x 7001 x 1009 was
    predicted from the few-row odd shapes next to it, where cuBLASLt loses to our skinny kernels, and
    went to our tiled kernel at 0.70x cuBLAS; leaving one shape out over the shipped records
    (scripts/eval_vendor_choice.py) the H200's float32 GEMM regret fell from 6.2% to 2.6%."""
    family = {shape.problem for shape in model.shapes}
    own = {problem: time for problem, time in timed.items() if problem in family}
    return own or timed


def _clearly_faster(vendor: TunedRow, ours: TunedRow | None) -> bool:
    """Whether cuBLASLt's stored time beats our kernels' by more than VENDOR_MARGIN (or ours has none)."""
    return ours is None or vendor.time_us * (1 + VENDOR_MARGIN) < ours.time_us


def _untimed(model: CostModel, problem: Problem, config: Config) -> bool:
    """Whether no tuned shape holds this config among its stored trials, as it would run here."""
    prediction = model.predict(problem, config)
    return prediction is not None and prediction.rated and not prediction.timed_on


def _tuned(store: SelectionSource, gpu: str, problem: Problem, source_hash: str | None) -> Sequence[TunedRow]:
    """The tuned problems of the problem's group: its GPU, op, dtype, layout, input dtypes and variant."""
    return store.tuned(
        gpu, problem.op, problem.dtype, source_hash, trans=problem.trans, inputs=problem.inputs, variant=problem.variant
    )


def _text(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


class Selector:
    """Answers from the store (or a selection table) and remembers every answer for the life of the process."""

    def __init__(self, store: SelectionSource) -> None:
        self._store = store
        self._cache: dict[tuple[Problem, str, str | None, str | None, bool], Choice] = {}
        self._capabilities: dict[str, str | None] = {}
        self._models: dict[tuple[Any, ...], CostModel] = {}
        self._libraries: dict[str, str | None] = {}

    def choose(
        self,
        problem: Problem,
        gpu: str,
        local_driver: str | None = None,
        local_cuda: str | None = None,
        *,
        vendor: bool = True,
    ) -> Choice:
        """`local_driver` and `local_cuda` describe this machine when it has the GPU asked about:
        a measurement taken under another driver or CUDA still answers, with a warning. With
        `vendor` False, among our kernels only (what ships as kernels: cuBLAS ships with CUDA)."""
        key = (problem, gpu, local_driver, local_cuda, vendor)
        if key not in self._cache:
            # The space and kernel family of the GPU asked about, not of this machine's GPU.
            with targeting(self._capability(gpu)):
                self._cache[key] = self._choose(problem, gpu, local_driver, local_cuda, vendor)
        return self._cache[key]

    def _capability(self, gpu: str) -> str | None:
        """The compute capability the database records for GPUs of this name (None if unknown)."""
        if gpu not in self._capabilities:
            found = {row.compute_capability for row in self._store.gpus() if row.name == gpu}
            # A GPU with no row of its own answers as its description says (db/gpus.json).
            self._capabilities[gpu] = found.pop() if len(found) == 1 else gpus.capability(gpu)
        return self._capabilities[gpu]

    def _model(self, problem: Problem, gpu: str, current: str) -> CostModel:
        """The cost model of this GPU, op, dtype, layout and kernel source, fitted once."""
        key = (gpu, problem.op, problem.dtype, problem.trans, problem.inputs, problem.variant, current)
        if key not in self._models:
            stored, others = {}, []
            for row in self._ours(_tuned(self._store, gpu, problem, None), gpu):
                if row.source_hash == current:
                    pid = self._store.problem_id(row.problem, gpu, create=False)
                    if pid is not None:  # a row of a stored problem: it has an id
                        stored[row.problem] = self._store.leaders(pid, current, EVIDENCE_TOP)
                elif row.source_hash == source_hash(row.problem):  # another family's current kernel
                    others.append((row.problem, row.time_us))
            sm_counts = {row.sm_count for row in self._store.gpus() if row.name == gpu}
            sm_count = sm_counts.pop() if len(sm_counts) == 1 else None
            self._models[key] = CostModel(stored, sm_count, roofline_from=others)
        return self._models[key]

    def _ours(self, rows: Sequence[TunedRow], gpu: str) -> list[TunedRow]:
        """The tuned problems' best rows of our kernels: where cuBLASLt was fastest, our kernels' best
        of the problem's current source in its place (the cost model learns our kernels from them)."""
        found = []
        for row in rows:
            if VENDOR.owns_source(row.source_hash):
                ours = self._store.best(gpu, row.problem, source_hash(row.problem))
                if ours is None:
                    continue
                row = ours
            found.append(row)
        return found

    def _choose(
        self, problem: Problem, gpu: str, local_driver: str | None, local_cuda: str | None, vendor: bool
    ) -> Choice:
        current = source_hash(problem)
        exact = self._store.best(gpu, problem, current)
        notes = []
        for what, was, here in (
            ("driver", exact.driver if exact else None, local_driver),
            ("CUDA", exact.cuda if exact else None, local_cuda),
        ):
            if was and here and was != here:
                notes.append(
                    f"measured with {what} {was}, this machine has {here}: re-tune with `autotune sweep --stale`"
                )
        vendor = vendor and VENDOR.enabled()
        if vendor:
            row, why_not = self._vendor(problem, gpu, exact, local_driver)
            if row is not None:
                ours = f"our kernels' best {exact.time_us:.2f} us" if exact else "our kernels not measured"
                notes.append(f"{row.source_hash} measured fastest ({ours})")
                return Choice(problem, gpu, dict(row.config), MEASURED, row.time_us, row.gbs, notes=tuple(notes))
            notes.extend(why_not)
        # The store and the table hand out only rows whose config is in their problem's space
        # (store/queries.py's Admission); a table written under another version's space may not.
        if exact is not None and ops.for_problem(problem).space(problem).check(exact.config) is None:
            # A measured problem: choose() answers with its own trial, neither the other tuned shapes
            # nor the cost model is looked at (a first call of a tuned problem reads nothing more).
            return Choice(problem, gpu, dict(exact.config), MEASURED, exact.time_us, exact.gbs, notes=tuple(notes))
        tuned = _tuned(self._store, gpu, problem, current)
        if not tuned:
            borrowed = self._borrowed(problem, gpu, notes)
            if borrowed is not None:
                return borrowed
        model = self._model(problem, gpu, current)
        choice = choose(problem, gpu, exact, tuned, notes, model)
        if vendor and choice.source != MEASURED:
            library = vendor_fingerprint() if local_driver is not None else self._stored_library(gpu)
            return self._vendor_if_faster(problem, gpu, choice, model, library) or choice
        return choice

    def _borrowed(self, problem: Problem, gpu: str, notes: Sequence[str]) -> Choice | None:
        """Where nothing of the problem's own kind is tuned on `gpu`: the measured config of the first
        problem its op names (Op.estimate_from: the int4 op's other group sizes and activation dtype)
        that this one's space takes."""
        space = ops.for_problem(problem).space(problem)
        op = ops.get(problem.op)
        for sibling in op.estimate_from(problem):
            row = self._store.best(gpu, sibling, source_hash(sibling))
            config = None if row is None else op.carried_over(problem, row.config)
            if row is not None and config is not None and space.check(config) is None:
                note = f"nothing of its kind tuned here: the config measured for {sibling}"
                return Choice(problem, gpu, config, ESTIMATE, row.time_us, row.gbs, row.problem.shape, (*notes, note))
        return None

    def _vendor_if_faster(
        self, problem: Problem, gpu: str, ours: Choice, model: CostModel, fingerprint: str | None
    ) -> Choice | None:
        """On a shape never tuned: cuBLASLt's own pick where the cost model predicts it ahead of our
        candidate (or ours has no prediction), from cuBLASLt's times on the tuned shapes of library
        version `fingerprint` (None: no cuBLASLt answers)."""
        if not VENDOR.serves(problem):
            return None
        if fingerprint is None:
            return None
        nearest = min((shape_distance(s.problem.shape, problem.shape) for s in model.shapes), default=None)
        if nearest is not None and nearest > EXTRAPOLATION_OCTAVES:
            note = (
                f"{_text(problem.shape)} lies {nearest:.1f} octaves from every tuned shape, beyond what the cost "
                f"model learned: cuBLASLt's own pick ({fingerprint})"
            )
            return Choice(problem, gpu, vendor_config(0), ESTIMATE, notes=(*ours.notes[:-1], note))
        if ours.predicted_us is not None and _untimed(model, problem, ours.config):
            # Its prediction rests on other configs' times alone (a neighbour's leader moved onto
            # scalar loads, say): on the held-out short-and-wide GEMVs such picks ran 0.67-0.84x cuBLAS.
            note = (
                f"the cost model's pick for {_text(problem.shape)} was never timed as it would run here: "
                f"cuBLASLt's own pick ({fingerprint})"
            )
            return Choice(problem, gpu, vendor_config(0), ESTIMATE, notes=(*ours.notes[:-1], note))
        rows = _tuned(self._store, gpu, problem, fingerprint)
        timed = vendor_evidence(model, {row.problem: row.time_us for row in rows})
        prediction = model.predict_config_free(problem, timed, vendor_config(0), "cuBLASLt's own pick", "cuBLASLt")
        if prediction is None:
            if ours.source != DEFAULT:
                return None
            # Nothing of ours is known for this dtype and layout, so ours would be the safe default
            # config: cuBLASLt's heuristic, made for every shape, is the better guess (it beat our
            # default on 14 of the 15 held-out GEMMs that got it: docs/findings.md).
            note = f"nothing tuned near {_text(problem.shape)} in {problem.dtype}: cuBLASLt's own pick ({fingerprint})"
            return Choice(problem, gpu, vendor_config(0), DEFAULT, notes=(*ours.notes[:-1], note))
        ours_us = ours.predicted_us
        if ours_us is not None:
            # Our pick's time as its threads' path says, where that is longer (cost.threads_bound_floor).
            ours_us = max(ours_us, model.threads_bound_floor(problem, ours.config) or 0.0)
        if ours_us is not None and ours_us <= prediction.time_us:
            return None
        return predicted(problem, gpu, prediction, len(model.candidates(problem)) + 1, ours.notes[:-1])

    def _stored_library(self, gpu: str) -> str | None:
        """The cuBLASLt version a question about another machine's GPU is answered with, as its
        measured rows are (_vendor): the one most of the GPU's stored cuBLASLt wins were timed with
        (None where none is stored). So `autotune best --gpu` and a dry run of the held-out set answer
        on a machine without that GPU, or without cuBLASLt, as the GPU's machine does."""
        if gpu not in self._libraries:
            found: Counter[str] = Counter()
            for op in ops.names():
                if not VENDOR.serves(Problem(op, "float32", 1, 1)):
                    continue
                for dtype in ("float32", "float16", "bfloat16"):
                    for trans in (False, True):
                        rows = self._store.tuned(gpu, op, dtype, None, trans=trans)
                        found.update(row.source_hash for row in rows if VENDOR.owns_source(row.source_hash))
            self._libraries[gpu] = found.most_common(1)[0][0] if found else None
        return self._libraries[gpu]

    def _vendor(
        self, problem: Problem, gpu: str, ours: TunedRow | None, local_driver: str | None
    ) -> tuple[TunedRow | None, list[str]]:
        """cuBLASLt's stored best where it beat ours by more than VENDOR_MARGIN (the `cublas` family's
        trials), with why it does not answer where it cannot: on this machine's own GPU the library
        must be the version that was timed (its algorithms are replayed by rank). The library is
        loaded only then."""
        row = self._store.vendor_best(gpu, problem)
        if row is None or (ours is not None and ours.time_us <= row.time_us):
            return None, []
        if not _clearly_faster(row, ours):
            return None, [
                f"{row.source_hash} measured {row.time_us:.2f} us, within {VENDOR_MARGIN:.0%} of our kernel: "
                "a tie, which ours takes"
            ]
        if local_driver is None:  # a question about another machine's GPU: its library answers
            return row, []
        here = vendor_fingerprint()
        if here == row.source_hash:
            return row, []
        mine = self._store.best(gpu, problem, here) if here else None  # this version, timed too?
        if mine is not None and _clearly_faster(mine, ours):
            return mine, []
        found = f"{here} here" if here else "no cuBLASLt here"
        return None, [
            f"{row.source_hash} measured {row.time_us:.2f} us, ahead of our kernels, but {found}: "
            "re-tune with `autotune sweep` to time this library"
        ]

    def forget(self) -> None:
        self._cache.clear()
        self._capabilities.clear()
        self._models.clear()
        self._libraries.clear()
