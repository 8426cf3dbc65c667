"""The rows the selector reads, one set for both of its sources: the store (a snapshot read in one
transaction) and the selection table (selection_table.py) that keeps the same rows in a file. Plain
frozen dataclasses, importing neither SQLAlchemy nor sqlite3: the launch path reads them from the table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.core.problem import Problem


@dataclass(frozen=True)
class SelectionGpu:
    """What the selector reads of a stored GPU (the store's GpuRow has these fields and more)."""

    name: str
    compute_capability: str
    sm_count: int


@dataclass(frozen=True)
class RankedTrial:
    """An OK trial as the selector ranks it: its config and time, and what measured it."""

    config: dict[str, Any]
    time_us: float
    gbs: float | None
    source_hash: str
    driver: str
    cuda: str


@dataclass(frozen=True)
class SelectedTrial(RankedTrial):
    """A ranked trial with the problem it measured: what the selection table answers as a problem's
    best or a leader (the store answers with its BestRow and TrialRow, which have these fields)."""

    gpu_name: str
    problem: Problem

    @property
    def m(self) -> int:
        return self.problem.m

    @property
    def n(self) -> int:
        return self.problem.n


@dataclass(frozen=True)
class SelectionRows:
    """Everything the selector reads of a database, read in one transaction: every GPU, every problem
    with its fastest OK trials of each kernel source (fastest first, over all sources), the shipped
    records files imported (name -> SHA-256), and the change count the rows were read at (None where
    the database keeps none)."""

    gpus: list[SelectionGpu]
    problems: list[tuple[str, Problem, list[RankedTrial]]]  # (GPU name, problem, its trials)
    shipped: dict[str, str]
    changes: int | None
