"""Which GPUs an answer is for: spaces, kernel families and their source hashes depend on the
compute capability (thread-block clusters from 9.0 on, wgmma on 9.0 only), and a question may be
about another GPU than this machine's (`autotune best --gpu "NVIDIA H200"` on a laptop).

`targeting(cc)` sets the compute capability for what runs inside it; outside, answers are for this
machine's GPUs, or, on a machine without one, for the GPUs the shipped records come from.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from autotune.core import fingerprint

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
    token = _TARGET.set((capability,))
    try:
        yield
    finally:
        _TARGET.reset(token)
