"""scripts/ncu_stalls.py: where warps wait, from Nsight Compute's source page (CPU only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scripts import ncu_stalls

HEADER = (
    '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
    '"stall_wait","stall_long_sb","stall_long_sb (Not Issued)"'
)
SOURCE_PAGE = f"""==PROF== Connected to process
{HEADER}
"0x10","FADD R207, R4, R8","10","8","0","10","8"
"0x20","HGMMA.64x64x16.F32 R24, R56, gdesc[UR20], R24","30","4","30","0","0"
"""


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["ncu_stalls.py", str(path)])
    code = ncu_stalls.main()
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_reasons_and_instructions_by_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "source.csv"
    page.write_text(SOURCE_PAGE)
    code, out, _ = _run(monkeypatch, capsys, page)
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "40 samples"
    assert lines[1] == "wait 75.0%  long_sb 25.0%"  # the Not Issued column is not counted twice
    assert lines[2].startswith(" 75.0%  HGMMA") and lines[2].endswith("wait=30")
    assert lines[3].startswith(" 25.0%  FADD") and lines[3].endswith("long_sb=10")


def test_a_file_without_the_source_page_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "details.csv"
    page.write_text('"ID","Kernel Name"\n"0","qgemm"\n')
    code, out, err = _run(monkeypatch, capsys, page)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no source-page header" in err
