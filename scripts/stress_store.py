"""Store stress on the CPU: concurrent sweeps, readers, an importer and SIGKILLs, then every time checked.

Sweeps use a fake worker whose time for a config is known, so every stored time is checked against it.
Beside them, a fleet of claiming sweeps (tests/fleet_sweeper.py, one killed) splits six problems
through the queue: no config may be measured by two of them, no problem tuned twice.

    python scripts/stress_store.py                     # 60 s on SQLite; writes results/stress_store.json
    python scripts/stress_store.py --seconds 10 --out /tmp/stress.json
    python scripts/stress_store.py --url postgresql+psycopg://u:pw@host/empty_db --out /tmp/pg.json
    python scripts/stress_store.py --namespaces        # every process in a pid namespace of its own

With --namespaces (Linux, as root) every process runs in a pid namespace of its own, as containers
with host networking do: one host name, pids that mean nothing to the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.bench.harness import write_json  # noqa: E402
from autotune.build.compiler import CompileJob, CompileResult  # noqa: E402
from autotune.core.fingerprint import GpuInfo  # noqa: E402
from autotune.core.outcome import Outcome, Status  # noqa: E402
from autotune.core.problem import Problem  # noqa: E402
from autotune.core.space import config_key  # noqa: E402
from autotune.ops import source_hash  # noqa: E402

GPU = GpuInfo("Stress GPU", "GPU-stress-0", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
PROBLEMS = (
    Problem("gemv", "float16", 4096, 4096),
    Problem("gemv", "float32", 2048, 8192),
    Problem("gemv", "bfloat16", 8192, 1024),
)
# The importer's new trials go to shapes of their own: the same database and lock as the sweeps, but
# the sweeps' studies (which replay every stored trial into Optuna) do not grow by its thousands.
IMPORTED = (Problem("gemv", "float16", 1024, 1024), Problem("gemv", "float32", 4096, 4096))
MEASURE_SECONDS = 0.01  # what the fake worker takes per config
NEW_PER_ROUND = 8  # new trials per problem and round: a round stays short, so a stop is prompt
KILL_EVERY = (2.0, 5.0)  # seconds between SIGKILLs of a random writer
READ_PAUSE = 0.05  # between a reader's queries: four readers that never pause would starve two cores
IMPORT_PAUSE = 0.1  # between the importer's rounds, for the same reason
CLI_EVERY = 10.0  # seconds between a reader's runs of the real command line (each starts Python)
SWEEPER = REPO / "tests" / "fleet_sweeper.py"
SWEEPERS = 3  # claiming sweeps of SWEEPER's six problems; the first is killed after KILL_SWEEPER_AFTER trials
KILL_SWEEPER_AFTER = 3
SWEEPER_TRIALS = 10
# Long, so that a heartbeat held up on a loaded two-core machine never loses a live claim; the killed
# sweeper's claim is taken over at once on one host, after this lease across pid namespaces.
SWEEPER_LEASE_S = 15.0
SWEEPER_GPU = "Fleet GPU"  # SWEEPER's GPU model: its queue rows and trials are apart from the stress GPU's
# Killing `unshare` kills the process inside with it.
OWN_PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def expected_us(problem: Problem, key: str) -> float:
    """The fake worker's time for a config: distinct for every problem and config, so any time
    stored on another config's row shows."""
    digest = hashlib.sha256(f"{problem}|{key}".encode()).digest()
    return 5.0 + int.from_bytes(digest[:4], "little") / 2**32 * 45.0


class FakeWorker:
    def __init__(self) -> None:
        self.problem = PROBLEMS[0]

    def ready(self) -> None:
        pass

    def setup(self, problem: Problem, seed: int, fresh_memory: bool = False) -> dict[str, object]:
        self.problem = problem
        return {}

    def measure(self, cubin: Path, kernel: str, config: dict[str, int], timeout: float = 60.0) -> Outcome:
        time.sleep(MEASURE_SECONDS)
        t = expected_us(self.problem, config_key(config))
        return Outcome(Status.OK, time_us=t, times_us=[t], gbs=1.0)


