"""Fault drill on the GPU machine: planted out-of-bounds write, hang, wrong values, NaN, trap and a
killed worker inside a real sweep, which is itself SIGKILLed midway and resumed.

    python scripts/fault_drill.py --out results     # writes results/faults_<gpu>.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from autotune.core.fingerprint import local_gpus, slugify
from autotune.measure.drill import drill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    gpus = local_gpus()
    if not gpus:
        print("error: the fault drill needs an NVIDIA GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = {"gpu": gpus[0].name, **drill(Path(tmp) / "drill.db", trials=args.trials)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"faults_{slugify(gpus[0].name)}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    for fault in report["faults"]:
        print(f"{fault['kind']:22} recorded as {fault['recorded_as']:14} survived={fault['survived']}")
    print(
        f"killed midway: {report['sweep_killed_midway']}, rows expected {report['rows_expected']}, "
        f"found {report['rows_found']}, duplicates {report['duplicates']}, kept {report['completed_rows_kept']}"
    )
    ok = all(f["survived"] for f in report["faults"]) and report["rows_found"] == report["rows_expected"]
    ok = ok and report["duplicates"] == 0 and report["completed_rows_kept"]
    print(f"wrote {path}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
