"""Run a selection script with the cost model's waves rule speaking for the plain GEMV family: its kernels'
registers from ptxas's counts (experiments/gemv_registers_sm90.json, written by count_gemv_registers.py),
and the rule only where the config ran latency-bound on the tuned shape it is carried from (its time there
above --bound times the roofline's), since a GEMV at the bandwidth wall takes a second wave of blocks
without taking twice as long (docs/findings.md).

    python experiments/gemv_waves_rule.py eval_cost_model --out /tmp/loso
    python experiments/gemv_waves_rule.py bench_select --dry-run --gpu "NVIDIA H200"
    python experiments/gemv_waves_rule.py bench_select --dry-run --changed-state state.json   # then on the GPU:
    python experiments/gemv_waves_rule.py bench_select --out OUT --resume state.json
"""

from __future__ import annotations

import json
import runpy
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.ops.gemv import Gemv
from autotune.select import cost

HERE = Path(__file__).resolve().parent
BOUND = 1.5


def install(registers: Mapping[str, int], bound: float = BOUND) -> None:
    Gemv.registers = lambda self, problem, config: registers.get(self.kernel_name(problem, config))  # type: ignore[method-assign]
    plain = cost.CostModel._more_waves_floor

    def latency_bound_only(self: Any, problem: Any, config: Any, stored: Any) -> Any:
        there = cost._nearest(stored, problem)
        if there is None:
            return None
        if isinstance(ops.for_problem(problem), Gemv) and stored[there] < bound * self.roofline.time_us(there):
            return None
        return plain(self, problem, config, stored)

    cost.CostModel._more_waves_floor = latency_bound_only  # type: ignore[method-assign]


def main() -> None:
    script, *args = sys.argv[1:]
    install(json.loads((HERE / "gemv_registers_sm90.json").read_text())["registers"])
    sys.argv = [f"{script}.py", *args]
    runpy.run_path(str(HERE.parent / "scripts" / f"{script}.py"), run_name="__main__")


if __name__ == "__main__":
    main()
