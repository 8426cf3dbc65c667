"""Which kernels ship precompiled (db/kernels/): every config the shipped records can select.

- For each GPU of the records (H100 and H200, compute capability 9.0), what the selector answers for
  each problem the records hold (its best config) and for each standard problem (every shape of
  ops.standard_shapes, in every dtype and, for GEMV, both layouts): measured, fitted from the
  nearest tuned shape, or the op's default.
- For a GPU the records do not name, of compute capability 8.0, 8.9 or 9.0 (an A100, an L40S, an
  H20), the default config of each standard problem: what the selector answers there.
- For each of these, the config the launcher runs where the arrays are not 16-byte aligned
  (launcher.scalar_loads).

Any other shape gets the config the selector fits from its nearest tuned shape; where that config
is not among these, nvcc builds it (autotune/build/shipped.py: find_kernel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune import ops
from autotune.build.compiler import CompileJob
from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.core.space import Config, config_key
from autotune.core.target import targeting
from autotune.runtime.launcher import scalar_loads  # the launch path's own choice for unaligned arrays
from autotune.select.choose import DEFAULT, Selector
from autotune.store import selection_table

if TYPE_CHECKING:
    from autotune.store.store import Store

UNNAMED_CAPABILITIES = ("8.0", "8.9", "9.0")  # GPUs the records do not name: defaults only


def arch_of(capability: str) -> str:
    """nvcc's target of a compute capability: "9.0" -> "sm_90"."""
    return "sm_" + capability.replace(".", "")


@dataclass(frozen=True)
class Use:
    """One config the launch path may run: for `problem` on a GPU of `capability`, as `source` chose it."""

    gpu: str  # the records' GPU name, "" for a GPU they do not name
    capability: str
    problem: Problem
    config: Config
    source: str  # the selector's: measured, estimate or default
    unaligned: bool  # the launcher's stand-in with scalar loads (arrays not 16-byte aligned)

    def job(self) -> CompileJob:
        """The nvcc job the launcher builds for this use (ops.compile_job under the GPU's target)."""
        with targeting(self.capability):
            op = ops.for_problem(self.problem)
            if self.unaligned:
                op = op.for_unaligned(self.problem)
            return ops.compile_job(self.problem, self.config, arch_of(self.capability), op)

    def to_dict(self) -> dict[str, Any]:
        p = self.problem
        problem: dict[str, Any] = {"op": p.op, "dtype": p.dtype, "m": p.m, "n": p.n, "k": p.k, "trans": p.trans}
        if p.inputs:  # only where named, so that the list of plain problems keeps its bytes
            problem["inputs"] = list(p.inputs)
        if p.variant:
            problem["variant"] = p.variant
        return {
            "gpu": self.gpu,
            "capability": self.capability,
            "problem": problem,
            "config": dict(self.config),
            "source": self.source,
            "unaligned": self.unaligned,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Use:
        return cls(
            data["gpu"],
            data["capability"],
            Problem(**{**data["problem"], "inputs": tuple(data["problem"].get("inputs", ()))}),
            dict(data["config"]),
            data["source"],
            data["unaligned"],
        )


def standard_problems() -> list[Problem]:
    """Every standard shape of the shipped ops, in every dtype and (GEMV) both layouts."""
    found = []
    for name in ops.shipped():
        layouts = (False, True) if ops.get(name).transposable else (False,)
        for dtype in ops.get(name).dtypes:
            for trans in layouts:
                for shape in ops.standard_shapes(name):
                    k = shape[2] if len(shape) > 2 else None
                    found.append(ops.make_problem(name, dtype, shape[0], shape[1], k, trans))
    return found


def uses(store: Store) -> list[Use]:
    """Every config the records in `store` can select, aligned and unaligned, each once per GPU
    target (the records' GPUs first). The selector reads one snapshot of the store held as a selection
    table (the same answers; tests/test_shipped.py compares them), where asking the store itself takes
    queries a problem: 1.7 s instead of 11 for the shipped records."""
    selector = Selector(selection_table.in_memory(store.selection_rows(selection_table.PER_SOURCE)))
    standard = standard_problems()
    chosen: list[Use] = []
    shipped_ops = ops.shipped()
    for name, capability in sorted({row.name: row.compute_capability for row in store.gpus()}.items()):
        stored = [row.problem for row in store.problems(name) if row.op in shipped_ops]
        for problem in [*stored, *standard]:
            choice = selector.choose(problem, name, vendor=False)  # our kernel, also where cuBLAS won
            chosen.append(Use(name, capability, problem, choice.config, choice.source, False))
    for capability in UNNAMED_CAPABILITIES:
        with targeting(capability):
            for problem in standard:
                default = ops.for_problem(problem).default_config(problem)
                chosen.append(Use("", capability, problem, default, DEFAULT, False))
    stand_ins = [unaligned(use) for use in chosen]
    return _unique([*chosen, *(use for use in stand_ins if use is not None)])


def unaligned(use: Use) -> Use | None:
    """The use the launcher runs in `use`'s place on arrays that are not 16-byte aligned."""
    with targeting(use.capability):
        try:
            _, config = scalar_loads(use.problem, use.config)
        except AutotuneError:
            return None
    return Use(use.gpu, use.capability, use.problem, config, use.source, True)


def _unique(found: list[Use]) -> list[Use]:
    seen: dict[tuple[str, Problem, str, bool], Use] = {}
    for use in found:
        seen.setdefault((use.capability, use.problem, config_key(use.config), use.unaligned), use)
    return list(seen.values())
