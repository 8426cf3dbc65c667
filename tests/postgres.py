"""A real PostgreSQL server for the fleet tests: Debian's `postgresql` binaries, a throwaway data
folder, password authentication on a local TCP port. Skips, with the reason, where the binaries or
the `psycopg` driver are missing (`.ci/run` installs both)."""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

USER = "autotune"


def _binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, run its programs as the `postgres` user."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and no `postgres` user to run the server as")
    return ["runuser", "-u", "postgres", "--"]


class Server:
    def __init__(self, url: str, admin_url: str) -> None:
        self.url, self._admin = url, admin_url  # the SQLAlchemy URL of database `postgres`

    def new_database(self) -> str:
        """A fresh, empty database on the server; its SQLAlchemy URL (with the password)."""
        import psycopg

        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self._admin, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"


@contextmanager
def server(folder: Path) -> Iterator[Server]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install '.[postgres]')")
    binaries = _binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (Debian's `postgresql` package)")
    runner = _as_server_user()
    folder.mkdir(parents=True, exist_ok=True)
    data, password = folder / "data", secrets.token_hex(8)
    pwfile = folder / "pw"
    pwfile.write_text(password + "\n")
    if runner:
        shutil.chown(folder, "postgres")
        shutil.chown(pwfile, "postgres")
    run = lambda *args: subprocess.run([*runner, *args], check=True, capture_output=True, text=True)  # noqa: E731
    run(str(binaries / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256", f"--pwfile={pwfile}")
    port = _free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off"
    run(str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start")
    try:
        yield Server(
            f"postgresql+psycopg://{USER}:{password}@127.0.0.1:{port}/postgres",
            f"postgresql://{USER}:{password}@127.0.0.1:{port}/postgres",
        )
    finally:
        run(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
