"""The wheel carries db/ and kernels/ where autotune.core.paths looks first (scripts/check_wheel.py
builds one and checks every shipped kernel, records file and the selection table are in it)."""

from __future__ import annotations

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
