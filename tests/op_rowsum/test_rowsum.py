"""The op interface, proven by an op that lives in this folder alone: it is swept (with a fake
worker on the CPU, with the real worker on a GPU), stored, answered by `best` through the Python
API and the CLI, and travels through a records file into another database."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune import api, ops
from autotune.cli import app
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.core.space import Config
from autotune.select.choose import ESTIMATE, MEASURED
from autotune.store import Store, open_store
from autotune.tune.search import Budget
from autotune.tune.tuner import Tuner
from tests.fakes import InstantPool
from tests.op_rowsum import OP

GPU = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
TUNED = Problem("rowsum", "float32", 4096, 1024)
FASTEST = {"threads": 128, "unroll": 2}


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    """The op is known while these tests run, as it would be after `import tests.op_rowsum.registered`."""
    ops.register(OP, module="tests.op_rowsum.registered")
    yield
    ops.unregister(OP.name)


class FakeWorker:
    """The worker's interface: every config OK, the fastest at FASTEST."""

    def __init__(self) -> None:
        self.kernels: list[str] = []

    def setup(self, problem: Problem, seed: int, fresh_memory: bool = False) -> dict[str, object]:
        return {}

    def ready(self) -> None:
        pass

    def measure(self, cubin: Path, kernel: str, config: Config, timeout: float = 60.0) -> Outcome:
        self.kernels.append(kernel)
        time_us = 5.0 + abs(config["threads"] - 128) / 32 + abs(config["unroll"] - 2)
        return Outcome(Status.OK, time_us=time_us, times_us=[time_us])


def _tuner(store: Store, worker: FakeWorker, trials: int) -> Tuner:
    pool = InstantPool()
    return Tuner(store, worker, pool, GPU, sampler="random", budget=Budget(trials), seed=1, confirm=False)  # type: ignore[arg-type]


def test_the_op_is_known_by_name_to_every_stage() -> None:
    assert ops.get("rowsum") is OP
    assert ops.resolve_op("srowsum") == ("rowsum", "float32")
    assert ops.make_problem("rowsum", "float32", 4096, 1024) == TUNED
    assert ops.standard_shapes("rowsum") == [(1024, 4096), (4096, 1024)]
    assert ops.compile_job(TUNED, FASTEST, "sm_90").name == "rowsum_float32_t128_u2"


def test_sweep_store_best_and_records_go_through_the_op_interface(tmp_path: Path) -> None:
    db = tmp_path / "tuning.db"
    worker = FakeWorker()
    with open_store(str(db), import_shipped=False) as store:
        report = _tuner(store, worker, 12).tune(TUNED)
        assert report.result.best_config == FASTEST and set(worker.kernels) >= {"rowsum_float32_t128_u2"}

    measured = api.best("srowsum", 4096, 1024, gpu=GPU.name, db=str(db))
    assert (measured.source, measured.config) == (MEASURED, FASTEST)
    nearby = api.best("srowsum", 4000, 1024, gpu=GPU.name, db=str(db))
    assert (nearby.source, nearby.config, nearby.from_shape) == (ESTIMATE, FASTEST, (4096, 1024))

    text = CliRunner().invoke(
        app, ["best", "--op", "srowsum", "--m", "4096", "--n", "1024", "--gpu", GPU.name, "--db", str(db)]
    )
    assert text.exit_code == 0 and text.output.startswith("srowsum 4096x1024 on NVIDIA H200 [measured]")
    listed = CliRunner().invoke(app, ["list", "--json", "--db", str(db)])
    assert [(row["op"], row["m"], row["n"]) for row in json.loads(listed.output)] == [("srowsum", 4096, 1024)]

    records = tmp_path / "rowsum.jsonl"
    with open_store(str(db), import_shipped=False) as store:
        assert store.export_records(GPU.name, records, top=3) == 3
    other = tmp_path / "other.db"
    with open_store(str(other), import_shipped=False) as store:
        assert store.import_records(records) == 3
    imported = api.best("srowsum", 4096, 1024, gpu=GPU.name, db=str(other))
    assert (imported.source, imported.config) == (MEASURED, FASTEST)


