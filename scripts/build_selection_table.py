"""Write db/selection.json, the selection table of the shipped records (autotune/store/selection_table.py): what
the launch path selects from, without the database, on a machine whose default database does not
exist yet. Run it whenever db/records/ changes (tests/test_selection_table.py fails until then, under
`pytest -m slow`):

    python scripts/build_selection_table.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.store import open_store  # noqa: E402
from autotune.store import selection_table as table  # noqa: E402


def build(records: Path) -> list[str]:
    """The shipped table's content: the records imported into a new database in memory, as the store
    imports them into a new default database."""
    with open_store("sqlite://", import_shipped=False) as store:
        store.import_shipped(records)
        return table.to_lines(store.selection_rows(table.PER_SOURCE), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, default=REPO / "db" / "records")
    parser.add_argument("--out", type=Path, default=REPO / "db" / table.SHIPPED_TABLE)
    args = parser.parse_args()
    lines = build(args.records)
    table.write(args.out, lines)
    problems = len(table.read(args.out).table.problems())
    groups = (len(lines) - 1) // 2  # each group's line and its exact-hit line
    print(f"{args.out}: {problems} problems in {groups} groups, {args.out.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
