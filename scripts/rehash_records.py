"""Carry shipped measurements across a kernel edit that leaves their machine code as it was.

A measurement is stale once the kernel file it was taken with changes (autotune/core/fingerprint.py):
the selector and the tuner only use trials of today's source hash. An edit that only adds code for
new parameter values (a new kind of `prefetch` in gemv.cu, say) can leave the instance of every
earlier config byte for byte the same, and then its measurements still hold.

For every trial in db/records/*.jsonl whose source_hash is its kernel file's hash at REV, this
compiles the config's instance against REV's kernels/ and against today's, for the record's GPU;
where the two cubins are identical it rewrites the trial's source_hash to today's. Trials whose
code changed are left as they are (stale: the next sweep measures them again).

The instance text comes from today's autotune/ops: before using this, check that
`git diff REV -- autotune/ops` leaves the text written for these configs as it was.

Where an op now names another kernel file for some problems (a new kernel joining their space, in a
file that includes the old one), `--file-was NEW=OLD` says which file those trials were measured
with (a NEW that REV lacks stands there as a file including OLD, so that today's instance text builds
at REV); a carried trial's config also gains the parameters today's space adds (Op.carried_over).

    python scripts/rehash_records.py --since HEAD          # what it would do
    python scripts/rehash_records.py --since HEAD --write  # and rewrite the files
    python scripts/rehash_records.py --since HEAD --file-was qgemm/qgemm_wgmma.cu=qgemm/qgemm.cu
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.build.compiler import CompileJob, nvcc_command
from autotune.core.fingerprint import file_hash
from autotune.core.paths import db_dir
from autotune.core.problem import Problem
from autotune.store.records import write_lines


def kernels_at(revision: str, into: Path) -> Path:
    """REV's kernels/ folder, extracted under `into`."""
    archive = subprocess.run(["git", "archive", revision, "kernels"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "kernels"


def cubin(job: CompileJob, kernels: Path | None, work: Path) -> bytes:
    """The cubin of `job` compiled with `kernels` (default: today's kernels/) as its include folder,
    without -lineinfo: line tables name files and line numbers, which any edit shifts, and the code
    does not depend on them (with them, no two builds from different folders are byte-identical)."""
    folder = Path(tempfile.mkdtemp(dir=work))
    source, output = folder / "kernel.cu", folder / "kernel.cubin"
    source.write_text(job.source)
    command = [part for part in nvcc_command(job, source, output, kernels) if part != "-lineinfo"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{job.name} does not compile: {done.stderr.strip().splitlines()[-1:]}")
    return output.read_bytes()


def problem_of(line: dict[str, Any]) -> Problem:
    # Records written before GEMM and the transposed GEMV carry neither k nor trans (as on import);
    # those of ops with per-input dtypes or variants (the int4 op) carry inputs and variant.
    return Problem(
        line["op"],
        line["dtype"],
        line["m"],
        line["n"],
        line.get("k", 0),
        line.get("trans", False),
        tuple(line.get("inputs") or ()),
        line.get("variant") or "",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", required=True, help="the git revision the records were measured at")
    parser.add_argument("--write", action="store_true", help="rewrite the records files (default: report only)")
    parser.add_argument(
        "--file-was",
        action="append",
        default=[],
        metavar="NEW=OLD",
        help="trials of problems whose kernel file is NEW today were measured with OLD at REV",
    )
    parser.add_argument("files", nargs="*", type=Path, help="records files (default: db/records/*.jsonl)")
    args = parser.parse_args()
    was = dict(pair.split("=", 1) for pair in args.file_was)
    files = args.files or sorted((db_dir() / "records").glob("*.jsonl"))
    with tempfile.TemporaryDirectory(prefix="autotune-rehash-") as tmp:
        work = Path(tmp)
        old_kernels = kernels_at(args.since, work / "old")
        for new_name, old_name in was.items():  # a file new since REV: there, what it stands for
            if not (old_kernels / new_name).exists():
                (old_kernels / new_name).write_text(f'#include "{old_name}"\n')
        # Per records file: its lines, and for each trial to check, the job (arch + instance) to compare,
        # today's hash and the trial's problem.
        parsed: dict[Path, list[dict[str, Any]]] = {}
        to_check: dict[tuple[Path, int], tuple[CompileJob, str, Problem]] = {}
        for path in files:
            lines = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
            parsed[path] = lines
            arch = next("sm_" + line["compute_capability"].replace(".", "") for line in lines if line["kind"] == "gpu")
            for index, line in enumerate(lines):
                if line["kind"] != "trial":
                    continue
                problem = problem_of(line)
                op = ops.for_problem(problem)
                name = op.kernel_file(problem)
                today = file_hash(name)
                if line["source_hash"] == file_hash(was.get(name, name), old_kernels) and line["source_hash"] != today:
                    # The instance today's code builds for the trial: its config as today's space names it.
                    config = op.carried_over(problem, line["config"])
                    to_check[(path, index)] = (ops.compile_job(problem, config, arch, op), today, problem)
        unique = {job for job, _, _ in to_check.values()}
        print(f"{len(to_check)} trials of REV's source in {len(files)} files: {len(unique)} instances to compare")
        with ThreadPoolExecutor() as pool:
            same = dict(
                zip(
                    unique,
                    pool.map(lambda job: cubin(job, old_kernels, work) == cubin(job, None, work), unique),
                    strict=True,
                )
            )
    counts: Counter[str] = Counter()
    for (path, index), (job, today, problem) in to_check.items():
        if same[job]:
            line = parsed[path][index]
            line["source_hash"] = today
            line["config"] = ops.in_space_order(problem, ops.for_problem(problem).carried_over(problem, line["config"]))
            counts[path.name + ": carried"] += 1
        else:
            counts[path.name + ": code changed, left stale"] += 1
    for what, count in sorted(counts.items()):
        print(f"  {what}: {count}")
    if args.write:
        for path in {path for path, _ in to_check}:
            write_lines(path, parsed[path])
        print("records rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
