"""Build the wheel (or take one) and check that it carries what the launch path needs without a
compiler: every shipped kernel db/kernels/index.json names, the index and manifest, the shipped
records, the shipped selection table, the migrations and the kernel sources; print its size.

    python scripts/check_wheel.py                  # builds it with `pip wheel . --no-deps`
    python scripts/check_wheel.py --wheel dist/autotune_kernels-0.1.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = "autotune/_data/"  # where the wheel puts db/ and kernels/ (pyproject.toml's force-include)


def expected() -> list[str]:
    """The wheel's paths of every file the launch path and the store read from db/ and kernels/."""
    index = json.loads((REPO / "db" / "kernels" / "index.json").read_text())
    wanted = [f"{DATA}db/kernels/{stem}.{entry['kind']}.xz" for stem, entry in index["files"].items()]
    wanted += [f"{DATA}db/kernels/index.json", f"{DATA}db/kernels/manifest.json", f"{DATA}db/selection.json"]
    wanted += [f"{DATA}db/gpus.json"]
    for folder, pattern in (("db/records", "*.jsonl"), ("db/migrations/versions", "*.py"), ("kernels", "**/*.cu*")):
        wanted += [DATA + str(path.relative_to(REPO)) for path in sorted((REPO / folder).glob(pattern))]
    return wanted


def build(folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(folder)]
    subprocess.run(command, check=True)
    return next(folder.glob("autotune_kernels-*.whl"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a built wheel (default: build one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        wheel = args.wheel or build(Path(scratch))
        with zipfile.ZipFile(wheel) as archive:
            entries = {info.filename: info for info in archive.infolist()}
        missing = [name for name in expected() if name not in entries]
        installed = sum(info.file_size for info in entries.values())
        kernels = sum(info.file_size for name, info in entries.items() if name.startswith(f"{DATA}db/kernels/"))
        print(
            f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB, {installed / 2**20:.1f} MiB installed, "
            f"of which db/kernels/ {kernels / 2**20:.1f} MiB; {len(entries)} files"
        )
    if missing:
        print(f"{len(missing)} files missing from the wheel, e.g. {', '.join(missing[:3])}")
        return 1
    print("every shipped kernel, records file, selection table, migration and kernel source is in it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
