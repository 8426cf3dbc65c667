"""How autotune starts a Python child process of its own (a sweep tuning a miss, the timing worker)."""

from __future__ import annotations

import sys

# Run below Python 3.11, which has no -P: the first sys.path entry of `-c` is the current folder,
# removed before anything else is imported (runpy included), then the module runs as `-m` runs it.
_BOOTSTRAP = (
    "import sys\n"
    "if sys.path[:1] == ['']:\n"
    "    del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def module_command(module: str, *args: str) -> list[str]:
    """`python -m module args...` with no current folder on the child's module path: `-m` would put
    it first, so an `autotune/` folder (or a `runpy.py`) wherever the caller runs would stand in for
    the installed package. Unlike -I, this keeps PYTHONPATH and the user's site-packages, which a
    source checkout or a user install may need."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module, *args]
    return bootstrap_command(module, *args)


def bootstrap_command(module: str, *args: str) -> list[str]:
    """The form module_command takes below Python 3.11 (any version runs it: tests use it there)."""
    return [sys.executable, "-c", _BOOTSTRAP, module, *args]