class InstantPool:
    """CompilePool's interface; every job 'compiles' at once and nothing is run."""

    workers = 4

    def submit(self, job: CompileJob) -> Future[CompileResult]:
        future: Future[CompileResult] = Future()
        future.set_result(CompileResult(job, Path("fake.cubin"), "", 0.0, False))
        return future


# --- the roles, each run in its own process -------------------------------------------------------


def writer(db: str, journal: Path, seed: int, stop: Path) -> None:
    """Sweeps every problem with growing budgets; logs every finish_trial that returned."""
    from autotune.store import open_store
    from autotune.store.rows import Provenance
    from autotune.tune.search import Budget
    from autotune.tune.tuner import Tuner

    store = open_store(db, import_shipped=False)
    log = journal.open("a", buffering=1)
    start, finish = store.start_trial, store.finish_trial
    keys: dict[int, str] = {}  # the config key of each trial this writer started, for its journal line

    def noted_start(where: Provenance, config: Mapping[str, Any]) -> int:
        trial_id = start(where, config)
        keys[trial_id] = config_key(config)
        return trial_id

    def logged_finish(trial_id: int, outcome: Outcome) -> None:
        key = keys.pop(trial_id)
        finish(trial_id, outcome)
        log.write(f"{trial_id} {key}\n")  # only once it returned

    store.start_trial = noted_start  # type: ignore[method-assign]
    store.finish_trial = logged_finish  # type: ignore[method-assign]
    rng = random.Random(seed)
    while not stop.exists():
        problem = rng.choice(PROBLEMS)
        # The budget counts stored trials: a few more than the store holds, so each round measures.
        stored = store.completed_trials(store.problem_id(problem, GPU.name), source_hash(problem))
        done = sum(1 for row in stored if row.status is not Status.INVALID)  # what the budget counts
        budget = Budget(done + NEW_PER_ROUND)
        seed_ = rng.randrange(2**31)
        Tuner(store, FakeWorker(), InstantPool(), GPU, sampler="random", budget=budget, seed=seed_).tune(problem)
    store.close()


def _cli(args: list[str]) -> str | None:
    """Run the real command line; why it failed, or None."""
    done = subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or "Traceback" in done.stderr:
        return f"autotune {' '.join(args[:1])} exited {done.returncode}: {done.stderr.strip()[-300:]}"
    return None


def reader(db: str, journal: Path, seed: int, stop: Path) -> None:
    """best and list through the store and the command line; logs a mixed answer or an error."""
    from autotune.store import open_store

    log = journal.open("a", buffering=1)
    rng, reads, last_cli = random.Random(seed), 0, 0.0
    while not stop.exists():
        began = time.monotonic()
        with open_store(db, import_shipped=False) as store:
            log.write(f"opened in {time.monotonic() - began:.2f} s\n")
            for _ in range(20):
                problem = rng.choice(PROBLEMS + IMPORTED)
                best = store.best(GPU.name, problem, None)
                if best is not None and best.time_us != expected_us(problem, config_key(best.config)):
                    log.write(f"mixed best {problem} {config_key(best.config)} {best.time_us}\n")
                store.problems(GPU.name)
                reads += 2
                time.sleep(READ_PAUSE)
        if time.monotonic() - last_cli > CLI_EVERY:
            last_cli = time.monotonic()
            problem = rng.choice(PROBLEMS)
            shape = ["--m", str(problem.m), "--n", str(problem.n), "--dtype", problem.dtype, "--op", "gemv"]
            for args in (["list", "--db", db], ["best", *shape, "--gpu", GPU.name, "--db", db]):
                began = time.monotonic()
                failed = _cli(args)
                log.write(f"cli {args[0]} in {time.monotonic() - began:.2f} s\n")
                if failed:
                    log.write(f"error {failed}\n")
                reads += 1
    log.write(f"reads {reads}\n")


