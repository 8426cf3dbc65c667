"""The cubin cache under damage, and nvcc's processes when the sweep ends or is killed mid-compile."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.build import compiler
from autotune.build.compiler import CompileJob, CompilePool, compile_kernel, cubin_is_sound

REPO = Path(__file__).resolve().parents[1]
TINY = CompileJob("tiny", 'extern "C" __global__ void tiny(float* p) { p[threadIdx.x] = 1.0f; }\n', "sm_90", "t")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def good_cubin(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    result = compile_kernel(TINY, tmp_path_factory.mktemp("cubins"))
    assert result.cubin is not None, result.message
    return result.cubin.read_bytes()


# An instant nvcc: writes the cubin at $GOOD_CUBIN wherever -o says. The tests of the cache's
# repairs use it (the real one compiled that cubin); what they test is what happens around nvcc.
INSTANT_NVCC = """\
#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, V99.0.0"; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
cp "$GOOD_CUBIN" "$out"
"""


@pytest.fixture
def instant_nvcc(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, good_cubin: bytes) -> None:
    bin_dir = tmp_path_factory.mktemp("bin")
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(INSTANT_NVCC)
    nvcc.chmod(0o755)
    (bin_dir / "good.cubin").write_bytes(good_cubin)
    monkeypatch.setenv("GOOD_CUBIN", str(bin_dir / "good.cubin"))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _target(cache: Path) -> Path:
    key = compiler.cache_key(TINY)
    path = cache / key[:2] / f"{key}.cubin"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@needs_nvcc
@pytest.mark.parametrize(
    "damage",
    [
        lambda good: good[: len(good) // 2],  # a copy cut short (a full disk, a killed cp)
        lambda good: good[:-1],
        lambda good: b"",
        lambda good: b"\x7fELF" + b"\0" * 200,  # a header and nothing it points to
        lambda good: os.urandom(len(good)),
        lambda good: good[:18] + b"\x3e\x00" + good[20:],  # a whole ELF, for x86-64, not a GPU
    ],
    ids=["half", "last-byte", "empty", "bare-header", "random", "not-cuda"],
)
@pytest.mark.usefixtures("instant_nvcc")
def test_a_damaged_cached_cubin_is_rebuilt_not_returned(tmp_path: Path, good_cubin: bytes, damage: object) -> None:
    target = _target(tmp_path)
    target.write_bytes(damage(good_cubin))  # type: ignore[operator]
    result = compile_kernel(TINY, tmp_path)
    assert result.ok and not result.cached and result.cubin == target
    assert cubin_is_sound(target) and b"tiny" in target.read_bytes()
    assert compile_kernel(TINY, tmp_path).cached


@needs_nvcc
@pytest.mark.usefixtures("instant_nvcc")
def test_a_link_at_a_cubins_path_is_replaced_never_followed(tmp_path: Path, good_cubin: bytes) -> None:
    elsewhere = tmp_path / "elsewhere.cubin"
    elsewhere.write_bytes(good_cubin)  # even a sound cubin behind a link is not taken
    target = _target(tmp_path / "cache")
    target.symlink_to(elsewhere)
    result = compile_kernel(TINY, tmp_path / "cache")
    assert result.ok and not result.cached
    assert not target.is_symlink() and cubin_is_sound(target)
    assert elsewhere.read_bytes() == good_cubin  # nothing was written through the link


@needs_nvcc
@pytest.mark.parametrize("filled", [False, True])
@pytest.mark.usefixtures("instant_nvcc")
def test_a_folder_at_a_cubins_path_neither_raises_nor_leaves_staging_files(tmp_path: Path, filled: bool) -> None:
    target = _target(tmp_path)
    target.mkdir()
    if filled:
        (target / "debris").write_text("x")
    result = compile_kernel(TINY, tmp_path)
    assert result.ok, result.message
    assert cubin_is_sound(target)
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_unwritable_cache_is_a_failed_result_not_an_exception(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    result = compile_kernel(TINY, blocker)
    assert not result.ok and "cache" in result.message


# -- nvcc's processes ---------------------------------------------------------------------------------
FAKE_NVCC = """\
#!/bin/sh
# A slow nvcc: starts a child (as nvcc starts cicc and ptxas), reports both pids and its output
# folder, then waits.
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, V99.0.0"; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
sleep 300 &
echo "$$ $! $(dirname "$out")" > "$FAKE_NVCC_PIDS.part"
mv "$FAKE_NVCC_PIDS.part" "$FAKE_NVCC_PIDS"
wait
"""


@pytest.fixture
def slow_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake nvcc first on PATH; returns the file it writes "nvcc-pid child-pid folder" to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_NVCC_PIDS", str(pids))
    return pids


def _started(pids: Path) -> tuple[int, int, Path]:
    deadline = time.monotonic() + 30
    while not pids.exists():
        assert time.monotonic() < deadline, "the fake nvcc never started"
        time.sleep(0.05)
    nvcc, child, folder = pids.read_text().split()
    return int(nvcc), int(child), Path(folder)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's PID 1 may never reap the orphans it inherits)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False  # gone between the open and the read: the kernel answers ESRCH
    return state not in ("Z", "X")


def _gone_soon(*pids: int) -> bool:
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            for pid in pids:  # clean up after a failed test
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_kill_9_of_the_sweep_ends_nvcc_and_its_children_and_removes_the_temp_folder(
    tmp_path: Path, slow_nvcc: Path
) -> None:
    code = textwrap.dedent(f"""
        from pathlib import Path
        from autotune.build.compiler import CompilePool, CompileJob
        with CompilePool(2, Path({str(tmp_path / "cache")!r})) as pool:
            pool.submit(CompileJob("k", "x", "sm_90", "h")).result()
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    sweep = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        nvcc, child, folder = _started(slow_nvcc)
        assert folder.is_dir()
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        assert _gone_soon(nvcc, child), "nvcc or its child outlived the sweep"
        deadline = time.monotonic() + 10
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not folder.exists(), "the temp folder outlived the sweep"
    finally:
        if sweep.poll() is None:
            sweep.kill()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_closing_the_pool_ends_running_compiles(tmp_path: Path, slow_nvcc: Path) -> None:
    pool = CompilePool(2, tmp_path / "cache")
    future = pool.submit(CompileJob("k", "x", "sm_90", "h"))
    nvcc, child, folder = _started(slow_nvcc)
    pool.close()
    assert _gone_soon(nvcc, child)
    assert not future.result(timeout=10).ok
    assert not folder.exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_compile_past_its_timeout_ends_the_whole_group(
    tmp_path: Path, slow_nvcc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiler, "COMPILE_TIMEOUT_S", 1)
    result = compile_kernel(CompileJob("k", "x", "sm_90", "h"), tmp_path / "cache")
    nvcc, child, folder = _started(slow_nvcc)
    assert not result.ok and "timed out" in result.message
    assert _gone_soon(nvcc, child), "nvcc's child outlived the timeout"
    assert not folder.exists()


FAILING_NVCC = """\
#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, V99.0.0"; exit 0; fi
echo "kernel.cu(12): error: identifier \\"undefined_thing\\" is undefined" >&2
echo "1 error detected in the compilation of \\"kernel.cu\\"." >&2
exit 1
"""


def test_a_failed_compile_is_told_by_its_error_not_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that fails says nvcc's error: the one-line message had been the nvcc command (the
    first line of the result's message), or nothing at all where nvcc never ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(FAILING_NVCC)
    (bin_dir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    failed = compile_kernel(TINY, tmp_path / "cache")
    assert not failed.ok and failed.message.splitlines()[0].startswith(str(bin_dir / "nvcc"))  # the command, kept
    assert compiler.failure_reason(failed.message) == 'kernel.cu(12): error: identifier "undefined_thing" is undefined'
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    unprepared = compile_kernel(TINY, blocker)
    assert compiler.failure_reason(unprepared.message).startswith("cannot prepare the kernel cache")
