"""Programmatic dependent launch by ctypes (autotune/gpu/driver.py, autotune/measure/pdl.py): the structures
match cuda.h, arguments are packed as PyCUDA's prepare() notation says, and only ops that wait for their
predecessor use it."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from autotune import ops
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.gpu import driver
from autotune.measure import pdl
from autotune.measure.pycuda_gpu import programmatic_launch
from autotune.ops import gemm, gemv
from autotune.ops.gemv import narrow, transposed

LAYOUT_PROGRAM = r"""
#include <cuda.h>
#include <cstddef>
#include <cstdio>
int main() {
  printf("%zu %zu %zu %zu %zu %zu %zu %d %d %zu %zu\n", sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
         sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes), offsetof(CUlaunchConfig, hStream),
         offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),
         (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (int)CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
         offsetof(CUlaunchAttributeValue, clusterDim.y), offsetof(CUlaunchAttributeValue, clusterDim.z));
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_structures_match_cuda_h(tmp_path: Path) -> None:
    source = tmp_path / "layout.cpp"
    source.write_text(LAYOUT_PROGRAM)
    binary = tmp_path / "layout"
    subprocess.run(["nvcc", "-o", str(binary), str(source)], check=True, capture_output=True)
    printed = [int(v) for v in subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.split()]
    ours = [
        ctypes.sizeof(driver.LaunchAttribute),
        driver.LaunchAttribute.value.offset,
        ctypes.sizeof(driver.LaunchConfig),
        driver.LaunchConfig.shared_bytes.offset,
        driver.LaunchConfig.stream.offset,
        driver.LaunchConfig.attrs.offset,
        driver.LaunchConfig.num_attrs.offset,
        driver.programmatic_attribute().id,
        driver.cluster_attribute(1, 2, 1).id,
        4,  # clusterDim's y and z after x, 4 bytes each (cluster_attribute packs "<3I")
        8,
    ]
    assert ours == printed


def test_the_attribute_allows_programmatic_serialization() -> None:
    attribute = driver.programmatic_attribute()
    raw = ctypes.string_at(ctypes.addressof(attribute), ctypes.sizeof(attribute))
    assert int.from_bytes(raw[:4], "little") == attribute.id == 6
    value = raw[driver.LaunchAttribute.value.offset :]
    assert int.from_bytes(value[:4], "little") == 1  # programmaticStreamSerializationAllowed
    assert value[4:] == bytes(60)


def test_the_cluster_attribute_holds_its_three_dimensions() -> None:
    attribute = driver.cluster_attribute(2, 4, 1)
    raw = ctypes.string_at(ctypes.addressof(attribute), ctypes.sizeof(attribute))
    assert int.from_bytes(raw[:4], "little") == attribute.id == 4
    value = raw[driver.LaunchAttribute.value.offset :]
    assert [int.from_bytes(value[i : i + 4], "little") for i in (0, 4, 8)] == [2, 4, 1] and value[12:] == bytes(52)


class Address:
    """Like a PyCUDA DeviceAllocation: int() gives the device address."""

    def __int__(self) -> int:
        return 0xDEADBEEF00


def test_arguments_are_packed_by_their_prepare_letters() -> None:
    values = pdl.argument_values("PPPiiffPP", (Address(), 16, 0, 7, -3, 0.5, 2, Address(), 0))
    assert [type(v) for v in values] == [ctypes.c_uint64] * 3 + [ctypes.c_int32] * 2 + [ctypes.c_float] * 2 + [
        ctypes.c_uint64
    ] * 2
    assert [v.value for v in values] == [0xDEADBEEF00, 16, 0, 7, -3, 0.5, 2.0, 0xDEADBEEF00, 0]
    with pytest.raises(TypeError, match="takes 2 arguments"):
        pdl.argument_values("Pi", (1,))


def _gpu(compute_capability: str) -> GpuInfo:
    return GpuInfo("GPU", "uuid", compute_capability, 132, 50 << 20, 80 << 30, "580", "13.0")


def test_only_waiting_kernels_on_sm_90_and_up_launch_programmatically() -> None:
    plain, square = Problem("gemv", "float16", 4096, 8192), Problem("gemm", "float16", 4096, 4096, 4096)
    assert programmatic_launch(gemv.OP, _gpu("9.0"), plain)
    assert programmatic_launch(gemv.OP, _gpu("10.0"), plain)
    assert not programmatic_launch(gemv.OP, _gpu("8.0"), plain)  # no griddepcontrol before Hopper
    assert not programmatic_launch(gemm.OP, _gpu("9.0"), square)  # GEMM kernels do not wait for their predecessor


def test_the_transposed_gemv_launches_as_its_family_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transposed GEMV routes problems to families of their own kernels: whether a launch is
    programmatic is the family's, and the worker's plan, the runtime's plan and a bundle entry all
    ask the op for the problem at hand."""
    square, thin = (
        Problem("gemv", "float16", 4096, 4096, trans=True),
        Problem("gemv", "float16", 16384, 12, trans=True),
    )
    op = ops.for_problem(square)
    assert transposed.family_of(square) is narrow and transposed.family_of(thin) is not narrow
    assert op.waits_for_prior_grid(square) and not op.waits_for_prior_grid(thin)
    assert programmatic_launch(op, _gpu("9.0"), square) and not programmatic_launch(op, _gpu("8.0"), square)
    assert not programmatic_launch(op, _gpu("9.0"), thin)
    assert op.plan(square, op.default_config(square), _gpu("9.0")).programmatic
    assert not op.plan(thin, op.default_config(thin), _gpu("9.0")).programmatic
    monkeypatch.setattr(narrow, "WAITS_FOR_PRIOR_GRID", False)  # as a family whose kernels read at once would say
    assert not op.waits_for_prior_grid(square) and not programmatic_launch(op, _gpu("9.0"), square)


def test_the_driver_is_opened_in_one_module_only() -> None:
    """One binding of libcuda (autotune/gpu/driver.py): the launch path, the worker's programmatic
    launches and the tensor-map encoder all call through it, so its signatures are the only ones."""
    package = Path(__file__).resolve().parents[1] / "autotune"
    opening = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "libcuda.so" in path.read_text() and "CDLL(" in path.read_text()
    )
    assert opening == ["gpu/driver.py"]
    assert "cuTensorMapEncodeTiled" in driver._SIGNATURES and not hasattr(pdl, "_libcuda")


def test_the_workers_side_imports_neither_the_launch_path_nor_the_selector() -> None:
    """measure/ (what the worker runs) sits below runtime/ and select/: the comparison with cuBLAS,
    which needs both, lives above them in bench/."""
    package = Path(__file__).resolve().parents[1] / "autotune"
    reaching = sorted(
        f"{path.relative_to(package)}: {line.strip()}"
        for path in (package / "measure").rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("from autotune.runtime", "from autotune.select", "import autotune.runtime"))
    )
    assert reaching == []


def test_the_gpu_layer_imports_nothing_above_core() -> None:
    """gpu/ (the driver binding, launch geometry, tensor maps, device state, launch plans) is the bottom
    layer above core/: ops, the worker and the launch path build on it, never the other way. A library
    family's handle and workspaces are kept by the device for any library (the family's plan asks)."""
    package = Path(__file__).resolve().parents[1] / "autotune"
    allowed = ("from autotune.core", "from autotune.gpu", "import autotune.core")
    reaching = sorted(
        f"{path.relative_to(package)}: {line.strip()}"
        for path in (package / "gpu").rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("from autotune", "import autotune")) and not line.lstrip().startswith(allowed)
    )
    assert reaching == []