def _random_config(problem: Problem, rng: random.Random) -> dict[str, int]:
    from autotune import ops

    space = ops.for_problem(problem).space(problem)
    while True:
        config = {param.name: rng.choice(param.choices) for param in space.params}
        if space.check(config) is None:
            return config


def _records_of_new_trials(path: Path, rng: random.Random, count: int) -> None:
    """A records file of the stress GPU with `count` random configs, each at the fake worker's time."""
    from autotune.store.records import write_lines

    lines: list[dict[str, Any]] = [{"kind": "gpu", **GPU.to_dict()}]
    for _ in range(count):
        problem = rng.choice(IMPORTED)
        config = _random_config(problem, rng)
        t = expected_us(problem, config_key(config))
        lines.append(
            {"kind": "trial", "op": problem.op, "dtype": problem.dtype, "m": problem.m, "n": problem.n, "k": 0,
             "trans": False, "config": config, "time_us": t, "times_us": [t], "rounds": 1, "gbs": 1.0,
             "rel_error": 0.0, "source_hash": source_hash(problem), "nvcc": "n", "pycuda": "p", "driver": GPU.driver,
             "cuda": GPU.cuda, "created_at": "2026-11-25T00:00:00+00:00"}
        )  # fmt: skip
    write_lines(path, lines)


def importer(db: str, journal: Path, seed: int, stop: Path) -> None:
    """Imports in a loop: a file of new trials of the stress problems (a real write each time),
    then the shipped records files (written once, then found already there without a write lock)."""
    from autotune.store import open_store

    log = journal.open("a", buffering=1)
    rng = random.Random(seed)
    shipped = sorted((REPO / "db" / "records").glob("*.jsonl"))
    fresh = journal.with_suffix(".new.jsonl")
    imports = added = 0
    with open_store(db, import_shipped=False) as store:
        while not stop.exists():
            _records_of_new_trials(fresh, rng, 20)
            added += store.import_records(fresh)
            added += store.import_records(rng.choice(shipped))
            imports += 2
            time.sleep(IMPORT_PAUSE)
    log.write(f"imports {imports} added {added}\n")


ROLES = {"writer": writer, "reader": reader, "importer": importer}


# --- the run --------------------------------------------------------------------------------------


