"""The deployable bundle on a GPU: export the bundle of this machine's GPU from the shipped records,
build examples/cpp/bundle_example.cpp with nvcc, and run it on problems that cover every kernel
family and launch feature the bundle holds (split-K workspace, clusters, TMA tensor maps, programmatic
launch, persistent grids, more than 48 KiB of shared memory, the transposed GEMV) and on shapes that
were not tuned; the program checks each result against a float64 reference on the host."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autotune import api, bundle
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import local_gpus
from autotune.core.problem import Problem

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "cpp" / "bundle_example.cpp"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, kernel_cache: Path) -> Iterator[tuple[bundle.Bundle, Path]]:
    if shutil.which("nvcc") is None:
        pytest.skip("building the example needs nvcc")
    gpus = local_gpus()
    if not gpus:
        pytest.skip("no NVIDIA GPU listed by nvidia-smi")
    folder = tmp_path_factory.mktemp("gpu-bundle")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_CACHE_DIR", str(kernel_cache))
        patch.setenv("XDG_DATA_HOME", str(folder / "data"))
        api.new_session()
        try:
            made = bundle.export_bundle(folder / "bundle", gpus[0].name, db=str(folder / "shipped.db"))
        except AutotuneError as exc:
            pytest.skip(f"no bundle for {gpus[0].name}: {exc}")
        finally:
            api.new_session()
    yield made, folder / "bundle"


def _libcuda_folder(scratch: Path) -> Path | None:
    """A folder with a libcuda.so for -lcuda where only the driver's libcuda.so.1 is installed."""
    listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    found = re.search(r"libcuda\.so\.1 \(.*x86-64.*\) => (\S+)", listed) or re.search(
        r"libcuda\.so\.1 .*=> (\S+)", listed
    )
    if found is None:
        return None
    scratch.mkdir(exist_ok=True)
    link = scratch / "libcuda.so"
    if not link.exists():
        link.symlink_to(found.group(1))
    return scratch


