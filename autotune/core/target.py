"""Which GPUs an answer is for: spaces, kernel families and their source hashes depend on the
compute capability (thread-block clusters from 9.0 on, wgmma on 9.0 only), and a question may be
about another GPU than this machine's (`autotune best --gpu "NVIDIA H200"` on a laptop).

`targeting(cc)` sets the compute capability for what runs inside it; outside, answers are for this
machine's GPUs, or, on a machine without one, for the GPUs the shipped records come from.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from autotune.core import fingerprint
from autotune.core.errors import AutotuneError

# How CUDA writes a compute capability ("9.0", "12.1"): the major number becomes an int and the
# whole an nvcc architecture (sm_90), so nothing else (a records file's "abc", "9.0 -Xcompiler")
# may steer a space, a kernel family or a compile.
_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")

_TARGET: ContextVar[tuple[str, ...] | None] = ContextVar("autotune_target", default=None)


def target_capabilities() -> tuple[str, ...]:
    """The compute capabilities ("9.0") answers are built for: the one `targeting` set, else this
    machine's GPUs' (() without a GPU)."""
    chosen = _TARGET.get()
    return chosen if chosen is not None else fingerprint.local_compute_capabilities()


@contextmanager
def targeting(capability: str | None) -> Iterator[None]:
    """Build spaces, families and source hashes for a GPU of `capability` ("9.0") inside the block;
    None leaves the current target as it is."""
    if capability is None:
        yield
        return
    check_capability(capability)
    token = _TARGET.set((capability,))
    try:
        yield
    finally:
        _TARGET.reset(token)


def check_capability(capability: object) -> str:
    """`capability` where it is a compute capability as CUDA writes it; AutotuneError otherwise (a GPU
    row of a damaged database or a records file)."""
    if not isinstance(capability, str) or _CAPABILITY.fullmatch(capability) is None:
        shown = repr(capability) if len(repr(capability)) <= 40 else repr(capability)[:37] + "..."
        raise AutotuneError(f'compute capability {shown} is not a CUDA one (major.minor, as "9.0")')
    return capability
