"""A library family: a kernel family whose kernels are a vendor library's (cuBLASLt's algorithms),
chosen among the library's own for each problem instead of compiled from a template of ours.

Such a family is registered beside the ops (autotune/ops/__init__.py: register_library) and is one
more family to every stage: the tuner times its candidates with the worker (autotune/tune/libraries.py),
the worker and the launch path run them through the family's own plan, the store keeps them as
trials whose config is {config_key: rank} and whose source hash is the library's version, and the
records, reports and displays ask the registry what a config or source is. Only the family's folder
and the selection policy (autotune/select/choose.py: when the library's time beats ours) know which
library it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol

from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.core.space import Config

if TYPE_CHECKING:
    from autotune.gpu.device import Allocator, Device


class LibraryPlan(Protocol):
    """What the launch path runs for a library config, as it runs a LaunchPlan: made once per
    problem, layout and device, launched on any stream from any thread."""

    needs_scratch: bool  # whether it takes split-K scratch (a library's workspace is its own)
    workspace_bytes: int  # the workspace each stream (and capture) needs

    def launch(
        self, pointers: tuple[int, ...], alpha: float, beta: float, stream: int, allocator: Allocator | None
    ) -> None: ...


class Library(ABC):
    """A vendor library as a kernel family: its configs rank the library's candidates for a problem."""

    name: ClassVar[str]  # the family's name in results and displays: "cublas"
    label: ClassVar[str]  # how people know the library: "cuBLASLt"
    config_key: ClassVar[str]  # its configs are {config_key: rank}
    source_prefix: ClassVar[str]  # a trial's source hash: this and the library's version
    max_candidates: ClassVar[int]  # the most ranks it offers a problem

    def owns(self, config: Mapping[str, object]) -> bool:
        """Whether `config` names one of this library's candidates."""
        return self.config_key in config

    def owns_source(self, source_hash: str) -> bool:
        """Whether a trial of this source hash timed this library (any version)."""
        return source_hash.startswith(self.source_prefix)

    def config(self, rank: int) -> Config:
        return {self.config_key: rank}

    def rank_of(self, config: Mapping[str, object]) -> int:
        """The rank a config of this library names; a one-line error for anything else."""
        value = config.get(self.config_key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < self.max_candidates:
            raise AutotuneError(
                f"a {self.name} config is {{{self.config_key!r}: 0..{self.max_candidates - 1}}}, not {dict(config)}"
            )
        return value

    def describe(self, config: Mapping[str, object]) -> str:
        """The config for people: "cuBLASLt algorithm 2"."""
        return f"{self.label} algorithm {self.rank_of(config)}"

    @abstractmethod
    def serves(self, problem: Problem) -> bool:
        """Whether the library computes problems of this op and form."""

    @abstractmethod
    def enabled(self) -> bool:
        """Whether the library takes part in sweeps and selection (an environment switch)."""

    @abstractmethod
    def fingerprint(self) -> str | None:
        """This machine's library as a trial's source hash (prefix and version), None where it has none."""

    @abstractmethod
    def candidates(self, device: Device, problem: Problem) -> int:
        """How many candidates (ranks 0..n-1) the library offers for `problem` on `device`, as the
        launch path's aligned plans ask for them."""

    @abstractmethod
    def plan(
        self,
        device: Device,
        problem: Problem,
        config: Mapping[str, int],
        aligned: bool,
        leading: tuple[int, ...] | None,
        order: tuple[int, ...],
    ) -> LibraryPlan:
        """The plan that runs `config` for `problem` on `device`: with `aligned` for 16-byte aligned
        arrays and rows, for matrices whose rows lie `leading` elements apart (None: contiguous),
        the call's inputs taken in `order`."""