@pytest.fixture(scope="module")
def example(exported: tuple[bundle.Bundle, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bundle_example built with nvcc against the bundle's header, as examples/cpp/README.md says."""
    out = tmp_path_factory.mktemp("example")
    program = out / "bundle_example"
    command = ["nvcc", "-std=c++17", "-O2", "-I", str(exported[1]), str(EXAMPLE), "-o", str(program), "-lcuda"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 and "-lcuda" in done.stderr:
        folder = _libcuda_folder(out / "lib")
        if folder is not None:
            done = subprocess.run(
                [*command, "-L", str(folder)], capture_output=True, text=True, timeout=300, check=False
            )
    assert done.returncode == 0, done.stderr
    return program


def run_example(program: Path, folder: Path, problems: list[tuple[str, str, int, int, int, int]]) -> tuple[int, str]:
    args = [str(value) for problem in problems for value in problem]
    done = subprocess.run([str(program), str(folder), *args], capture_output=True, text=True, timeout=600, check=False)
    return done.returncode, done.stdout + done.stderr


def entry_lines(text: str) -> list[tuple[int, str]]:
    """(entry index, verdict) of each problem line the example printed."""
    return [(int(m.group(1)), m.group(2)) for m in re.finditer(r": entry (\d+) .*: (ok|WRONG)$", text, re.M)]


def as_args(problem: Problem) -> tuple[str, str, int, int, int, int]:
    return (problem.op, problem.dtype, problem.m, problem.n, problem.k, int(problem.trans))


def test_the_example_runs_the_bundles_first_gemv_and_gemm(example: Path, exported: tuple[bundle.Bundle, Path]) -> None:
    code, text = run_example(example, exported[1], [])
    assert code == 0, text
    assert "ok: 2 of 2 problems right" in text and len(entry_lines(text)) == 2


def _smallest(entries: list[bundle.Entry], wanted: Callable[[bundle.Entry], bool]) -> bundle.Entry | None:
    found = [e for e in entries if wanted(e)]
    return min(found, key=lambda e: e.problem.m * e.problem.n * max(1, e.problem.k), default=None)


FEATURES: dict[str, Callable[[bundle.Entry], bool]] = {
    "GEMV": lambda e: e.family == "gemv",
    "GEMV, split-K workspace": lambda e: e.family == "gemv" and e.launch.workspace_floats > 0,
    "GEMV, cluster": lambda e: e.family == "gemv" and e.cluster[1] > 1,
    "GEMV, persistent grid": lambda e: e.family == "gemv" and e.config.get("persist", 0) > 0,
    "GEMV, x in shared memory": lambda e: e.family == "gemv" and e.config.get("x_smem", 0) == 1,
    "transposed GEMV": lambda e: e.problem.trans,
    "transposed GEMV, split-K workspace": lambda e: e.problem.trans and e.launch.workspace_floats > 0,
    "transposed GEMV, cluster": lambda e: e.problem.trans and e.cluster[1] > 1,
    "skinny GEMM": lambda e: e.family == "skinny" and not e.problem.trans,
    "skinny_tc": lambda e: e.family == "skinny_tc",
    "skinny_tc, TMA": lambda e: e.family == "skinny_tc" and e.launch.operand_maps is not None,
    "skinny_tc, cluster": lambda e: e.family == "skinny_tc" and e.cluster[1] > 1,
    "skinny_tc, split-K workspace": lambda e: e.family == "skinny_tc" and e.launch.workspace_floats > 0,
    "simt": lambda e: e.family == "simt",
    "mma": lambda e: e.family == "mma",
    "wgmma, TMA": lambda e: e.family == "wgmma" and e.launch.operand_maps is not None,
    "wgmma, cp.async": lambda e: e.family == "wgmma" and e.launch.operand_maps is None,
    "more than 48 KiB of shared memory": lambda e: e.launch.shared_bytes > 48 * 1024,
    "float32": lambda e: e.problem.dtype == "float32",
    "bfloat16": lambda e: e.problem.dtype == "bfloat16",
}


def test_every_family_and_launch_feature_of_the_bundle_runs_right(
    example: Path, exported: tuple[bundle.Bundle, Path]
) -> None:
    made, folder = exported
    chosen = {name: _smallest(made.entries, wanted) for name, wanted in FEATURES.items()}
    entries = list({e.index: e for e in chosen.values() if e is not None}.values())
    assert {e.family for e in entries} >= {"gemv", "skinny"}
    code, text = run_example(example, folder, [as_args(e.problem) for e in entries])
    assert code == 0, text
    assert entry_lines(text) == [(e.index, "ok") for e in entries], text


def _untuned_neighbour(made: bundle.Bundle, entry: bundle.Entry) -> tuple[str, str, int, int, int, int] | None:
    """A shape near `entry`'s that was not tuned and that some entry runs."""
    p = entry.problem
    for m, n, k in ((p.m + 8, p.n, p.k), (p.m - 8, p.n, p.k), (p.m, p.n + 64, p.k), (p.m * 3 // 4, p.n, p.k)):
        found = bundle.find(made, p.op, p.dtype, m, n, k, p.trans) if m > 0 else None
        if found is not None and (found.problem.m, found.problem.n, found.problem.k) != (m, n, k):
            return (p.op, p.dtype, m, n, k, int(p.trans))
    return None


def test_shapes_that_were_not_tuned_run_the_nearest_entry_right(
    example: Path, exported: tuple[bundle.Bundle, Path]
) -> None:
    made, folder = exported
    seeds = [
        _smallest(made.entries, FEATURES[name]) for name in ("GEMV", "transposed GEMV", "skinny_tc", "skinny GEMM")
    ]
    problems = [p for p in (_untuned_neighbour(made, e) for e in seeds if e is not None) if p is not None]
    assert len(problems) >= 2
    code, text = run_example(example, folder, problems)
    assert code == 0, text
    expected = [bundle.find(made, op, dtype, m, n, k, bool(trans)) for op, dtype, m, n, k, trans in problems]
    assert entry_lines(text) == [(e.index, "ok") for e in expected if e is not None], text
    assert "nearest tuned" in text


def test_a_shape_no_entry_runs_fails_in_one_line(example: Path, exported: tuple[bundle.Bundle, Path]) -> None:
    made, folder = exported
    gemv = _smallest(made.entries, FEATURES["GEMV"])
    assert gemv is not None
    p = gemv.problem
    odd = (p.op, p.dtype, p.m, p.n + 1, 0, 0)
    if bundle.find(made, *odd[:5], False) is not None:
        pytest.skip("an entry of this bundle runs rows of odd length")
    code, text = run_example(example, folder, [odd])
    assert code == 1 and "no entry of the bundle runs this shape" in text and "FAILED: 0 of 1" in text
