"""GPU models described by name (db/gpus.json): what `best --gpu` needs to answer for a GPU with no
record of its own, above all its compute capability, which decides the kernel families that run
there (wgmma on 9.0 only; clusters, TMA and programmatic launch from 9.0 on)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from autotune.core import paths
from autotune.core.errors import AutotuneError


@dataclass(frozen=True)
class GpuModel:
    name: str
    compute_capability: str
    sm_count: int
    l2_bytes: int
    memory_bytes: int
    max_shared_per_block: int


def described() -> dict[str, GpuModel]:
    """Every described model by its name, as nvidia-smi writes it."""
    return _read(paths.db_dir() / "gpus.json")


@functools.cache
def _read(path: Path) -> dict[str, GpuModel]:
    try:
        entries = json.loads(path.read_text())["gpus"]
        models = [GpuModel(**entry) for entry in entries]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AutotuneError(f"the GPU descriptions {path} cannot be read: {exc}") from None
    return {model.name: model for model in models}


def capability(name: str) -> str | None:
    """The compute capability of a described model, None for any other name."""
    model = described().get(name)
    return None if model is None else model.compute_capability
