"""`autotune doctor`: one screen of what this machine has, what it can do, and what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune import doctor
from autotune.cli import app


def test_doctor_lists_every_check_and_what_the_machine_can_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", "--db", str(tmp_path / "t.db")], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for name in ("Python", "NVIDIA driver", "nvcc", "cuda.h", "PyCUDA", "torch", "cupy", "database"):
        assert name in result.output
    assert "yes  answer `autotune best` from the database" in result.output


def test_a_machine_without_nvcc_or_a_driver_is_told_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc, no nvidia-smi
    for name in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    found = {check.name: check for check in doctor.checks(str(tmp_path / "t.db"))}
    assert not found["nvcc"].ok and "CUDA toolkit" in found["nvcc"].fix
    assert not found["NVIDIA driver"].ok and "driver" in found["NVIDIA driver"].fix
    assert not found["cuda.h"].ok and "CUDA_ROOT" in found["cuda.h"].fix
    assert found["database"].ok
    can = dict(doctor.abilities(list(found.values())))
    assert can["answer `autotune best` from the database"] and not can["tune (`autotune sweep`)"]


def test_cuda_h_is_found_under_cuda_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text("/* a toolkit's header */\n")
    monkeypatch.setenv("CUDA_ROOT", str(tmp_path))
    check = {c.name: c for c in doctor.checks(str(tmp_path / "t.db"))}["cuda.h"]
    assert check.ok and check.found == str(tmp_path / "include" / "cuda.h")


def test_a_database_that_cannot_be_opened_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    check = {c.name: c for c in doctor.checks(str(folder))}["database"]
    assert not check.ok and check.fix
    assert os.path.isdir(folder)
