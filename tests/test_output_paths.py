"""Paths that are not files (autotune/core/file_kinds.py). Every file autotune gives a user (records,
CSV, report, safetensors, benchmark JSON) is written through a new file renamed into place
(autotune/core/output.py): renamed over a device or a pipe, it would take its place (`autotune report
-o /dev/null` run as root deleted /dev/null), so such paths are refused before anything is written and
stay as they were. Read, a pipe blocks and /dev/zero never ends (`autotune import /dev/zero` filled
memory): the files a user names to read are refused the same way."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from autotune.bench.harness import read_json
from autotune.core.errors import AutotuneError
from autotune.core.output import write_atomically, write_bytes_atomically
from autotune.core.problem import read_shapes_file
from autotune.ops.qgemm import safetensors
from tests.test_cli import Cli, assert_one_error, run, tuned_db  # noqa: F401


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def test_a_pipe_a_folder_and_a_link_to_a_device_are_refused_and_left_as_they_were(tmp_path: Path, fifo: Path) -> None:
    device = tmp_path / "null"
    device.symlink_to(os.devnull)
    for path, kind in ((fifo, "a pipe"), (tmp_path, "a folder"), (device, "a character device (through a link)")):
        with pytest.raises(
            AutotuneError, match=re.escape(f"cannot write the page {path}: it is {kind}, not a file")
        ) as error:
            write_atomically(path, "text", what="the page")
        assert "\n" not in str(error.value)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and device.is_symlink() and Path(os.devnull).is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "pipe"]  # no staging file left


def test_a_missing_path_a_file_and_a_link_to_nothing_are_written(tmp_path: Path) -> None:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    existing = tmp_path / "existing"
    existing.write_text("old\n")
    for path in (tmp_path / "new", existing, dangling):
        write_bytes_atomically(path, [b"a", b"b"], what="the file")
        assert path.read_bytes() == b"ab" and not path.is_symlink()


def test_the_safetensors_writer_refuses_a_pipe(fifo: Path) -> None:
    with pytest.raises(AutotuneError, match=r"cannot write safetensors file .*: it is a pipe"):
        safetensors.write(fifo, {"w": np.zeros(4, np.float32)})
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_the_report_and_an_export_to_a_pipe_are_one_line_errors(run: Cli, fifo: Path) -> None:  # noqa: F811
    for args in (["report", "-o", str(fifo)], ["export", "--format", "csv", "-o", str(fifo)]):
        assert_one_error(run(*args), f"{fifo}: it is a pipe, not a file")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_files_to_read_that_are_pipes_or_devices_are_refused_without_blocking(run: Cli, fifo: Path) -> None:  # noqa: F811
    # Opened, the pipe would block until a writer came; /dev/zero would be read until memory ran out.
    assert_one_error(run("import", str(fifo)), f"cannot read records file {fifo}: it is a pipe, not a file")
    assert_one_error(run("import", os.devnull), "it is a character device, not a file")
    assert_one_error(run("sweep", "--op", "hgemv", "--shapes", str(fifo)), "cannot read shapes file", "a pipe")
    for read in (read_shapes_file, safetensors.header, read_json):
        with pytest.raises(AutotuneError, match="it is a pipe"):
            read(fifo)


def test_export_and_report_refuse_to_write_over_the_database_they_read(run: Cli, tmp_path: Path) -> None:  # noqa: F811
    """`export -o` or `report -o` given the database's own path (or its -wal file): written over, the
    database was gone ("file is not a database" at the next command)."""
    db = tuned_db(tmp_path / "t.db")
    before = db.read_bytes()
    wal = tmp_path / "t.db-wal"
    wal.write_bytes(b"")
    for args in (
        ["export", "-o", str(db), "--format", "csv"],
        ["export", "-o", str(db), "--format", "jsonl"],
        ["report", "-o", str(db)],
        ["export", "-o", str(wal), "--format", "csv"],
    ):
        assert_one_error(run(*args, "--db", str(db)), "it is the database this command reads")
    assert db.read_bytes() == before and wal.read_bytes() == b""
    assert "4096x8192" in run("list", "--db", str(db)).out
