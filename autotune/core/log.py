"""autotune's logging: every module logs to a child of the `autotune` logger, which the library
leaves without a handler (Python's convention); the CLI's -v / -q, the AUTOTUNE_LOG variable
(DEBUG, INFO, WARNING or ERROR) or the caller's own logging configuration decide what is shown."""

from __future__ import annotations

import logging
import os
import sys

from autotune.core.errors import AutotuneError

LOGGER = "autotune"
LOG_VAR = "AUTOTUNE_LOG"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_HANDLER_NAME = "autotune-stderr"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to sys.stderr as it is then, not as it was when the handler was installed:
    a program (or a test) that swaps sys.stderr, or closes the old one, still gets autotune's lines
    instead of a "Logging error" on a closed stream."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # emit runs under the handler's lock, so the swap is safe
        super().emit(record)


def env_level() -> int | None:
    """The level AUTOTUNE_LOG names, or None where it is unset or empty."""
    value = os.environ.get(LOG_VAR, "").strip().upper()
    if not value:
        return None
    if value not in LEVELS:
        raise AutotuneError(f"{LOG_VAR}={value.lower()!r}: choose one of {', '.join(LEVELS)}")
    return int(getattr(logging, value))


def show_on_stderr(level: int, prefix: str = "") -> None:
    """Send the `autotune` logger's records of `level` and above to stderr, one line each (once),
    each after `prefix` (a sweep process of one GPU names its GPU)."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    if not any(handler.get_name() == _HANDLER_NAME for handler in logger.handlers):
        handler = _StderrHandler(sys.stderr)
        handler.set_name(_HANDLER_NAME)
        form = f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s"
        handler.setFormatter(logging.Formatter(form, "%H:%M:%S"))
        logger.addHandler(handler)


def cli_level(verbose: int, quiet: bool) -> int:
    """The CLI's level: -q errors only, -v INFO, -vv DEBUG; else AUTOTUNE_LOG's, else WARNING (a bad
    AUTOTUNE_LOG was reported when autotune was imported)."""
    if quiet:
        return logging.ERROR
    if verbose:
        return logging.INFO if verbose == 1 else logging.DEBUG
    try:
        return env_level() or logging.WARNING
    except AutotuneError:
        return logging.WARNING


def configure_from_env() -> None:
    """At import: stderr output at AUTOTUNE_LOG's level where it is set, and a NullHandler on the
    `autotune` logger (Python's convention for libraries). A bad value is one warning line (logged
    before the NullHandler, so Python's last-resort handler prints it), not a failed import."""
    logger = logging.getLogger(LOGGER)
    try:
        level = env_level()
    except AutotuneError as bad:
        logger.warning("%s; logging stays at WARNING", bad)
        level = None
    logger.addHandler(logging.NullHandler())
    if level is not None:
        show_on_stderr(level)
