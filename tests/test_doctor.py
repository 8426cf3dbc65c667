"""`autotune doctor`: one screen of what this machine has, what it can do, and what to do."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune import doctor
from autotune.cli import app


def test_doctor_lists_every_check_and_what_the_machine_can_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", "--db", str(tmp_path / "t.db")], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    for name in ("Python", "NVIDIA driver", "nvcc", "PyCUDA", "torch", "cupy", "database"):
        assert name in result.output
    assert "cuda.h" in result.output or "not needed: PyCUDA is installed" in result.output
    assert "yes  answer `autotune best` from the database" in result.output


def test_a_machine_without_nvcc_or_a_driver_is_told_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    found = {check.name: check for check in doctor.checks(str(tmp_path / "t.db"))}
    assert not found["nvcc"].ok and "CUDA toolkit" in found["nvcc"].fix
    assert not found["NVIDIA driver"].ok and "driver" in found["NVIDIA driver"].fix
    if "cuda.h" in found:  # PyCUDA not installed: the build's needs are listed
        assert not found["cuda.h"].ok and "nvidia-cuda-runtime" in found["cuda.h"].fix
    assert found["database"].ok
    can = dict(doctor.abilities(list(found.values())))
    assert can["answer `autotune best` from the database"] and not can["tune (`autotune sweep`)"]


# The PyCUDA build's needs, on fake toolkits: `bare` gives a PATH of fake tools only and hides every
# folder of this machine (its compiler's include folders, /usr/local/cuda*, the site folders, the
# PyCUDA config files), so each test sees only the folders it makes.


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    tools = tmp_path / "tools"
    _script(tools / "g++", "exit 0\n")
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH", "CPATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(doctor, "_AKSETUP_FILES", (str(tmp_path / "etc-aksetup-defaults.py"),))
    monkeypatch.setattr(doctor, "_compiler_include_dirs", list)
    monkeypatch.setattr(doctor, "_system_library_dirs", list)
    monkeypatch.setattr(doctor, "_usual_toolkits", list)
    monkeypatch.setattr(doctor, "_site_dirs", list)
    monkeypatch.setattr(doctor, "_compiler_name", lambda: "g++")
    return tools


def _toolkit(root: Path, *, curand: bool = True) -> Path:
    """A toolkit's layout: bin/nvcc (answering --dryrun as nvcc does), the headers, the libraries."""
    _script(root / "bin" / "nvcc", 'echo "#$ _HERE_=${0%/*}" >&2\necho "release 13.0, V13.0.88"\n')
    headers = ["cuda.h", "cudaProfiler.h", "crt/host_config.h", *(["curand.h"] if curand else [])]
    for name in headers:
        (root / "include" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "include" / name).write_text("/* header */\n")
    (root / "lib64" / "stubs").mkdir(parents=True)
    (root / "lib64" / "stubs" / "libcuda.so").write_text("stub")
    if curand:
        (root / "lib64" / "libcurand.so").write_text("lib")
    return root


def _build(tmp_path: Path) -> dict[str, doctor.Check]:
    return {check.name: check for check in doctor.build_checks()}


def test_a_toolkit_beside_nvcc_passes_every_build_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    toolkit = _toolkit(tmp_path / "cuda-13.0")
    monkeypatch.setenv("PATH", f"{toolkit / 'bin'}:{bare}")
    found = _build(tmp_path)
    headers = {"cuda.h", "cudaProfiler.h", "curand.h", "crt/host_config.h"}
    assert set(found) == {"g++", "Python.h", *headers, "libcuda.so", "libcurand.so"}
    assert all(check.ok for check in found.values()), found
    assert found["curand.h"].found == str(toolkit / "include" / "curand.h")
    assert found["libcuda.so"].found == str(toolkit / "lib64" / "stubs" / "libcuda.so")


