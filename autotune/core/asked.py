"""How often the launch path met a problem untuned: what it hands the store's queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Asked:
    """Calls of an untuned problem since the last count was written, and when first and last."""

    count: int
    first: datetime
    last: datetime
