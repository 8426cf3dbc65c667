"""Adding an op that Python can call touches the op registry, the op's folder under autotune/ops/ and
its kernels' folder under kernels/, nothing else: shown on a copy of the package in a git repository
of its own, where the row-sum test op (tests/op_rowsum) is added as a shipped op would be, the diff
is checked, and the new op is asked about from the CLI, binds arrays, builds for sm_90 and plans
its launch with no other file changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWSUM = REPO / "tests" / "op_rowsum"
ALLOWED = ("autotune/ops/__init__.py", "autotune/ops/rowsum/", "kernels/rowsum/")

PROBE = """
import json, shutil
from autotune import ops
from autotune.core.arrays import DeviceArray
from autotune.build.compiler import compile_kernel
from autotune.core.fingerprint import GpuInfo

op = ops.get("rowsum")
bound = op.bind([DeviceArray(None, 1 << 20, (300, 500), None, "float32", "cai", 0)], None, ())
job = ops.compile_job(bound.problem, {"threads": 64, "unroll": 2}, "sm_90")
built = compile_kernel(job) if shutil.which("nvcc") else None
gpu = GpuInfo("NVIDIA H200", "GPU-1", "9.0", 132, 60 << 20, 141 << 30, "580", "13.0")
call = op.plan(bound.problem, {"threads": 64, "unroll": 2}, gpu)
print(json.dumps({"problem": str(bound.problem), "shipped": list(ops.shipped()), "kernel": job.name,
                  "built": None if built is None else built.cubin is not None, "grid": call.geom.grid}))
"""


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


def _add_rowsum(repo: Path) -> None:
    """What a contributor writes: the op's folder, its kernel's folder, one line in the registry."""
    folder = repo / "autotune" / "ops" / "rowsum"
    folder.mkdir()
    source = (ROWSUM / "__init__.py").read_text()
    beside = 'KERNEL_FILE = str(Path(__file__).with_name("rowsum.cu"))'
    assert beside in source
    (folder / "__init__.py").write_text(source.replace(beside, 'KERNEL_FILE = "rowsum/rowsum.cu"  # under kernels/'))
    shutil.copy(ROWSUM / "shapes.txt", folder / "shapes.txt")
    (repo / "kernels" / "rowsum").mkdir()
    shutil.copy(ROWSUM / "rowsum.cu", repo / "kernels" / "rowsum" / "rowsum.cu")
    registry = repo / "autotune" / "ops" / "__init__.py"
    text = registry.read_text()
    assert "\nregister(gemm.OP)\n" in text
    text = text.replace(
        "\nregister(gemm.OP)\n",
        "\nregister(gemm.OP)\n\nfrom autotune.ops import rowsum  # noqa: E402\n\nregister(rowsum.OP)\n",
    )
    registry.write_text(text)


def test_an_op_is_added_in_the_registry_and_its_two_folders_alone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("autotune", "kernels"):
        shutil.copytree(REPO / folder, repo / folder, ignore=ignore)
    # Migrations and GPU table, not part of the change; no records to import: the new op has none.
    (repo / "db" / "records").mkdir(parents=True)
    for name in ("migrations", "gpus.json"):
        (repo / "db" / name).symlink_to(REPO / "db" / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "autotune", "kernels")
    _git(repo, "commit", "-q", "-m", "before")
    _add_rowsum(repo)
    _git(repo, "add", "autotune", "kernels")
    _git(repo, "commit", "-q", "-m", "the row-sum op")

    changed = _git(repo, "diff", "--name-only", "HEAD~1").split()
    assert changed and all(path.startswith(ALLOWED) for path in changed), changed
    stat = _git(repo, "diff", "--stat", "HEAD~1")
    assert f"{len(changed)} files changed" in stat

    env = {**os.environ, "PYTHONPATH": str(repo), "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    env["AUTOTUNE_CACHE_DIR"] = str(tmp_path / "cache")
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["problem"] == "srowsum 300x500"
    assert set(found["shipped"]) == {"gemv", "gemm", "qgemm", "qdequant", "q8gemm", "rowsum"}
    assert found["kernel"] == "rowsum_float32_t64_u2" and found["grid"] == [300, 1, 1]
    assert found["built"] == (True if shutil.which("nvcc") else None)  # None: no nvcc to build with

    best = [sys.executable, "-m", "autotune", "best", "--op", "srowsum", "--m", "4096", "--n", "1024"]
    answered = subprocess.run([*best, "--gpu", "NVIDIA H200"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith("srowsum 4096x1024 on NVIDIA H200 [default]")
