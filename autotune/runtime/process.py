"""The process's launch path as the library surface made it, for the modules of runtime/ that launch
on the process's behalf without a caller to hand it to them: torch's custom ops (torch_ops.py).

autotune.api makes the process's Runtime (only it knows the store and the selector a launch selects
from) and autotune.linear, and installs them here when it is imported; runtime/ sits below the
surface and never imports it. Importing any autotune module imports the package first, and with it
autotune.api, so they are installed before any module can ask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.runtime.launcher import Runtime


class Surface:
    """A plain class, not a dataclass: this module is loaded by `import autotune`, where a dataclass
    costs its generated methods' compilation."""

    __slots__ = ("launch_path", "linear")

    def __init__(self, launch_path: Callable[[], Runtime], linear: Callable[..., Any]) -> None:
        self.launch_path = launch_path  # autotune.api.launch_path: the process's Runtime
        self.linear = linear  # autotune.linear(x, weight, bias=None, *, db=None)


_INSTALLED: list[Surface] = []


def install(surface: Surface) -> None:
    """Called once, by autotune.api at its import."""
    _INSTALLED[:] = [surface]


def installed() -> Surface:
    if not _INSTALLED:  # only where autotune/__init__.py was bypassed
        raise RuntimeError("autotune.api has not installed the launch path: import autotune first")
    return _INSTALLED[0]
