"""The wheel carries db/ and kernels/ where autotune.core.paths looks first (scripts/check_wheel.py
builds one and checks every shipped kernel, records file and the selection table are in it)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_maps_db_and_kernels_into_the_package() -> None:
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.skip("tomllib: 3.11+")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    forced = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert forced == {"kernels": "autotune/_data/kernels", "db": "autotune/_data/db"}


def test_the_wheel_check_names_files_that_exist() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import check_wheel
    finally:
        sys.path.remove(str(REPO / "scripts"))
    wanted = check_wheel.expected()
    assert len(wanted) > 250
    missing = [name for name in wanted if not (REPO / name.removeprefix(check_wheel.DATA)).is_file()]
    assert missing == []


def test_docs_deploy_states_the_shipped_data_as_it_is() -> None:
    """The sizes docs/deploy.md gives of what the wheel carries, those that need no wheel built: the
    shipped kernels (files, instances, unpacked), the records and the selection table (scripts/check_wheel.py
    prints the wheel's own size)."""
    text = " ".join((REPO / "docs" / "deploy.md").read_text(encoding="utf-8").split())
    found = re.search(
        r"([\d.]+) MiB of it are the shipped kernels \((\d+) instances, xz-compressed, (\d+) MiB if all were "
        r"unpacked.*?The shipped records are ([\d.]+) MiB .*? their selection table ([\d.]+) MiB",
        text,
    )
    assert found, "docs/deploy.md no longer states the shipped data's sizes in the form this test checks"
    kernels = json.loads((REPO / "db" / "kernels" / "manifest.json").read_text())["kernels"]
    mib = 2**20
    records = sum(path.stat().st_size for path in (REPO / "db" / "records").glob("*.jsonl"))
    assert found.groups() == (
        f"{sum(path.stat().st_size for path in (REPO / 'db' / 'kernels').iterdir()) / mib:.1f}",
        str(len(kernels)),
        f"{sum(kernel['bytes'] for kernel in kernels.values()) / mib:.0f}",
        f"{records / mib:.1f}",
        f"{(REPO / 'db' / 'selection.json').stat().st_size / mib:.1f}",
    )
