"""One module per operation; each is pure Python (no GPU): space, constraints, geometry, source."""

from __future__ import annotations

from types import ModuleType

from autotune.errors import AutotuneError
from autotune.ops import gemv

_OPS: dict[str, ModuleType] = {gemv.NAME: gemv}


def get(op: str) -> ModuleType:
    try:
        return _OPS[op]
    except KeyError:
        raise AutotuneError(f"unknown op {op!r}: choose one of {', '.join(_OPS)}") from None
