"""The kernels shipped precompiled in db/kernels/: built from the checkout's sources, every config the shipped
records can select among them, found without nvcc, PyCUDA or a database, and `autotune warmup`
compiling only what does not ship. All on the CPU: loading them on a GPU is tests/test_gpu_launch.py's."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune import api, cli
from autotune.build import shipped
from autotune.build.compiler import job_key
from autotune.core import fingerprint
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.runtime import shipset
from autotune.select.choose import Selector
from autotune.store import Store, open_store
from tests.fakes import ok, record

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "db" / "kernels"
REBUILD = "run scripts/build_shipped_kernels.py"
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
UNSHIPPED = {**gemv.DEFAULT_CONFIG, "block": 64, "lanes": 16, "unroll": 2, "rows": 2}  # a GEMV config no record picks
H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "580.159.04", "13.0")


@pytest.fixture(autouse=True)
def _real_db_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This checkout's db/ (records and kernels), whatever conftest.py set; a fresh API."""
    monkeypatch.setattr("autotune.core.paths.db_dir", lambda: REPO / "db")
    monkeypatch.setattr("autotune.api.local_gpus", list)  # no GPU, whatever this machine has
    monkeypatch.setattr("autotune.core.fingerprint.local_gpus", list)
    api.new_session()
    yield
    api.new_session()


@pytest.fixture(scope="module")
def records() -> Iterator[Store]:
    """A store holding the shipped records (in memory, shared by this module's tests)."""
    with open_store("sqlite://", import_shipped=False) as store:
        store.import_shipped(REPO / "db" / "records")
        yield store


@pytest.fixture(scope="module")
def uses(records: Store) -> list[shipset.Use]:
    """Every (problem, config) use the shipped records can select, worked out once for the module
    (a few seconds over the 460 shipped problems)."""
    return list(shipset.uses(records))


def manifest() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((KERNELS / shipped.MANIFEST).read_text())
    return data


def stale_kernels() -> list[str]:
    """Shipped kernels whose instance this checkout's kernels/ and autotune/ops would build differently."""
    index = shipped.index()
    assert index is not None, f"db/kernels/ holds no index: {REBUILD}"
    stale = []
    for stem, entry in manifest()["kernels"].items():
        job = shipset.Use.from_dict(entry["use"]).job()
        if job.depends_hash != entry["source_hash"]:
            stale.append(f"{entry['name']}: {job.name} has source hash {job.depends_hash}, not {entry['source_hash']}")
            continue
        for arch in [*entry["sass"], *([entry["ptx"]] if entry["ptx"] else [])]:
            if index.keys.get(job_key(replace(job, arch=arch))) != stem:
                stale.append(f"{entry['name']} for {arch}: the instance has another job key now")
    return stale


def test_the_shipped_kernels_are_built_from_the_kernel_sources_of_the_checkout() -> None:
    stale = stale_kernels()
    assert not stale, f"{len(stale)} shipped kernels are stale ({stale[0]}): {REBUILD}"


def test_a_kernel_edit_makes_the_shipped_kernels_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above guards against: an edited kernel file changes the job keys."""
    edited = tmp_path / "kernels"
    shutil.copytree(REPO / "kernels", edited)
    with (edited / "gemv" / "gemv.cu").open("a") as source:
        source.write("// an edit\n")
    monkeypatch.setattr(fingerprint, "kernels_dir", lambda: edited)
    fingerprint.file_hash.cache_clear()
    try:
        stale = stale_kernels()
    finally:
        fingerprint.file_hash.cache_clear()
    assert stale and all("gemv" in line for line in stale)


@pytest.mark.slow
def test_the_uses_are_what_the_store_itself_selects(records: Store, uses: list[shipset.Use]) -> None:
    """shipset.uses asks a selection table of the store's snapshot (one read): every 10th of its
    aligned uses of a records GPU is what a selector over the store itself chooses."""
    selector = Selector(records)
    named = [use for use in uses if use.gpu and not use.unaligned]
    assert len(named) > 900
    for use in named[::10]:
        choice = selector.choose(use.problem, use.gpu, vendor=False)
        assert (choice.config, choice.source) == (use.config, use.source), use.problem


@pytest.mark.slow
def test_every_config_the_shipped_records_can_select_ships(uses: list[shipset.Use]) -> None:
    index = shipped.index()
    assert index is not None, f"db/kernels/ holds no index: {REBUILD}"
    kernels = manifest()["kernels"]
    sources = {use.source for use in uses}
    assert {"measured", "default"} <= sources and any(use.unaligned for use in uses)
    missing = []
    for use in uses:
        job = use.job()
        if shipped.lookup(job) is not None:
            continue
        # Code for an older GPU that the instance cannot be built for (it uses clusters): said so.
        fat = index.keys.get(job_key(replace(job, arch=shipped.PTX_ARCH)))
        if not (fat and job.arch in kernels[fat]["not_built"] and job.arch < "sm_90"):
            missing.append(f"{use.problem} on {use.gpu or use.capability} ({use.source}): {job.name} {job.arch}")
    assert not missing, f"{len(missing)} selectable configs do not ship ({missing[0]}): {REBUILD}"


@pytest.mark.slow
def test_every_hopper_kernel_of_the_records_ships_as_machine_code(uses: list[shipset.Use]) -> None:
    """On the records' GPUs (compute capability 9.0) nothing is compiled, not even PTX by the driver."""
    for use in uses:
        if use.capability == "9.0":
            job = use.job()
            assert shipped.index().keys.get(job_key(job)), (use.problem, job.name)  # type: ignore[union-attr]


