"""SQLAlchemy 2.0 models of the tuning database; db/migrations/versions must match them exactly."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from autotune.core.outcome import Status
from autotune.core.problem import Problem as CoreProblem
from autotune.core.problem import split_inputs

# Explicit names, so the hand-written migration and later ALTERs can refer to every constraint.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def finite(value: float | None) -> float | None:
    """A number fit to store: NaN and infinities are not JSON, and SQLite turns NaN into NULL anyway."""
    return value if value is not None and math.isfinite(value) else None


def status_type() -> Enum:
    # Stored by value ("ok", not "OK") as a plain string: adding a status needs no ALTER TYPE.
    return Enum(
        Status,
        native_enum=False,
        length=16,
        values_callable=lambda statuses: [s.value for s in statuses],
        name="status",
    )


class _Lenient(TypeDecorator):  # type: ignore[type-arg]
    """A column that reads a value it cannot convert as None instead of failing the query: SQLite keeps
    whatever is written (a date of "not a date", a status of "weird", a time of "fast", by hand or by
    a damaged file), and one such row would otherwise fail every command that reads the table. The
    row checks (rows.readable) then skip it, as they skip a config that is not JSON. The stored type
    and what is written are the impl's."""

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        convert = super().result_processor(dialect, coltype)

        def read(value: Any) -> Any:
            try:
                return value if convert is None else convert(value)
            except (ValueError, LookupError, TypeError):
                return None

        return read


class LenientString(TypeDecorator):  # type: ignore[type-arg]
    """A text column read as text whatever SQLite keeps in it: a BLOB (a value cast by hand, bytes a
    damaged file holds) comes back as bytes, which readers trip over (sorted beside text, written as
    JSON, escaped as HTML). Decoded as UTF-8, unreadable bytes replaced, it reads as the text it almost
    always is, and the row checks take it from there. Stored and written as the impl's."""

    impl = String
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return bytes(value).decode("utf-8", "replace") if isinstance(value, bytes | bytearray | memoryview) else value


class LenientText(LenientString):
    impl = Text
    cache_ok = True


class LenientDateTime(_Lenient):
    impl = DateTime(timezone=True)
    cache_ok = True  # SQLAlchemy asks each class, not its base


class LenientFloat(_Lenient):
    impl = Float
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class LenientStatus(_Lenient):
    impl = status_type()
    cache_ok = True


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


# The GpuInfo fields a gpus row keeps (and a records file's GPU line carries).
GPU_FIELDS = ("name", "uuid", "compute_capability", "sm_count", "l2_bytes", "memory_bytes", "driver", "cuda")
# The columns of a problems row that name its core Problem, beside its GPU name. A core Problem's
# `inputs` (a tuple of dtypes) is the `input_dtypes` column, the dtypes joined by commas.
PROBLEM_FIELDS = ("op", "dtype", "m", "n", "k", "trans", "input_dtypes", "variant")


def problem_columns(problem: object) -> dict[str, Any]:
    """The problems-table columns that identify `problem` (a core Problem, a problems row, a row the
    store hands out), its GPU name aside."""
    if isinstance(problem, CoreProblem):
        return {**{name: getattr(problem, name) for name in PROBLEM_FIELDS[:6]}, **key_columns(problem)}
    return {name: getattr(problem, name) for name in PROBLEM_FIELDS}


def key_columns(problem: CoreProblem) -> dict[str, str]:
    """The columns of a core Problem's input dtypes and variant."""
    return {"input_dtypes": ",".join(problem.inputs), "variant": problem.variant}


def core_problem(row: object) -> CoreProblem:
    """The core Problem a problems row (or a row the store hands out) names, unchecked (rows.stored_problem checks)."""
    columns = {name: getattr(row, name) for name in PROBLEM_FIELDS}
    columns["inputs"] = split_inputs(columns.pop("input_dtypes"))
    return CoreProblem(**columns)


