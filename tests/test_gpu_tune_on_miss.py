"""Tuning on a miss on a GPU (AUTOTUNE_TUNE_ON_MISS=1, autotune/runtime/tune_on_miss.py): a fresh
process meets an untuned problem, gets a right result at once from the estimated config, a
background sweep tunes the problem into the default database, and later calls run the measured best.
A graph captured before the tuning keeps the kernel it captured and still replays right. The
scheduling itself is tested on the CPU (tests/test_tune_on_miss.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
PROGRAM = r"""
import json, sys, torch, autotune
from autotune import api

def check(y, A, x):
    want = A.double() @ x.double()
    assert (y.double() - want).abs().max().item() <= 2e-2 * (A.double().abs() @ x.double().abs()).max().item()

A = torch.randn(3001, 2999, device="cuda", dtype=torch.float16)
x = torch.randn(2999, device="cuda", dtype=torch.float16)
y = torch.empty(3001, device="cuda", dtype=torch.float16)
check(autotune.gemv(A, x), A, x)
before = [s.choice.source for s in api.launch_path().signatures()]
graph = torch.cuda.CUDAGraph()
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    autotune.gemv(A, x, out=y)  # this signature's first call, outside the capture
    with torch.cuda.graph(graph, stream=stream):
        autotune.gemv(A, x, out=y)
torch.cuda.synchronize()
done = autotune.wait_for_tuning(240)
check(autotune.gemv(A, x), A, x)
after = [s.choice.source for s in api.launch_path().signatures()]
y.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
check(y, A, x)
print(json.dumps({"done": done, "before": before, "after": after}))
"""


def test_an_untuned_problem_is_tuned_in_the_background_and_later_calls_run_its_best(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AUTOTUNE_TUNE_ON_MISS": "1",
        "AUTOTUNE_TUNE_ON_MISS_TRIALS": "8",
        "XDG_DATA_HOME": str(tmp_path / "data"),  # a default database of its own
        "AUTOTUNE_CACHE_DIR": os.environ.get("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache")),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("AUTOTUNE_DB", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["done"], "the background sweep did not finish in time"
    assert result["before"] == ["estimate"], result
    assert result["after"] == ["measured"], result  # the forgotten signature selected again
    database = tmp_path / "data" / "autotune"
    assert any(database.rglob("*.db")), "the sweep wrote no default database"
