"""Count the registers per thread of every plain GEMV kernel the shipped records hold, as ptxas allocates
them for sm_90 (CPU only: nvcc, no GPU), and write them as JSON {source_hash, registers: {kernel: n}}.

With a block's threads they decide how many blocks an SM holds at once, so how many waves a grid takes:
what the cost model's waves rule (autotune/select/cost.py) needs, and what the GEMV family does not
estimate (Op.registers is None for it). What the counts showed is in docs/findings.md ("Exact register
counts do not make the waves rule fit GEMVs").

    python experiments/count_gemv_registers.py --out /tmp/registers_sm90.json [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from autotune import ops
from autotune.core.fingerprint import file_hash
from autotune.core.problem import Problem
from autotune.ops.gemv import KERNEL_FILE

RECORDS = Path(__file__).resolve().parents[1] / "db" / "records"
_USED = re.compile(r"Used (\d+) registers")


def shipped_kernels() -> dict[str, tuple[Problem, dict[str, int]]]:
    """Each plain GEMV kernel of the shipped records (by name) with a problem and config that build it."""
    kernels: dict[str, tuple[Problem, dict[str, int]]] = {}
    for path in sorted(RECORDS.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            trial = json.loads(line)
            if trial.get("kind") != "trial" or trial["op"] != "gemv" or trial["trans"]:
                continue
            problem = Problem("gemv", trial["dtype"], trial["m"], trial["n"])
            op = ops.for_problem(problem)
            if op.space(problem).check(trial["config"]) is None:
                kernels.setdefault(op.kernel_name(problem, trial["config"]), (problem, trial["config"]))
    return kernels


def count(problem: Problem, config: Mapping[str, int]) -> int:
    """ptxas's registers per thread for the config's kernel, compiled for sm_90."""
    from autotune.build.compiler import nvcc_command

    job = ops.compile_job(problem, config, "sm_90")
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.cu"
        source.write_text(job.source)
        command = [*nvcc_command(job, source, Path(folder) / "kernel.cubin"), "-Xptxas", "-v"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder)
    found = _USED.search(done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{job.name} did not compile: {(done.stderr or done.stdout).strip()[:300]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=2, help="nvcc processes at once")
    args = parser.parse_args()
    kernels = shipped_kernels()
    with ThreadPoolExecutor(args.jobs) as pool:
        counts = dict(zip(kernels, pool.map(lambda pc: count(*pc), kernels.values()), strict=True))
    table = {"source_hash": file_hash(KERNEL_FILE), "registers": dict(sorted(counts.items()))}
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(counts)} kernels, {min(counts.values())}-{max(counts.values())} registers: {args.out}")


if __name__ == "__main__":
    main()