def test_the_shipped_kernels_stay_small() -> None:
    # The GEMV and GEMM kernels of two GPUs' records, the int4 op's at every M of its three tuned kinds and
    # the 8-bit op's at every M of both kinds, and the edge records' small-model and odd few-row shapes
    # (33.2 MiB with the index and manifest: 35 leaves room for a sweep's handful of new picks, not for a
    # new family's worth).
    total = sum(path.stat().st_size for path in KERNELS.iterdir())
    assert total < 35 * 2**20


def test_a_newer_gpu_gets_the_ptx_and_an_older_one_nothing() -> None:
    # A use a shipped kernel was built for (the manifest's; working out every use of the records is slow).
    shipped_uses = (shipset.Use.from_dict(kernel["use"]) for kernel in manifest()["kernels"].values())
    use = next(u for u in shipped_uses if u.capability == "9.0" and not u.job().arch.endswith("a"))
    job = use.job()
    fat = shipped.lookup(job)
    assert fat is not None
    assert shipped.lookup(replace(job, arch="sm_100")) == fat  # PTX, compiled by the driver
    assert shipped.lookup(replace(job, arch="sm_75")) is None


# A process that cannot import PyCUDA (nor torch or cupy) and has no nvcc on PATH.
BLOCKED = """\
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pycuda", "torch", "cupy"):
            raise ImportError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocked())
"""

FIND = """\
import json, shutil, sys
assert shutil.which("nvcc") is None
import autotune
from autotune.build import shipped
from autotune.runtime import shipset
from autotune.core.errors import AutotuneError
from autotune.ops import make_problem

problem = make_problem("gemv", "float16", 4096, 8192)
choice = autotune.best("hgemv", 4096, 8192, gpu="NVIDIA H200")
use = shipset.Use(choice.gpu, "9.0", problem, choice.config, choice.source, False)
kernel = shipped.find_kernel(use.job())
try:
    shipped.find_kernel(shipset.Use("", "8.6", problem, choice.config, "default", False).job())
    refused = ""
except AutotuneError as exc:
    refused = str(exc)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pycuda", "torch", "cupy"))
print(json.dumps({"origin": kernel.origin, "head": kernel.image[:4].hex(), "source": choice.source,
                  "refused": refused, "loaded": loaded}))
"""


