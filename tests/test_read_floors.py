"""Read floors stored beside the trials: the least time a GPU took to only read a size."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.store import open_store

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
OTHER_H200 = GpuInfo("NVIDIA H200", "GPU-2222", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")


def test_the_least_floor_of_a_size_on_gpus_of_a_name_is_answered(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "t.db"), import_shipped=False) as store:
        assert store.read_floor("NVIDIA H200", 64 * 2**20) is None
        store.record_read_floor(H200, 64 * 2**20, 14.2, "grid 4x256 u8")
        store.record_read_floor(OTHER_H200, 64 * 2**20, 13.9, "grid 2x512 u8")
        store.record_read_floor(H200, 2**20, 2.1, "grid 1x256 u4")
        assert store.read_floor("NVIDIA H200", 64 * 2**20) == 13.9
        assert store.read_floor("NVIDIA H200", 2**20) == 2.1
        assert store.read_floor("NVIDIA H100 80GB HBM3", 2**20) is None
        assert store.gpu_names() == ["NVIDIA H200"]


@pytest.mark.parametrize(("nbytes", "time_us"), [(0, 1.0), (2**20, 0.0), (2**20, float("nan")), (2**20, float("inf"))])
def test_a_floor_that_cannot_be_is_refused(tmp_path: Path, nbytes: int, time_us: float) -> None:
    with open_store(str(tmp_path / "t.db"), import_shipped=False) as store:
        with pytest.raises(AutotuneError, match="read floor"):
            store.record_read_floor(H200, nbytes, time_us, "grid")
        assert store.read_floor("NVIDIA H200", max(nbytes, 1)) is None
