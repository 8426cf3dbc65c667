"""Untuned problems the launch path meets: counted in memory, written to the database's queue by a
background thread (and once more at exit), so that `autotune sweep --pending` tunes the most-asked
first. Best effort by design: counting costs a launch one attribute test and one addition, nothing
touches the database on the launch path (so a call inside a CUDA graph capture is unaffected), a
read-only database is left alone, and a failed write only leaves the counts to the next flush."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

from autotune.core.asked import Asked
from autotune.core.problem import Problem
from autotune.select.choose import MEASURED, Choice

COUNT_ENV = "AUTOTUNE_COUNT_MISSES"  # "0": count nothing
FLUSH_S = 30.0

log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


# Writes one database's counts of one GPU model: (db, gpu name, counts).
Writer = Callable[[str | None, str, Mapping[Problem, Asked]], None]
# Told of each new call signature of an untuned problem, counted or not (tuning on a miss).
OnMiss = Callable[[Choice, str | None], None]


@dataclass
class Tally:
    """Calls of one untuned problem; a call signature holds it and adds one per launch."""

    count: int = 0
    written: int = 0
    first: datetime = field(default_factory=_utcnow)


class Misses:
    def __init__(self, write: Writer, every_s: float = FLUSH_S, on_miss: OnMiss | None = None) -> None:
        self._write, self._every, self._on_miss = write, every_s, on_miss
        self._tallies: dict[tuple[str | None, str, Problem], Tally] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # the thread's flush and the exit hook's never overlap
        self._started = False
        self._stop = threading.Event()

    @staticmethod
    def enabled() -> bool:
        return os.environ.get(COUNT_ENV, "1").strip() != "0"

    def tally(self, choice: Choice, db: str | None) -> Tally | None:
        """The tally to count `choice`'s calls on, or None for a measured problem (or counting off).
        Called once per call signature, off the short path: `on_miss` hears of the problem here."""
        if choice.source == MEASURED:
            return None
        if self._on_miss is not None:
            self._on_miss(choice, db)
        if not self.enabled():
            return None
        key = (db, choice.gpu, choice.problem)
        with self._lock:
            found = self._tallies.get(key)
            if found is None:
                found = self._tallies[key] = Tally()
                self._start()
        return found

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        threading.Thread(target=self._run, name="autotune misses", daemon=True).start()
        atexit.register(self.close)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()

    def flush(self) -> None:
        """Write the calls counted since the last flush, per database and GPU model."""
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
        # The launch path reads no clock: a problem was last asked for by the flush that found its
        # count grown, so "last asked" is as fine as the flush interval.
        now = _utcnow()
        batches: dict[tuple[str | None, str], dict[Problem, tuple[Tally, int]]] = {}
        with self._lock:
            for (db, gpu, problem), tally in self._tallies.items():
                count = tally.count  # read once: launches may add to it meanwhile
                if count > tally.written:
                    batches.setdefault((db, gpu), {})[problem] = (tally, count)
        for (db, gpu), found in batches.items():
            asked = {
                problem: Asked(count - tally.written, tally.first, now) for problem, (tally, count) in found.items()
            }
            try:
                self._write(db, gpu, asked)
            except Exception as exc:  # best effort: the counts stay for the next flush
                log.debug("could not write the untuned problems' counts to %s: %s", db or "the database", exc)
                continue
            for tally, count in found.values():
                tally.written = count