def test_a_records_line_with_a_config_outside_the_space_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "tuning.db"
    with open_store(str(db), import_shipped=False) as store:
        _tuner(store, FakeWorker(), 3).tune(TUNED)
        records = tmp_path / "rowsum.jsonl"
        store.export_records(GPU.name, records, top=1)
    lines = records.read_text().splitlines()
    trial = json.loads(lines[-1])
    trial["config"] = {"threads": 96, "unroll": 1}
    records.write_text("\n".join([*lines[:-1], json.dumps(trial)]) + "\n")
    with open_store(str(tmp_path / "fresh.db"), import_shipped=False) as store:
        with pytest.raises(AutotuneError, match="threads=96"):
            store.import_records(records)
        assert store.gpu_names() == []  # nothing of the file went in


@pytest.mark.gpu
def test_the_real_worker_tunes_and_verifies_the_op(tmp_path: Path) -> None:
    """On a GPU: swept through the real worker (nvcc builds this folder's kernel, the host reference
    checks every config with the output poisoned first), and a kernel that skips a column is caught."""
    from autotune.build.compiler import CompileJob, compile_kernel
    from autotune.measure.worker.client import Worker

    report = api.sweep("srowsum", 1000, 3001, trials=8, sampler="random", seed=1, db=str(tmp_path / "t.db"))
    (tuned,) = report.problems
    assert tuned.result.statuses.get("ok", 0) >= 8 and tuned.result.best_us is not None, tuned.result

    problem = Problem("rowsum", "bfloat16", 333, 4104)
    with Worker() as worker:
        gpu = worker.hello()
        worker.setup(problem, seed=3)
        source = OP.kernel_source(problem, FASTEST).replace("(A, y, M, N, alpha", "(A, y, M, N - 1, alpha")
        compiled = compile_kernel(CompileJob(OP.kernel_name(problem, FASTEST), source, gpu.arch, "planted"), tmp_path)
        assert compiled.cubin is not None, compiled.message
        assert worker.measure(compiled.cubin, compiled.job.name, FASTEST).status is Status.WRONG_RESULT
        right = compile_kernel(ops.compile_job(problem, FASTEST, gpu.arch), tmp_path)
        assert right.cubin is not None, right.message
        assert worker.measure(right.cubin, right.job.name, FASTEST).status is Status.OK


def test_the_worker_process_learns_the_op_from_the_module_that_registers_it() -> None:
    """The worker is a process of its own: setup names the registering module, and the worker
    imports it before it builds the problem's runner. Without a GPU the setup then fails for want
    of PyCUDA or a driver, not for an unknown op."""
    from autotune.measure.worker.client import Worker

    with Worker() as worker, pytest.raises(Exception) as failed:
        worker.setup(TUNED, seed=1)
    assert "rowsum" not in str(failed.value) and "unknown op" not in str(failed.value)


@pytest.mark.gpu
def test_the_op_runs_through_runtime_call_from_its_folder_alone(tmp_path: Path) -> None:
    """On a GPU: tuned, then called from Python through the one launch path (autotune.call), on new
    and given outputs, eagerly and in a CUDA graph; its kernel and records stay in the test's own
    folders (the kernel cache and the db/ folder conftest.py makes per test), never in db/."""
    torch = pytest.importorskip("torch")
    import autotune
    from autotune.core import paths

    repository_db = Path(__file__).resolve().parents[2] / "db"
    before = sorted(p.name for p in repository_db.rglob("*"))
    assert paths.db_dir() != repository_db
    db = str(tmp_path / "t.db")
    api.sweep("srowsum", 512, 1000, trials=6, sampler="random", seed=1, db=db)
    A = torch.randn(512, 1000, device="cuda")
    expected = A.double().sum(1)
    for _ in range(2):  # the checked path, then the short one
        y = autotune.call("rowsum", A, db=db)
        assert torch.allclose(y.double(), expected, rtol=1e-5, atol=1e-3)
    out = torch.ones(512, device="cuda")
    assert autotune.call("rowsum", A, out=out, alpha=2.0, beta=1.0, db=db) is out
    assert torch.allclose(out.double(), 2 * expected + 1, rtol=1e-5, atol=2e-3)
    graph, captured = torch.cuda.CUDAGraph(), torch.empty(512, device="cuda")
    with torch.cuda.graph(graph):
        autotune.call("rowsum", A, out=captured, db=db)
    A.mul_(-1)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(captured.double(), -expected, rtol=1e-5, atol=1e-3)
    sources = {s.choice.source for s in api._RUNTIME.signatures() if s.choice.problem.op == "rowsum"}
    assert sources == {MEASURED}
    assert sorted(p.name for p in repository_db.rglob("*")) == before