def _run_blocked(tmp_path: Path) -> dict[str, Any]:
    script = tmp_path / "find.py"
    script.write_text(BLOCKED + FIND)
    env = {
        "PATH": str(tmp_path / "bin"),  # neither nvcc nor nvidia-smi
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "AUTOTUNE_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_shipped_kernel_is_found_without_nvcc_or_pycuda(tmp_path: Path) -> None:
    first = _run_blocked(tmp_path)
    assert (first["origin"], first["source"], first["loaded"]) == ("shipped", "measured", [])
    assert bytes.fromhex(first["head"]) == FATBIN_MAGIC
    # A kernel that does not ship: one line naming what to install.
    assert "not among the kernels shipped" in first["refused"] and "nvcc" in first["refused"]
    assert "\n" not in first["refused"]
    # The first use unpacked it into the kernel cache; the next process reads it from there.
    unpacked = list((tmp_path / "cache" / "shipped").iterdir())
    assert len(unpacked) == 1 and unpacked[0].suffix == ".fatbin"
    assert _run_blocked(tmp_path)["origin"] == "shipped"


def test_a_damaged_unpacked_copy_is_unpacked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path))
    index = shipped.index()
    assert index is not None
    stem = next(iter(index.files))
    good = shipped.image(stem)
    copy = shipped.unpacked_dir() / f"{stem}.{index.files[stem]['kind']}"
    copy.write_bytes(good[: len(good) // 2])
    assert shipped.image(stem) == good and copy.read_bytes() == good


# -- a damaged index ----------------------------------------------------------------------------------
def _drop_sha256(data: dict[str, Any], stem: str) -> None:
    del data["files"][stem]["sha256"]


def _short_sha256(data: dict[str, Any], stem: str) -> None:
    data["files"][stem]["sha256"] = "abc"


def _kind_a_path(data: dict[str, Any], stem: str) -> None:
    data["files"][stem]["kind"] = "../../outside"


def _entry_a_list(data: dict[str, Any], stem: str) -> None:
    data["files"][stem] = [data["files"][stem]["kind"], data["files"][stem]["sha256"]]


def _key_to_a_path(data: dict[str, Any], stem: str) -> None:
    data["keys"] = {key: ("../" + stem if value == stem else value) for key, value in data["keys"].items()}


ENTRY_DAMAGE = [_drop_sha256, _short_sha256, _kind_a_path, _entry_a_list, _key_to_a_path]


def _job_of(stem: str) -> Any:
    """A job the index maps to file `stem`: its instance, for the first architecture it holds."""
    kernel = manifest()["kernels"][stem]
    return replace(shipset.Use.from_dict(kernel["use"]).job(), arch=(kernel["sass"] or [kernel["ptx"]])[0])


@pytest.mark.parametrize("searched", [True, False], ids=["searched", "parsed"])
@pytest.mark.parametrize("damage", ENTRY_DAMAGE, ids=[damage.__name__.strip("_") for damage in ENTRY_DAMAGE])
def test_a_damaged_index_entry_is_dropped_with_one_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: Any,
    searched: bool,
) -> None:
    data = json.loads((KERNELS / shipped.INDEX).read_text())
    damaged, sound = sorted(data["files"])[:2]
    damage(data, damaged)
    # The builder's layout is searched as text; any other spacing is parsed whole.
    text = json.dumps(data, sort_keys=True) if searched else json.dumps(data, separators=(",", ":"))
    (tmp_path / shipped.INDEX).write_text(text)
    sound_file = f"{sound}.{data['files'][sound]['kind']}{shipped.SUFFIX}"
    shutil.copyfile(KERNELS / sound_file, tmp_path / sound_file)
    monkeypatch.setattr(shipped, "folder", lambda: tmp_path)
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    with caplog.at_level("WARNING", logger=shipped.__name__):
        assert shipped.lookup(_job_of(damaged)) is None and shipped.lookup(_job_of(damaged)) is None
        assert shipped.lookup(_job_of(sound)) == sound and shipped.image(sound)[:4] == FATBIN_MAGIC
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "damaged" in warnings[0] and "compiled instead" in warnings[0], warnings


# An nvcc that writes a small but whole CUDA ELF wherever -o says, and logs each compile.
FAKE_NVCC = """\
#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, V99.0.0"; exit 0; fi
echo compile >> "$NVCC_LOG"
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
cp "$GOOD_CUBIN" "$out"
"""


def tiny_elf() -> bytes:
    """The smallest file cubin_is_sound() takes for a cubin: an ELF header and one empty section."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", header, 18, 190)  # EM_CUDA
    struct.pack_into("<QQ", header, 32, 0, 64)  # no program headers; sections right after the header
    struct.pack_into("<HHHH", header, 54, 56, 0, 64, 1)
    return bytes(header) + bytes(64)


@pytest.fixture
def fake_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake nvcc first on PATH; returns its log (one line per compile)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvcc").write_text(FAKE_NVCC)
    (folder / "nvcc").chmod(0o755)
    (tmp_path / "good.cubin").write_bytes(tiny_elf())
    monkeypatch.setenv("GOOD_CUBIN", str(tmp_path / "good.cubin"))
    monkeypatch.setenv("NVCC_LOG", str(tmp_path / "nvcc.log"))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "nvcc.log"


def compiles(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.is_file() else 0


def warmup(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["autotune", "warmup", *args])
    capsys.readouterr()
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr()
    return capsys.readouterr().out


def test_warmup_compiles_only_what_does_not_ship(
    fake_nvcc: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "t.db")
    shape = ("--m", "4096", "--n", "8192")
    shipped_out = warmup(capsys, monkeypatch, "--op", "hgemv", *shape, "--gpu", "h200", "--db", db)
    assert compiles(fake_nvcc) == 0
    assert "2 kernels: 2 shipped, 0 cached, 0 compiled; none loaded" in shipped_out
    # A problem this database tuned itself, to a config that does not ship: compiled once (the
    # aligned and the unaligned config are the same kernel here), then found in the cache.
    problem = Problem("gemv", "float16", 5000, 7001)
    with open_store(db) as store:
        record(store, problem, UNSHIPPED, ok(9.0), H200)
    args = ("--op", "hgemv", "--m", "5000", "--n", "7001", "--gpu", "h200", "--db", db)
    first = warmup(capsys, monkeypatch, *args)
    assert compiles(fake_nvcc) == 1 and "2 kernels: 0 shipped, 1 cached, 1 compiled" in first
    again = warmup(capsys, monkeypatch, *args)
    assert compiles(fake_nvcc) == 1 and "2 kernels: 0 shipped, 2 cached, 0 compiled" in again


def test_warmup_without_a_gpu_readies_every_gpu_of_the_database(
    fake_nvcc: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = warmup(capsys, monkeypatch, "--op", "hgemm", "--db", str(tmp_path / "t.db"))
    standard = 17  # autotune/ops/gemm/shapes.txt
    assert f"{2 * 2 * standard} kernels: {2 * 2 * standard} shipped" in out  # 2 GPUs, aligned and not
    assert compiles(fake_nvcc) == 0
    assert "H200" in out and "H100" in out


def test_warmup_of_the_stored_problems(
    fake_nvcc: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = warmup(capsys, monkeypatch, "--stored", "--op", "sgemv", "--gpu", "h100", "--db", str(tmp_path / "t.db"))
    assert compiles(fake_nvcc) == 0 and " shipped, 0 cached, 0 compiled" in out
    assert "sgemv" in out and "hgemv" not in out


def _no_digests(data: dict[str, Any]) -> None:
    for entry in data["files"].values():
        del entry["sha256"]


def test_warmup_with_index_entries_without_their_digest_compiles_them(
    fake_nvcc: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.loads((KERNELS / shipped.INDEX).read_text())
    _no_digests(data)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / shipped.INDEX).write_text(json.dumps(data, sort_keys=True))
    monkeypatch.setattr(shipped, "folder", lambda: tmp_path / "kernels")
    shape = ("--m", "4096", "--n", "8192")
    out = warmup(capsys, monkeypatch, "--gpu", "NVIDIA H200", *shape, "--db", str(tmp_path / "t.db"))
    assert " 0 shipped" in out and compiles(fake_nvcc) >= 1


def test_without_nvcc_a_kernel_that_does_not_ship_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "t.db")
    with open_store(db) as store:
        record(store, Problem("gemv", "float16", 5000, 7001), UNSHIPPED, ok(9.0), H200)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("AUTOTUNE_CACHE_DIR", str(tmp_path / "cache"))
    args = ["autotune", "warmup", "--m", "5000", "--n", "7001", "--gpu", "h200", "--db", db]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert "not among the kernels shipped" in err and "CUDA toolkit" in err


def test_prepare_names_no_gpu_it_cannot_target(tmp_path: Path) -> None:
    problems = api.problems("hgemv", 4096, 8192)
    with pytest.raises(AutotuneError, match="unknown GPU 'RTX 9999'"):
        api.prepare(problems, gpu="RTX 9999", db=str(tmp_path / "t.db"))


def test_the_pycuda_hint_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.measure import pycuda_gpu

    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    with pytest.raises(AutotuneError) as raised:
        pycuda_gpu.driver()
    assert "pip install 'autotune-kernels[cuda]'" in str(raised.value) and "\n" not in str(raised.value)


def test_doctor_counts_the_shipped_kernels_toward_launching(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune import doctor

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc
    found = {check.name: check for check in doctor.checks(str(tmp_path / "t.db"))}
    assert found["shipped kernels"].ok and "sm_90a" in found["shipped kernels"].found
    ok = {check.name: check.ok for check in found.values()}
    ok.update({"NVIDIA driver": True, "torch": True})  # as on a GPU machine with torch
    can = dict(doctor.abilities([replace(check, ok=ok[name]) for name, check in found.items()]))
    assert can["launch autotune.gemv()/gemm() on torch or cupy arrays (shipped kernels only: others need nvcc)"]


def test_tuning_without_nvcc_names_the_toolkit_and_pycudas_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.tune import tuner

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc
    monkeypatch.setattr(tuner.importlib.util, "find_spec", lambda name: None)  # nor PyCUDA
    with pytest.raises(AutotuneError) as raised:
        tuner.check_toolchain()
    message = str(raised.value)
    assert "\n" not in message and "CUDA toolkit" in message and "pip install 'autotune-kernels[cuda]'" in message