def test_a_wrapper_nvcc_hides_the_toolkit_and_doctor_says_where_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    # /usr/local/bin/nvcc as a script that execs the real one: PyCUDA takes /usr/local as the toolkit.
    toolkit = _toolkit(tmp_path / "cuda-13.0")
    _script(bare / "nvcc", f'exec {toolkit / "bin" / "nvcc"} "$@"\n')
    found = _build(tmp_path)
    assert not found["cuda.h"].ok and found["cuda.h"].found == str(toolkit / "include" / "cuda.h")
    assert found["cuda.h"].fix == f"not where the build looks: export CPATH={toolkit / 'include'}"
    assert found["libcurand.so"].fix == f"not where the build looks: export LIBRARY_PATH={toolkit / 'lib64'}"
    assert f"LIBRARY_PATH={toolkit / 'lib64' / 'stubs'}" in found["libcuda.so"].fix
    # Following the advice passes.
    monkeypatch.setenv("CPATH", str(toolkit / "include"))
    monkeypatch.setenv("LIBRARY_PATH", f"{toolkit / 'lib64'}:{toolkit / 'lib64' / 'stubs'}")
    assert all(check.ok for check in _build(tmp_path).values())


def test_a_toolkit_without_curand_names_the_packages_that_provide_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    toolkit = _toolkit(tmp_path / "cuda-13.0", curand=False)
    monkeypatch.setenv("PATH", f"{toolkit / 'bin'}:{bare}")
    found = _build(tmp_path)
    assert found["cuda.h"].ok and found["cudaProfiler.h"].ok and found["libcuda.so"].ok
    for name in ("curand.h", "libcurand.so"):
        assert not found[name].ok and found[name].found == "missing"
        assert "apt install nvidia-cuda-dev" in found[name].fix and "pip install nvidia-curand" in found[name].fix
    can = dict(doctor.abilities([*doctor.checks(str(tmp_path / "t.db"))]))
    assert not can["build PyCUDA (`pip install '.[cuda]'`)"]


def test_nothing_at_all_names_a_provider_for_every_file(tmp_path: Path, bare: Path) -> None:
    found = _build(tmp_path)
    assert "nvidia-cuda-runtime" in found["cuda.h"].fix
    assert "nvidia-cuda-profiler-api" in found["cudaProfiler.h"].fix
    assert "nvidia-cuda-crt" in found["crt/host_config.h"].fix
    assert "libcuda1" in found["libcuda.so"].fix and "stubs/libcuda.so" in found["libcuda.so"].fix
    _script(bare / "g++", "exit 0\n").unlink()
    assert "apt install g++" in _build(tmp_path)["g++"].fix


def test_nvidia_wheels_are_found_and_their_versioned_library_needs_a_link(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    # pip install nvidia-curand: nvidia/cu13/include/curand.h and nvidia/cu13/lib/libcurand.so.10 only.
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "include").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "include" / "curand.h").write_text("/* header */\n")
    (site / "nvidia" / "cu13" / "lib").mkdir()
    (site / "nvidia" / "cu13" / "lib" / "libcurand.so.10").write_text("lib")
    monkeypatch.setattr(doctor, "_site_dirs", lambda: [str(site)])
    found = _build(tmp_path)
    assert found["curand.h"].fix == f"not where the build looks: export CPATH={site / 'nvidia' / 'cu13' / 'include'}"
    versioned = site / "nvidia" / "cu13" / "lib" / "libcurand.so.10"
    assert found["libcurand.so"].found == f"only {versioned}"
    assert f"ln -s {versioned} DIR/libcurand.so" in found["libcurand.so"].fix


def test_pycuda_reads_its_config_files_not_the_cuda_root_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare: Path
) -> None:
    toolkit = _toolkit(tmp_path / "cuda-13.0")
    monkeypatch.setenv("CUDA_ROOT", str(toolkit))  # PyCUDA 2026.1's setup.py ignores it
    found = _build(tmp_path)
    assert not found["cuda.h"].ok and "export CPATH" in found["cuda.h"].fix
    (tmp_path / "etc-aksetup-defaults.py").write_text(f"CUDA_ROOT = {str(toolkit)!r}\n")
    assert all(check.ok for check in _build(tmp_path).values())


def test_an_installed_pycuda_needs_no_build_line_per_file(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "pycuda" else real(name, *a))
    assert [(check.name, check.ok) for check in doctor.pycuda_build()] == [("PyCUDA build", True)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_nvcc_says_where_its_toolkit_is() -> None:
    nvcc = shutil.which("nvcc")
    assert nvcc
    toolkit = doctor._nvcc_toolkit(nvcc)
    assert toolkit is not None and (toolkit / "bin").is_dir()
    assert any(path.name.startswith("nvcc") for path in (toolkit / "bin").iterdir())


def test_a_database_that_cannot_be_opened_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    check = {c.name: c for c in doctor.checks(str(folder))}["database"]
    assert not check.ok and check.fix
    assert os.path.isdir(folder)