class Gpu(Base):
    """One physical GPU that measured trials (or a 'shipped:<slug>' stand-in for imported records)."""

    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(LenientString)
    uuid: Mapped[str] = mapped_column(LenientString, unique=True)
    compute_capability: Mapped[str] = mapped_column(LenientString)
    sm_count: Mapped[int] = mapped_column(Integer)
    l2_bytes: Mapped[int] = mapped_column(BigInteger)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    driver: Mapped[str] = mapped_column(LenientString)
    cuda: Mapped[str] = mapped_column(LenientString)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Problem(Base):
    """A shape tuned per GPU model: any physical GPU of that name may measure it."""

    __tablename__ = "problems"
    __table_args__ = (UniqueConstraint("gpu_name", *PROBLEM_FIELDS),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_name: Mapped[str] = mapped_column(LenientString)
    op: Mapped[str] = mapped_column(LenientString)
    dtype: Mapped[str] = mapped_column(LenientString)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # 0 for GEMV
    trans: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Each input array's dtype where they differ from `dtype`, joined by commas ("int4,float16"), and
    # the op's variant ("g128"): "" for a problem that names neither (core/problem.py).
    input_dtypes: Mapped[str] = mapped_column(LenientString, default="", server_default="")
    variant: Mapped[str] = mapped_column(LenientString, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Trial(Base):
    """One config measured (or ruled out) for one problem with one kernel source."""

    __tablename__ = "trials"
    # A config is measured once per problem and kernel source; a new source hash starts afresh.
    # AUTOINCREMENT: SQLite would otherwise hand a deleted row's id to the next new row, and a
    # process still holding the old id would finish someone else's trial.
    __table_args__ = (
        UniqueConstraint("problem_id", "config_key", "source_hash"),
        Index(None, "problem_id", "status"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    config_key: Mapped[str] = mapped_column(LenientString)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[Status] = mapped_column(LenientStatus())
    time_us: Mapped[float | None] = mapped_column(LenientFloat())
    times_us: Mapped[list[float]] = mapped_column(JSON)
    gbs: Mapped[float | None] = mapped_column(LenientFloat())
    rel_error: Mapped[float | None] = mapped_column(LenientFloat())
    # The SM and memory clocks (MHz) and board power (W) the GPU ran at while timed (NVML), where known.
    sm_mhz: Mapped[float | None] = mapped_column(Float)
    mem_mhz: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str] = mapped_column(LenientText, default="")
    source_hash: Mapped[str] = mapped_column(LenientString)
    nvcc: Mapped[str] = mapped_column(LenientString)
    pycuda: Mapped[str] = mapped_column(LenientString)
    driver: Mapped[str] = mapped_column(LenientString)
    cuda: Mapped[str] = mapped_column(LenientString)
    origin: Mapped[str] = mapped_column(LenientString)  # "measured" or "shipped:<records file name>"
    # Sets of freshly allocated buffers the config was measured on; time_us is the slowest of them
    # (autotune/tune/confirm.py).
    rounds: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The process measuring a running row, "host pid start-time token" (autotune/store/owner.py):
    # only a row whose owner is provably gone may be dropped. NULL on rows written before owners.
    owner: Mapped[str | None] = mapped_column(LenientString)
    created_at: Mapped[datetime] = mapped_column(LenientDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(LenientDateTime())


class Crash(Base):
    """How often a config killed its worker; kept apart from trials so that a retry does not reset it."""

    __tablename__ = "crashes"

    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    config_key: Mapped[str] = mapped_column(LenientString, primary_key=True)
    source_hash: Mapped[str] = mapped_column(LenientString, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)
    last_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReadFloor(Base):
    """The least time this GPU took to only read `nbytes` (autotune/measure/floor.py): no kernel that
    must read a matrix of that size can beat it, so results are shown against it."""

    __tablename__ = "read_floors"
    __table_args__ = (Index(None, "gpu_id", "nbytes"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_id: Mapped[int] = mapped_column(ForeignKey("gpus.id"))
    nbytes: Mapped[int] = mapped_column(BigInteger)
    time_us: Mapped[float] = mapped_column(Float)
    kernel: Mapped[str] = mapped_column(LenientString)  # the fastest read kernel variant
    driver: Mapped[str] = mapped_column(LenientString)
    cuda: Mapped[str] = mapped_column(LenientString)
    measured_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ShippedImport(Base):
    """A shipped records file already imported, by content hash: a changed file is imported again."""

    __tablename__ = "shipped_imports"

    file_name: Mapped[str] = mapped_column(LenientString, primary_key=True)
    sha256: Mapped[str] = mapped_column(LenientString)
    imported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ChangeCounter(Base):
    """One row counting every write to what the selector reads (gpus, problems, trials, shipped
    imports). In SQLite, triggers that migration 0008 creates keep it, whoever writes: the launch
    path compares it with the count its selection table was made at (autotune/store/selection_table.py) to
    answer without opening the store. Other databases keep the row but no triggers."""

    __tablename__ = "change_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    changes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class QUEUE:
    """States of a queue row: waiting, being tuned by its owner until its lease ends, tuned."""

    PENDING, CLAIMED, DONE = "pending", "claimed", "done"


class Queued(Base):
    """A problem to tune, shared by every machine of its GPU model: whichever claims it first tunes
    it, and renews its lease while it does; a claim whose lease ran out is anyone's to take over.
    `asked` counts how often the launch path met the problem untuned (`sweep --pending` takes the
    most-asked first)."""

    __tablename__ = "queue"
    __table_args__ = (Index(None, "state", "asked"),)

    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    state: Mapped[str] = mapped_column(LenientString(16))
    asked: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    first_asked: Mapped[datetime | None] = mapped_column(LenientDateTime())
    last_asked: Mapped[datetime | None] = mapped_column(LenientDateTime())
    owner: Mapped[str | None] = mapped_column(LenientString)  # autotune/store/owner.py's "host pid start token"
    lease_until: Mapped[datetime | None] = mapped_column(LenientDateTime())
    claims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # 2+: taken over
    queued_at: Mapped[datetime] = mapped_column(LenientDateTime(), default=utcnow)
    done_at: Mapped[datetime | None] = mapped_column(LenientDateTime())