class Fleet:
    """The processes of one run, each with its journal and its stderr log."""

    def __init__(self, db: str, folder: Path, namespaces: bool) -> None:
        self.db, self.folder, self.stop = db, folder, folder / "stop"
        self.prefix = OWN_PID_NAMESPACE if namespaces else []
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.sweepers: dict[str, subprocess.Popen[bytes]] = {}
        self.ended: list[tuple[str, int]] = []  # (name, exit code) of processes not killed by us
        self.sweepers_killed = 0
        self.seeds = iter(range(1, 10**6))

    def _popen(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        stderr = (self.folder / f"{name}.err").open("ab")
        return subprocess.Popen([*self.prefix, *command], env=env, cwd=REPO, stdout=stderr, stderr=stderr)

    def start(self, name: str) -> None:
        role = name.rstrip("0123456789")
        command = [sys.executable, __file__, "--role", role, "--db", self.db, "--seed", str(next(self.seeds))]
        command += ["--journal", str(self.folder / f"{name}.log"), "--stop", str(self.stop)]
        self.processes[name] = self._popen(name, command)

    def start_sweepers(self) -> None:
        """The claiming fleet; it ends by itself once every problem is tuned, never restarted."""
        for i in range(SWEEPERS):
            name = f"sweeper{i}"
            journal = self.folder / f"{name}.log"
            journal.touch()
            command = [sys.executable, str(SWEEPER), self.db, str(journal), str(SWEEPER_LEASE_S)]
            self.sweepers[name] = self._popen(name, [*command, str(SWEEPER_TRIALS), "list"])

    def kill_a_sweeper(self, timeout: float = 60.0) -> None:
        """SIGKILL the first sweeper once it has finished a few trials, in the middle of a problem."""
        name = "sweeper0"
        process, journal = self.sweepers[name], self.folder / f"{name}.log"
        deadline = time.monotonic() + timeout
        while len(journal.read_text().splitlines()) < KILL_SWEEPER_AFTER:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                self.ended.append((name, process.wait() or -9))  # never got that far: an error
                return
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.sweepers_killed += 1

    def kill(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
        else:
            self.ended.append((name, process.returncode))  # ended by itself before the kill
        self.start(name)

    def finish(self, seconds: float) -> None:
        self.stop.touch()
        deadline = time.monotonic() + seconds
        for name, process in [*self.processes.items(), *list(self.sweepers.items())[1:]]:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.ended.append((name, -9))
                continue
            self.ended.append((name, process.returncode))


def _journal(folder: Path, prefix: str) -> list[str]:
    lines: list[str] = []
    for path in sorted(folder.glob(f"{prefix}*.log")):
        lines += [line for line in path.read_text().splitlines() if line.endswith(tuple("0123456789}")) or " " in line]
    return lines


def check(url: str, folder: Path, fleet: Fleet) -> dict[str, int]:
    """lost, mixed and duplicates, read with plain SQL; errors from exits, logs and journals."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT t.id, t.config_key, t.status, t.time_us, p.op, p.dtype, p.m, p.n, p.k, p.trans "
                "FROM trials t JOIN problems p ON p.id = t.problem_id WHERE p.gpu_name = :gpu"
            ),
            {"gpu": GPU.name},
        ).all()
        duplicates = connection.execute(
            text(
                "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM trials "
                "GROUP BY problem_id, config_key, source_hash HAVING COUNT(*) > 1) AS repeated"
            )
        ).scalar_one()
        running = connection.execute(text("SELECT COUNT(*) FROM trials WHERE status = 'running'")).scalar_one()
    engine.dispose()
    by_id = {row[0]: row for row in rows}
    finished = [line.split(" ", 1) for line in _journal(folder, "writer") if line.split(" ", 1)[0].isdigit()]
    lost = sum(
        1
        for trial_id, key in finished
        if int(trial_id) not in by_id or by_id[int(trial_id)][2] == "running" or by_id[int(trial_id)][1] != key
    )
    mixed = sum(
        1
        for _, key, status, time_us, op, dtype, m, n, k, trans in rows
        if status == "ok" and time_us != expected_us(Problem(op, dtype, m, n, k, bool(trans)), key)
    )
    mixed += sum(1 for line in _journal(folder, "reader") if line.startswith("mixed"))
    errors = [f"{name} exited {code}" for name, code in fleet.ended if code != 0]
    errors += [line for line in _journal(folder, "reader") if line.startswith("error")]
    errors += [f"{path.name}: traceback" for path in folder.glob("*.err") if "Traceback" in path.read_text()]
    for line in errors[:10]:
        print(f"error: {line}", file=sys.stderr)
    return {
        "trials_written": len(finished),
        "lost": lost,
        "mixed": mixed,
        "duplicates": int(duplicates),
        "errors": len(errors),
        # Killed processes' rows nobody could prove gone yet: a pid of another namespace proves
        # nothing, so those wait for the one-hour lease. Not an error: a count to read.
        "running_left": int(running),
    }


def check_sweepers(url: str, folder: Path) -> dict[str, int]:
    """How the claiming fleet split its problems: configs measured by more than one sweeper (or
    twice by one), problems tuned more than once, problems left undone or short of their trials."""
    from collections import Counter

    from autotune.store import open_store

    lines = [line for path in sorted(folder.glob("sweeper*.log")) for line in path.read_text().splitlines()]
    measured = Counter(line for line in lines if not line.startswith("done "))
    tuned = Counter(line for line in lines if line.startswith("done "))
    with open_store(url, import_shipped=False) as store:
        queue = store.queue_rows(SWEEPER_GPU)
        short = sum(1 for summary in store.problems(SWEEPER_GPU) if summary.trials != SWEEPER_TRIALS)
    return {
        "sweepers": SWEEPERS,
        "lease_s": int(SWEEPER_LEASE_S),
        "problems": len(queue),
        "problems_done": sum(1 for row in queue if row.state == "done"),
        "problems_short_of_trials": short,
        "trials_measured": sum(measured.values()),
        "measured_twice": sum(n - 1 for n in measured.values()),
        "tuned_twice": sum(n - 1 for n in tuned.values()),
        "claims_taken_over": sum(row.claims - 1 for row in queue if row.claims > 1),
    }


def run(
    seconds: float, writers: int, readers: int, seed: int, keep: Path | None, url: str | None, namespaces: bool
) -> dict[str, Any]:
    """The stress run on `url` (an empty database), else on a SQLite file of its own."""
    from sqlalchemy.engine import URL

    from autotune.store import open_store

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="stress-store-") as tmp:
        folder = keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        db = url or str(URL.create("sqlite", database=str(folder / "stress.db")))
        open_store(db, import_shipped=False).close()  # migrated once, before the crowd
        fleet = Fleet(db, folder, namespaces)
        names = [f"writer{i}" for i in range(writers)] + [f"reader{i}" for i in range(readers)] + ["importer0"]
        for name in names:
            fleet.start(name)
        fleet.start_sweepers()
        fleet.kill_a_sweeper()
        start, kills = time.monotonic(), 0
        while True:
            pause = rng.uniform(*KILL_EVERY)
            if time.monotonic() + pause > start + seconds:
                time.sleep(max(0.0, start + seconds - time.monotonic()))
                break
            time.sleep(pause)
            fleet.kill(rng.choice(names[:writers]))
            kills += 1
        fleet.finish(60.0 + SWEEPER_LEASE_S)
        counts = check(db, folder, fleet)
        sweepers = check_sweepers(db, folder)
    return {
        "seconds": seconds,
        "writers": writers,
        "readers": readers,
        "pid_namespaces": namespaces,
        "kills": kills,
        **counts,
        "fleet": {**sweepers, "killed": fleet.sweepers_killed},
    }


def passed(report: dict[str, Any]) -> bool:
    fleet = report["fleet"]
    tuned = fleet["problems_done"] == fleet["problems"] > 0 and fleet["problems_short_of_trials"] == 0
    clean = all(report[key] == 0 for key in ("lost", "mixed", "duplicates", "errors"))
    split = fleet["measured_twice"] == 0 and fleet["tuned_twice"] == 0 and fleet["killed"] == 1
    return clean and tuned and split


def can_unshare_pid() -> bool:
    try:
        return subprocess.run([*OWN_PID_NAMESPACE, "true"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "stress_store.json")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep its database and logs")
    parser.add_argument("--url", help="an empty server database to stress instead of a SQLite file")
    parser.add_argument("--namespaces", action="store_true", help="every process in a pid namespace of its own")
    parser.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        ROLES[args.role](args.db, args.journal, args.seed, args.stop)
        return 0
    if args.namespaces and not can_unshare_pid():
        print("error: --namespaces needs `unshare --pid` (Linux, as root or with CAP_SYS_ADMIN)", file=sys.stderr)
        return 2
    report = run(args.seconds, args.writers, args.readers, args.seed, args.keep, args.url, args.namespaces)
    report["database"] = "sqlite" if args.url is None else args.url.split(":", 1)[0].split("+")[0]
    write_json(args.out, report)
    print(json.dumps(report))
    ok = passed(report)
    print(f"wrote {args.out}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
