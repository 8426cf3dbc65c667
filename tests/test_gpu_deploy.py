"""Shipped kernels on a GPU machine without a compiler: `bash scripts/gpu_steps.sh deploy` runs this file
in an environment with neither PyCUDA nor nvcc and an empty kernel cache (AUTOTUNE_DEPLOY_CHECK=1
says it is that one). gemv() and gemm() on torch tensors run the shipped kernels and are right; a
config that does not ship is one line naming what to install. Elsewhere on a GPU the results are
checked alike; the checks of the environment itself skip."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.ops import gemv as gemv_op
from autotune.store import open_store
from tests.fakes import ok, record

pytestmark = pytest.mark.gpu(driver=True)
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
IN_DEPLOY = os.environ.get("AUTOTUNE_DEPLOY_CHECK") == "1"
deploy_only = pytest.mark.skipif(
    not IN_DEPLOY, reason="checks the environment `gpu_steps.sh deploy` makes (AUTOTUNE_DEPLOY_CHECK=1)"
)
# Problems the shipped records of the H100 and the H200 hold (op, dtype, m, n, k, trans); on a GPU
# without records the defaults of their families ship.
SHIPPED = [
    ("gemv", "float16", 4096, 8192, 0, False),
    ("gemv", "bfloat16", 4096, 8192, 0, False),
    ("gemv", "float32", 4096, 8192, 0, False),
    ("gemv", "float16", 4096, 8192, 0, True),
    ("gemm", "float16", 8, 4096, 4096, False),
    ("gemm", "float16", 4096, 4096, 4096, False),
    ("gemm", "float32", 4096, 4096, 4096, False),
]
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}  # of the largest |reference| entry
UNSHIPPED = {**gemv_op.DEFAULT_CONFIG, "block": 64, "lanes": 16, "unroll": 2, "rows": 2}  # no record picks it


@pytest.fixture(autouse=True)
def _this_checkouts_records(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shipped records, tables and kernels of this checkout; no database yet, as when deployed."""
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: REPO / "db")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    from autotune import api

    api.new_session()


@deploy_only
def test_neither_pycuda_nor_nvcc_is_there() -> None:
    with pytest.raises(ImportError):
        import pycuda  # noqa: F401
    assert shutil.which("nvcc") is None


@pytest.mark.parametrize("case", SHIPPED, ids=lambda c: f"{c[1]}-{c[0]}-{'x'.join(map(str, c[2:5]))}{'-t' * c[5]}")
def test_a_shipped_problem_runs_its_shipped_kernel_and_is_right(
    case: tuple[str, str, int, int, int, bool], caplog: pytest.LogCaptureFixture
) -> None:
    import autotune

    op, dtype, m, n, k, trans = case
    kind = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(1)
    if op == "gemv":
        a = torch.randn(m, n, generator=gen, device="cuda").to(kind)
        b = torch.randn(m if trans else n, generator=gen, device="cuda").to(kind)
        out = torch.full((n if trans else m,), float("nan"), dtype=kind, device="cuda")
        reference = (a.double().t() if trans else a.double()) @ b.double()
    else:
        a = torch.randn(m, k, generator=gen, device="cuda").to(kind)
        b = torch.randn(k, n, generator=gen, device="cuda").to(kind)
        out = torch.full((m, n), float("nan"), dtype=kind, device="cuda")
        reference = a.double() @ b.double()
    with caplog.at_level(logging.DEBUG, logger="autotune.runtime.launcher"):
        if op == "gemv":
            autotune.gemv(a, b, out=out, trans=trans)
        else:
            autotune.gemm(a, b, out=out)
        torch.cuda.synchronize()
    origins = [record.args[-1] for record in caplog.records if isinstance(record.args, tuple) and record.args]
    assert origins == ["shipped"], f"{case}: kernels came from {origins}"
    assert not out.isnan().any(), f"{case}: entries left unwritten"
    error = float((out.double() - reference).abs().max() / reference.abs().max())
    assert error <= TOLERANCE[dtype], f"{case}: relative error {error:.2e}"
    if IN_DEPLOY:
        assert "pycuda" not in sys.modules


def local_gpu() -> GpuInfo:
    properties = torch.cuda.get_device_properties(0)
    capability = f"{properties.major}.{properties.minor}"
    return GpuInfo(properties.name, "GPU-deploy-test", capability, properties.multi_processor_count, 0, 0, "", "")


def test_a_config_that_does_not_ship_is_one_line_naming_the_toolkit(tmp_path: Path) -> None:
    import autotune

    if shutil.which("nvcc") is not None:
        pytest.skip("nvcc is on PATH: the config compiles")
    db = str(tmp_path / "tuned-here.db")
    problem = Problem("gemv", "float16", 5000, 7001)
    with open_store(db) as store:  # a config tuned on this machine, which nothing shipped selects
        record(store, problem, UNSHIPPED, ok(9.0), local_gpu())
    a = torch.randn(5000, 7001, device="cuda", dtype=torch.float16)
    x = torch.randn(7001, device="cuda", dtype=torch.float16)
    with pytest.raises(AutotuneError) as raised:
        autotune.gemv(a, x, db=db)
    message = str(raised.value)
    assert "\n" not in message and "not among the kernels shipped" in message and "CUDA toolkit" in message


@deploy_only
def test_tuning_says_in_one_line_what_to_install(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    command = [sys.executable, "-m", "autotune", "sweep", "--op", "hgemv", "--m", "64", "--n", "64"]
    done = subprocess.run([*command, "--db", str(tmp_path / "t.db")], env=env, capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-2000:]
    assert "CUDA toolkit" in lines[0] and "autotune-kernels[cuda]" in lines[0]
