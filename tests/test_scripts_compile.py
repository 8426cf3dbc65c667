"""The standalone CUDA benchmarks in scripts/ (every *.cu there, sharing bench_common.cuh)
compile for sm_90 with nvcc, so that the figures their results files quote can be reproduced. They
run only on the GPU machine; compiling needs no GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
COMMON = SCRIPTS.parent / "kernels" / "common"  # the shared headers the kernels include by name


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("source", sorted(p.name for p in SCRIPTS.glob("*.cu")))
def test_benchmark_compiles_for_sm_90(source: str, tmp_path: Path) -> None:
    result = subprocess.run(
        ["nvcc", "-O3", "-arch=sm_90", "-I", str(COMMON), "-c", str(SCRIPTS / source), "-o", str(tmp_path / "bench.o")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_there_are_benchmarks_to_compile() -> None:
    assert len(list(SCRIPTS.glob("*.cu"))) >= 3
