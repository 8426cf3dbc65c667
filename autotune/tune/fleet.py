"""Sweeping through the shared queue: every sweep claims its problems one at a time from the
database (autotune/store/queue.py), so N machines running the same sweep into one database split
its problems between them, with no scheduler of our own. A machine renews its claim while it tunes;
one that dies leaves a claim whose lease runs out, and the next claim takes it over."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from autotune.core.errors import AutotuneError
from autotune.core.problem import Problem
from autotune.store.models import utcnow
from autotune.store.queue import Claim
from autotune.store.store import Store

LEASE_ENV = "AUTOTUNE_LEASE_S"
# Long enough that a busy database or a slow compile never lets a live claim lapse (it is renewed
# every third of it), short enough that a dead machine's problem is taken over within minutes.
DEFAULT_LEASE_S = 120.0
# The heartbeat renews every third of the lease with one write; under a second, one write that waits
# on the database for a moment lets a live claim lapse and another machine tunes the same problem.
MIN_LEASE_S = 1.0
# A dead machine's claim blocks its problem for this long: a week is past any wait worth having.
MAX_LEASE_S = 7 * 24 * 3600.0
# How often a sweep that has nothing to claim looks again while other machines hold its problems.
MAX_POLL_S = 5.0

log = logging.getLogger(__name__)


def lease(seconds: float | None = None) -> timedelta:
    """The claim lease: `seconds` (--lease), else $AUTOTUNE_LEASE_S, else two minutes. Anything but a
    number of seconds from MIN_LEASE_S to MAX_LEASE_S (nan and inf too) is refused in one line."""
    given = f"--lease {seconds!r}"
    if seconds is None:
        text = os.environ.get(LEASE_ENV, "").strip()
        given = f"{LEASE_ENV}={text!r}"
        try:
            seconds = float(text) if text else DEFAULT_LEASE_S
        except ValueError:
            seconds = math.nan  # refused below, with the range
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        seconds = math.nan  # from the API: a string or True is no number of seconds
    if not MIN_LEASE_S <= seconds <= MAX_LEASE_S:  # false for nan
        raise AutotuneError(
            f"the claim lease must be a positive number of seconds from {MIN_LEASE_S:g} to {MAX_LEASE_S:g} "
            f"(a week), got {given}"
        )
    return timedelta(seconds=seconds)


class Heartbeat:
    """Renews a claim's lease every third of it, in a thread, while the problem is tuned."""

    def __init__(self, store: Store, claim: Claim, lease: timedelta) -> None:
        self._store, self._claim, self._lease = store, claim, lease
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name=f"lease {claim.problem}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._lease.total_seconds() / 3):
            try:
                held = self._store.renew_claim(self._claim, self._lease)
            except AutotuneError as exc:  # a database hiccup: the next beat tries again
                log.warning("%s: could not renew the claim: %s", self._claim.problem, exc)
                continue
            if not held and not self.lost:
                self.lost = True
                log.warning("%s: the claim's lease ran out and another machine took it over", self._claim.problem)


def claims(
    store: Store,
    gpu_name: str,
    problems: Sequence[Problem] | None,
    lease: timedelta,
    *,
    on_wait: Callable[[int], None] | None = None,
) -> Iterator[Claim]:
    """Claim the problems one at a time: those of `problems` (queued first), else the queue's
    pending ones, most asked first. While other live machines hold the rest, wait for them to
    finish or for their leases to run out; end when nothing is left."""
    among = None if problems is None else store.enqueue(gpu_name, problems)
    since = utcnow()
    poll = min(MAX_POLL_S, lease.total_seconds() / 4)
    while True:
        look = store.claim_next(gpu_name, lease, among=among, since=since)
        if look.claim is not None:
            yield look.claim
            continue
        if look.held_by_others == 0:
            return
        log.info("waiting for %d problems other machines are tuning", look.held_by_others)
        if on_wait is not None:
            on_wait(look.held_by_others)
        time.sleep(poll)


@contextmanager
def holding(store: Store, claim: Claim, lease: timedelta) -> Iterator[Heartbeat]:
    """Keep the claim alive while the block runs; done when it ends, back to pending if it raises
    (an interrupted sweep leaves the problem to the next machine at once, not after the lease)."""
    done = False
    try:
        with Heartbeat(store, claim, lease) as beat:
            yield beat
        done = True
    finally:
        try:
            if not store.release_claim(claim, done=done) and done:
                log.warning("%s: tuned, but another machine holds its claim now", claim.problem)
        except AutotuneError as exc:
            if done:
                raise
            log.warning("%s: could not release the claim: %s", claim.problem, exc)
