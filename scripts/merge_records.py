"""Add a GPU run's exported records to the shipped records in db/records.

A tuning run on the GPU machine ends with an export (`scripts/gpu_steps.sh export`: the top trials
of every problem measured with today's kernel sources, and cuBLASLt's best). This adds to the
shipped files the problems they do not hold yet, each trial into the file of its kind (our trials and
cuBLASLt's count apart: a problem shipped with cuBLASLt's trials alone still gets ours), the files
named after the GPU (its slug, as `autotune export` names them):

    <slug>.jsonl             GEMV, y = A x             <slug>-gemv-trans.jsonl   GEMV, y = Aᵀx
    <slug>-gemm.jsonl        GEMM, B stored K x N      <slug>-gemm-nt.jsonl      GEMM, B stored N x K
    <slug>-<op>.jsonl        any other op (qgemm: int4 weight-only GEMV/GEMM, qdequant: int4 dequantization)
    <slug>-cublas.jsonl      cuBLASLt's trials, every op

Problems the shipped files hold already keep their rows, except with --replace-stale: after a kernel
edit, a `sweep --stale` run re-tunes the problems whose family's source changed, and its rows replace
the shipped rows of each problem that none of them measured with the export's kernel source (the
other problems' rows, already current, are left alone). With --faster, a longer sweep of problems
shipped already adds its trials of a problem where its best, measured with the same kernel source as
the shipped rows, beats the shipped best (the rows already there stay). --only-finished LOG keeps
only the problems the sweep log reports finished ("best ... after", or a full progress bar), for a run cut
short mid-problem. A problem the merge gives cuBLASLt's rows and none of ours (a sweep cut short after it
timed the library) is named: `best` answers cuBLASLt there until a sweep measures our configs.
Every file is checked by parsing it back before it is written; nothing is written on --dry-run.

    python scripts/merge_records.py EXPORT.jsonl [--only-finished sweep.log] [--replace-stale] [--faster] [--dry-run]

Then: scripts/build_selection_table.py, scripts/build_shipped_kernels.py, scripts/docs_results.py.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import ops
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import slugify
from autotune.core.paths import db_dir
from autotune.store.records import parse_records, write_lines

ProblemKey = tuple[object, ...]  # op, dtype, m, n, k or None, trans[, inputs, variant]
# The sweep's log line for a finished problem: "sgemm 2x6144x4096 (B stored N x K): best 26.94 us after"
_FINISHED = re.compile(r"\b([shb])(gemv|gemm) (\d+)x(\d+)(?:x(\d+))?( \([^)]*\))?: best .* after ")
# A one-GPU sweep logs its progress bars instead, each as it last stood: "[3/57] sgemv 2048x8192 (transposed)
# ━━━ 24/24 best 15.68 us"; a problem ends with its bar full, and one cut short stops below ("8/24").
_BAR = re.compile(r"\[\d+/\d+\] ([shb])(gemv|gemm) (\d+)x(\d+)(?:x(\d+))?( \([^)]*\))?[^\n]*? (\d+)/(\d+) best ")
_DTYPES = {"s": "float32", "h": "float16", "b": "bfloat16"}
SUFFIXES = ("", "-gemv-trans", "-gemm", "-gemm-nt", "-cublas")  # and "-<op>" of every other op


def problem_key(trial: dict[str, Any]) -> ProblemKey:
    # A GEMV's records line carries k = 0, its log line no K at all: both are None here. Input dtypes
    # and a variant tell apart the int4 problems of one shape (g128 and g128a); other lines have none.
    key = (trial["op"], trial["dtype"], trial["m"], trial["n"], trial.get("k") or None, bool(trial.get("trans")))
    inputs, variant = tuple(trial.get("inputs") or ()), trial.get("variant") or ""
    return (*key, inputs, variant) if inputs or variant else key


def file_suffix(trial: dict[str, Any]) -> str:
    """Which shipped file of the GPU a trial belongs in."""
    if ops.library_of_source(str(trial["source_hash"])) is not None:
        return "-cublas"
    if trial["op"] == "gemv":
        return "-gemv-trans" if trial.get("trans") else ""
    if trial["op"] == "gemm":
        return "-gemm-nt" if trial.get("trans") else "-gemm"
    return f"-{trial['op']}"


def finished_problems(log: str) -> set[ProblemKey]:
    """The problems a sweep log reports finished."""
    keys: set[ProblemKey] = set()
    found = [match.groups() for match in _FINISHED.finditer(log)]
    found += [groups[:6] for groups in (match.groups() for match in _BAR.finditer(log)) if groups[6] == groups[7]]
    for prefix, op, m, n, k, layout in found:
        # Problem.__str__ adds "(B stored N x K)" or "(transposed)" to a trans problem only.
        keys.add((op, _DTYPES[prefix], int(m), int(n), int(k) if k else None, layout is not None))
    return keys


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]


@dataclass
class Merged:
    added: Counter[str] = field(default_factory=Counter)  # trials added per file
    replaced: Counter[str] = field(default_factory=Counter)  # stale trials taken out per file
    faster: list[str] = field(default_factory=list)  # shipped problems a faster trial was added to
    # Problems that now hold cuBLASLt's rows and none of ours: a sweep cut short after it timed the
    # library (its first step) and before any config of ours finished. `best` answers cuBLASLt there.
    vendor_only: list[str] = field(default_factory=list)


def merge(
    export: Path,
    records_dir: Path,
    *,
    only: set[ProblemKey] | None = None,
    replace_stale: bool = False,
    faster: bool = False,
    write: bool = True,
) -> Merged:
    """Add the export's new problems to the GPU's shipped files, with `replace_stale` put its rows in
    place of a shipped problem's rows of another kernel source, and with `faster` add its rows of a
    shipped problem whose best they beat on the same kernel source."""
    lines = read_lines(export)
    if not lines or lines[0].get("kind") != "gpu":
        raise AutotuneError(f"{export}: expected a GPU line first")
    gpu_line, trials = lines[0], [line for line in lines[1:] if line.get("kind") == "trial"]
    slug = slugify(gpu_line["name"])
    shipped: set[tuple[str, ProblemKey]] = set()  # (file suffix, problem)
    suffixes = [*SUFFIXES, *sorted({file_suffix(t) for t in trials} - set(SUFFIXES))]
    files = {suffix: records_dir / f"{slug}{suffix}.jsonl" for suffix in suffixes}
    contents: dict[str, list[dict[str, Any]]] = {}
    for suffix, path in files.items():
        contents[suffix] = read_lines(path) if path.exists() else [gpu_line]
        shipped.update((suffix, problem_key(t)) for t in contents[suffix][1:] if t.get("kind") == "trial")
    merged = Merged()
    if replace_stale:
        exported: dict[tuple[str, ProblemKey], set[str]] = {}  # the kernel sources each problem was measured with
        for t in trials:
            if only is None or problem_key(t) in only:
                exported.setdefault((file_suffix(t), problem_key(t)), set()).add(t["source_hash"])
        for suffix, key in exported.keys() & shipped:
            rows = [t for t in contents[suffix][1:] if t.get("kind") == "trial" and problem_key(t) == key]
            if exported[suffix, key].isdisjoint(t["source_hash"] for t in rows):
                contents[suffix] = [
                    t for t in contents[suffix] if not (t.get("kind") == "trial" and problem_key(t) == key)
                ]
                shipped.discard((suffix, key))
                merged.replaced[files[suffix].name] += len(rows)
    added, vendor_added = merged.added, set()
    improved = _faster_problems(trials, contents, shipped, only) if faster else set()
    for trial in trials:
        key, suffix = problem_key(trial), file_suffix(trial)
        if (suffix, key) in improved and trial not in contents[suffix]:
            contents[suffix].append(trial)
            added[files[suffix].name] += 1
            continue
        if (suffix, key) in shipped or (only is not None and key not in only):
            continue
        contents[suffix].append(trial)
        added[files[suffix].name] += 1
        if suffix == "-cublas":
            vendor_added.add(key)
    merged.faster.extend(sorted(f"{files[suffix].name}: {' '.join(map(str, key))}" for suffix, key in improved))
    ours = {problem_key(t) for suffix, lines in contents.items() if suffix != "-cublas" for t in lines[1:]}
    merged.vendor_only.extend(sorted(" ".join(map(str, key)) for key in vendor_added - ours))
    changed = [suffix for suffix, path in files.items() if added[path.name] or merged.replaced[path.name]]
    for suffix in changed:  # every file checked before any is written: a bad line changes none
        text = "".join(json.dumps(line, sort_keys=True, allow_nan=False) + "\n" for line in contents[suffix])
        parse_records(files[suffix], text)
    if write:
        for suffix in changed:
            write_lines(files[suffix], contents[suffix])
    return merged


def _faster_problems(
    trials: list[dict[str, Any]],
    contents: dict[str, list[dict[str, Any]]],
    shipped: set[tuple[str, ProblemKey]],
    only: set[ProblemKey] | None,
) -> set[tuple[str, ProblemKey]]:
    """The shipped problems whose export rows beat the shipped best measured with the same kernel source
    (a faster time of another source says nothing of what the shipped kernels run)."""
    best: dict[tuple[str, ProblemKey, str], float] = {}  # (file, problem, source) -> least time shipped
    for suffix, lines in contents.items():
        for t in lines[1:]:
            if t.get("kind") == "trial" and t.get("time_us") is not None:
                slot = (suffix, problem_key(t), t["source_hash"])
                best[slot] = min(best.get(slot, float("inf")), t["time_us"])
    improved = set()
    for t in trials:
        key, suffix = problem_key(t), file_suffix(t)
        if (suffix, key) not in shipped or (only is not None and key not in only) or t.get("time_us") is None:
            continue
        if t["time_us"] < best.get((suffix, key, t["source_hash"]), 0.0):
            improved.add((suffix, key))
    return improved


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="records file a GPU run exported")
    parser.add_argument(
        "--only-finished",
        type=Path,
        action="append",
        default=[],
        metavar="LOG",
        help="keep only the problems this sweep log reports finished (repeatable)",
    )
    parser.add_argument("--records", type=Path, default=db_dir() / "records", help="the shipped records folder")
    parser.add_argument(
        "--replace-stale",
        action="store_true",
        help="replace a shipped problem's rows where the export measured it with another kernel source",
    )
    parser.add_argument(
        "--faster",
        action="store_true",
        help="add the export's rows of a shipped problem whose best they beat (same kernel source)",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be added, write nothing")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        only = None
        if args.only_finished:
            only = set().union(*(finished_problems(log.read_text()) for log in args.only_finished))
        merged = merge(
            args.export,
            args.records,
            only=only,
            replace_stale=args.replace_stale,
            faster=args.faster,
            write=not args.dry_run,
        )
    except (AutotuneError, OSError, ValueError, KeyError) as exc:
        print(f"merge_records: {exc}", file=sys.stderr)
        return 1
    would = "would be " if args.dry_run else ""
    for name, count in sorted(merged.replaced.items()):
        print(f"{name}: {count} stale trials {would}replaced")
    for problem in merged.faster:
        print(f"{problem}: faster than the shipped best")
    for name, count in sorted(merged.added.items()):
        print(f"{name}: {count} trials {would}added")
    for problem in merged.vendor_only:
        print(f"{problem}: cuBLASLt's rows alone {would}added (none of our configs measured: sweep it again)")
    if not merged.added:
        print("nothing new to add")
    return 0


if __name__ == "__main__":
    sys.exit(main())
