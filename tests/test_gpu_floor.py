"""GPU tests of the read floor (autotune/measure/floor.py): every read kernel reads exactly the words it is
given, all of them, none beyond; and the benchmark's floor comes from one of them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.measure.floor import VARIANTS, ReadKernels

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("words", [1, 333, 3 * 8 * 512 + 5, 1 << 16])
def test_every_read_kernel_reads_every_word_and_no_more(words: int) -> None:
    from autotune.measure.pycuda_gpu import Kernels, context, device_info, driver

    context()
    cuda = driver()
    kernels = ReadKernels(device_info(), Kernels())
    # Words past the read stay in the buffer, non-zero: a kernel that read them would change the XOR.
    data = np.random.default_rng(words).integers(1, 2**32, size=(words + 4096) * 4, dtype=np.uint32)
    want = np.bitwise_xor.reduce(data[: words * 4])
    buffer, out = cuda.to_device(data), cuda.mem_alloc(8)
    got = np.empty(2, dtype=np.uint32)
    for variant in VARIANTS:
        cuda.memset_d32(out, 0, 2)
        kernels.launch(variant, int(buffer), words, int(out), check=True)
        cuda.memcpy_dtoh(got, out)
        assert got[0] == want, f"{variant.describe()} read the wrong words"


def test_the_benchmark_floor_is_one_of_the_read_kernels() -> None:
    pytest.importorskip("torch")
    from autotune.bench.compare import Bench

    bench = Bench()
    floor = bench.read_floor(2 * 2**20)
    assert math.isfinite(floor.us) and floor.us > 0
    assert floor.kernel in {v.describe() for v in VARIANTS}
    assert bench.read_floor(2 * 2**20) is floor  # measured once per size
