"""Where a kernel's warps wait, by SASS instruction: a summary of Nsight Compute's source page.

    ncu --set full --import-source yes -o report ...
    ncu -i report.ncu-rep --page source --csv --print-source sass > source.csv
    python scripts/ncu_stalls.py source.csv [--top 45]

Prints each stall reason's share of the warp-state samples, then the instructions holding the most
samples with the reasons they waited for.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def _number(text: str) -> float:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="ncu --page source --csv --print-source sass")
    parser.add_argument("--top", type=int, default=45, help="instructions listed")
    args = parser.parse_args()
    with args.csv.open(errors="replace") as handle:
        rows = list(csv.reader(handle))
    header_at = next((i for i, row in enumerate(rows) if "Source" in (c.strip() for c in row)), None)
    if header_at is None:
        print(f"error: {args.csv} has no source-page header (a 'Source' column)", file=sys.stderr)
        return 1
    header = rows[header_at]
    body = [row for row in rows[header_at + 1 :] if len(row) >= len(header)]
    samples = next((i for i, c in enumerate(header) if c.startswith("Warp Stall Sampling (All")), None)
    if samples is None:
        print(f"error: {args.csv} has no warp-state samples (profile with --set full)", file=sys.stderr)
        return 1
    source = header.index("Source")
    # Reasons counted over all samples; the "(Not Issued)" columns repeat them for stalled cycles only.
    reasons = [i for i, c in enumerate(header) if c.startswith("stall_") and "(Not Issued)" not in c]
    total = sum(_number(row[samples]) for row in body) or 1.0
    print(f"{total:.0f} samples")
    shares = sorted(((sum(_number(row[i]) for row in body), header[i]) for i in reasons), reverse=True)
    print("  ".join(f"{name[6:]} {100 * count / total:.1f}%" for count, name in shares if count))
    for row in sorted(body, key=lambda r: -_number(r[samples]))[: args.top]:
        why = " ".join(f"{header[i][6:]}={row[i].strip()}" for i in reasons if _number(row[i]))
        print(f"{100 * _number(row[samples]) / total:5.1f}%  {row[source].strip()[:64]:64s}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
