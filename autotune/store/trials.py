"""A trial's row through its life: claimed, measured, finished; who may write it and when."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from autotune.core.outcome import Outcome, Status
from autotune.core.space import config_key
from autotune.store import models as orm
from autotune.store import owner as owners
from autotune.store.queries import find_trial
from autotune.store.rows import Provenance, as_utc

MEASURED = "measured"


def apply_outcome(trial: orm.Trial, outcome: Outcome) -> None:
    trial.status = outcome.status
    trial.message = outcome.message
    trial.time_us = orm.finite(outcome.time_us)
    trial.times_us = [t for t in outcome.times_us if math.isfinite(t)]
    trial.gbs = orm.finite(outcome.gbs)
    trial.rel_error = orm.finite(outcome.rel_error)
    set_clocks(trial, outcome)
    trial.finished_at = orm.utcnow()


def set_clocks(trial: orm.Trial, outcome: Outcome) -> None:
    trial.sm_mhz = orm.finite(outcome.sm_mhz)
    trial.mem_mhz = orm.finite(outcome.mem_mhz)
    trial.power_w = orm.finite(outcome.power_w)


def _measured_by_another(trial: orm.Trial, me: str) -> bool:
    """A running row another live process is measuring: it is left to that process."""
    if trial.status is not Status.RUNNING or trial.owner == me:
        return False
    return not owners.is_gone(trial.owner, as_utc(trial.created_at), orm.utcnow())


def _provenance(trial: orm.Trial, where: Provenance, config: Mapping[str, Any]) -> None:
    trial.gpu_id, trial.config, trial.origin = where.gpu_id, dict(config), MEASURED
    trial.nvcc, trial.pycuda = where.toolchain.nvcc, where.toolchain.pycuda
    trial.driver, trial.cuda = where.driver, where.cuda
    trial.rounds = 1


def begin(session: Session, where: Provenance, config: Mapping[str, Any], me: str) -> orm.Trial:
    """The row for this config, new or reset to running by `me` (a row a gone process left)."""
    key = config_key(config)
    trial = find_trial(session, where.problem_id, key, where.source_hash)
    if trial is None:
        trial = orm.Trial(problem_id=where.problem_id, config_key=key, source_hash=where.source_hash)
        session.add(trial)
    trial.owner = me
    _provenance(trial, where, config)
    trial.status, trial.message, trial.times_us = Status.RUNNING, "", []
    trial.time_us = trial.gbs = trial.rel_error = None
    trial.sm_mhz = trial.mem_mhz = trial.power_w = None
    trial.created_at, trial.finished_at = orm.utcnow(), None
    return trial


def claim(session: Session, where: Provenance, config: Mapping[str, Any], me: str) -> orm.Trial:
    """The row `me` measures this config on (see Store.start_trial for the rules)."""
    trial = find_trial(session, where.problem_id, config_key(config), where.source_hash)
    if trial is None or (trial.status is Status.RUNNING and not _measured_by_another(trial, me)):
        trial = begin(session, where, config, me)
    elif trial.status is not Status.RUNNING:
        trial.owner = me  # measured again: the stored outcome stands until ours replaces it
    session.flush()
    return trial


def finish(trial: orm.Trial, where: Provenance, config: Mapping[str, Any], outcome: Outcome, me: str) -> None:
    trial.owner = me
    _provenance(trial, where, config)
    apply_outcome(trial, outcome)
