"""autotune export --format bundle, without a GPU: the header compiles as C99 and C++, and its
look-up, shape rules, launch geometry, kernel arguments and tensor maps answer as the Python side
does (autotune.bundle's reference, the ops' spaces and launches) for every entry of the H200's
shipped records, at its tuned shape and at shapes around it. Strings from the database reach C
escaped; bad input is one line and leaves no folder behind."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autotune import api, bundle, exports, ops
from autotune.bundle import header
from autotune.core.errors import AutotuneError
from autotune.core.fingerprint import GpuInfo, toolchain
from autotune.core.problem import Problem
from autotune.core.target import targeting
from autotune.gpu import tma
from autotune.ops import gemv
from autotune.store import open_store
from autotune.store.rows import Provenance
from tests.fakes import ok, record, run_cli

QUERY_SOURCE = Path(__file__).with_name("bundle_query.c")
H200 = "NVIDIA H200"
COMPILERS = {"gcc": ["-std=c99", "-lm"], "g++": ["-x", "c++", "-std=c++11"]}
WARNINGS = ["-Wall", "-Wextra", "-pedantic", "-Werror"]

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("g++") is None, reason="no gcc/g++")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, kernel_cache: Path) -> Iterator[tuple[bundle.Bundle, Path]]:
    """The H200's bundle from the shipped records (and shipped kernels), written once for the module:
    seconds, so the tests of it are marked slow (.ci/run runs them with -m slow)."""
    folder = tmp_path_factory.mktemp("bundle")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AUTOTUNE_CACHE_DIR", str(kernel_cache))
        patch.setenv("XDG_DATA_HOME", str(folder / "data"))
        api.new_session()
        made = bundle.export_bundle(folder / "h200", "h200", db=str(folder / "shipped.db"))
        api.new_session()
    yield made, folder / "h200"


def compile_query(compiler: str, include: Path, out: Path) -> Path:
    flags = COMPILERS[compiler]
    language, libraries = [f for f in flags if f != "-lm"], [f for f in flags if f == "-lm"]
    command = [compiler, *language, *WARNINGS, "-I", str(include), str(QUERY_SOURCE), "-o", str(out), *libraries]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def programs(built: tuple[bundle.Bundle, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tests/bundle_query.c built against the bundle's header as C99 (gcc) and as C++11 (g++)."""
    if shutil.which("gcc") is None or shutil.which("g++") is None:
        pytest.skip("no gcc/g++")
    out = tmp_path_factory.mktemp("query")
    return {name: compile_query(name, built[1], out / f"query-{name}") for name in COMPILERS}


def ask(program: Path, queries: list[str]) -> list[str]:
    done = subprocess.run([str(program)], input="\n".join(queries) + "\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout[-500:] + done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == len(queries)
    return answers


def nearby(problem: Problem) -> list[tuple[int, int, int]]:
    """Shapes around a tuned one, one size changed at a time: doubled, halved, odd, small."""
    m, n, k = problem.m, problem.n, problem.k
    shapes = [(m, n, k)]
    shapes += [(v, n, k) for v in (2 * m, max(1, m // 2), m + 1, 1, 3, 16, 17)]
    shapes += [(m, v, k) for v in (2 * n, max(1, n // 2), n + 1, n + 4, n + 8, 100)]
    if k:
        shapes += [(m, n, v) for v in (2 * k, max(1, k // 2), k + 1, k + 8, 16, 33, 64)]
    return list(dict.fromkeys(shapes))


def python_launch(made: bundle.Bundle, entry: bundle.Entry, shape: tuple[int, int, int], sms: int) -> str:
    """What the header's autotune_launch_for should print: "-1", or the op's own launch."""
    if not bundle.runs(made, entry, *shape):
        return "-1"
    p = entry.problem
    problem = ops.make_problem(p.op, p.dtype, shape[0], shape[1], shape[2] or None, p.trans)
    with targeting(made.gpu.compute_capability):
        launch = ops.for_problem(problem).launch(problem, entry.config, sms)
    numbers = [0, *launch.grid, *launch.block, launch.shared_bytes, launch.workspace_floats, launch.counters]
    return " ".join(map(str, numbers))


# --- the bundle on disk ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_bundle_holds_every_tuned_problem_its_kernel_and_a_manifest(built: tuple[bundle.Bundle, Path]) -> None:
    made, folder = built
    manifest = json.loads((folder / bundle.MANIFEST).read_text())
    assert manifest["kind"] == bundle.KIND and manifest["gpu"]["name"] == H200 and manifest["gpu"]["arch"] == "sm_90"
    assert len(manifest["entries"]) == len(made.entries) >= 100 and manifest["skipped"] == []
    assert [e for e in manifest["entries"] if e["op"] == "gemm" and e["trans"]]  # B stored N x K too
    families = {entry["family"] for entry in manifest["entries"]}
    assert families == {"gemv", "skinny", "skinny_tc", "simt", "mma", "wgmma", "narrow", "tall"}
    for entry in manifest["entries"]:
        assert (folder / entry["kernel_file"]).is_file() and entry["backend"] == "kernel"
    files = {kernel["file"] for kernel in manifest["kernels"]}
    assert files == {entry["kernel_file"] for entry in manifest["entries"]}
    assert sorted(p.relative_to(folder).as_posix() for p in (folder / bundle.KERNELS).iterdir()) == sorted(files)
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left


@pytest.mark.slow
@needs_gcc
def test_every_tuned_problem_finds_its_own_entry_in_c_and_cpp(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    folder = built[1]
    manifest = json.loads((folder / bundle.MANIFEST).read_text())["entries"]
    queries = [f"find {e['op']} {e['dtype']} {e['m']} {e['n']} {e['k']} {int(e['trans'])}" for e in manifest]
    for program in programs.values():
        assert [int(answer) for answer in ask(program, queries)] == [e["index"] for e in manifest]


@pytest.mark.slow
@needs_gcc
def test_the_nearest_tuned_problem_answers_as_the_python_reference(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    made, _ = built
    questions, expected = [], []
    for entry in made.entries[::3]:
        p = entry.problem
        for m, n, k in nearby(p)[1:]:
            questions.append(f"find {p.op} {p.dtype} {m} {n} {k} {int(p.trans)}")
            found = bundle.find(made, p.op, p.dtype, m, n, k, p.trans)
            expected.append(str(found.index if found is not None else -1))
    assert ask(programs["gcc"], questions) == expected
    assert 0.2 < sum(e != "-1" for e in expected) / len(expected) < 1  # hits and misses both asked


@needs_gcc
def test_sizes_past_32_bits_or_256_gib_find_nothing_as_in_python(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    """autotune_bind passes 32-bit sizes: a size past 2^31 - 1 (or a matrix past 256 GiB, which the
    Python selector refuses too) must find no entry, never one whose launch runs on a cut-off size."""
    made, _ = built
    questions, expected = [], []
    for entry in made.entries[::5]:
        p = entry.problem
        k = p.k or 0
        big = 2**31 + 64
        shapes = [(big, p.n, k), (p.m, 2**32 + 1024, k), (2**19, 2**18 + 1, k)] + ([(p.m, p.n, big)] if k else [])
        for m, n, kk in shapes:
            questions.append(f"find {p.op} {p.dtype} {m} {n} {kk} {int(p.trans)}")
            found = bundle.find(made, p.op, p.dtype, m, n, kk, p.trans)
            expected.append(str(found.index if found is not None else -1))
    assert set(expected) == {"-1"}
    assert ask(programs["gcc"], questions) == expected


@pytest.mark.slow
@needs_gcc
def test_exact_nearest_and_missing_answers(built: tuple[bundle.Bundle, Path], programs: dict[str, Path]) -> None:
    made, folder = built
    entries = json.loads((folder / bundle.MANIFEST).read_text())["entries"]
    exact, near, miss, odd_nk, unknown = ask(
        programs["g++"],
        [
            "find gemv float16 4096 8192 0 0",
            "find gemv float16 4000 8192 0 0",
            "find gemm float16 5000 5001 7 0",  # K = 7 and an odd N: no tuned config fits
            "find gemm bfloat16 3000 5001 2001 1",  # odd N and K at M = 3000, B stored N x K: none fits
            "find rowsum float16 16 4096 0 0",
        ],
    )
    hit = entries[int(exact)]
    assert (hit["op"], hit["dtype"], hit["m"], hit["n"], hit["trans"]) == ("gemv", "float16", 4096, 8192, False)
    nearest = entries[int(near)]
    assert (nearest["op"], nearest["dtype"]) == ("gemv", "float16") and (nearest["m"], nearest["n"]) != (4000, 8192)
    assert bundle.find(made, "gemv", "float16", 4000, 8192, 0, False) == made.entries[int(near)]
    assert (miss, odd_nk, unknown) == ("-1", "-1", "-1")
    nt = entries[int(ask(programs["g++"], ["find gemm float16 16 4096 4096 1"])[0])]  # B stored N x K
    assert (nt["op"], nt["m"], nt["n"], nt["k"], nt["trans"]) == ("gemm", 16, 4096, 4096, True)


@pytest.mark.slow
@needs_gcc
def test_shape_rules_and_launches_match_the_ops_at_shapes_around_each_entry(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    made, _ = built
    questions, expected = [], []
    for entry in made.entries:
        sm_counts = (made.gpu.sm_count, 78) if entry.config.get("persist") else (made.gpu.sm_count,)
        for shape in nearby(entry.problem):
            for sms in sm_counts:
                questions.append(f"launch {entry.index} {shape[0]} {shape[1]} {shape[2]} {sms}")
                expected.append(python_launch(made, entry, shape, sms))
    answers = ask(programs["gcc"], questions)
    wrong = [(q, a, e) for q, a, e in zip(questions, answers, expected, strict=True) if a != e]
    assert not wrong, wrong[:5]
    assert sum(e == "-1" for e in expected) > 100  # the rules were asked to refuse, not only to accept


@pytest.mark.slow
@needs_gcc
def test_kernel_arguments_follow_each_ops_parameter_layout(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    made, _ = built
    answers = ask(programs["gcc"], [f"args {e.index} {e.problem.m} {e.problem.n} {e.problem.k}" for e in made.entries])
    for entry, answer in zip(made.entries, answers, strict=True):
        p = entry.problem
        sizes = ops.for_problem(p).operands(p).sizes
        order = "2 1 3" if p.trans and p.op == "gemv" else "1 2 3"  # the transposed GEMV takes x first
        assert answer == f"{len(entry.arg_types)} {order} {' '.join(map(str, sizes))} 0.5 0.25 4 5"


@pytest.mark.slow
@needs_gcc
def test_tensor_maps_are_those_the_launch_path_encodes(
    built: tuple[bundle.Bundle, Path], programs: dict[str, Path]
) -> None:
    made, _ = built
    mapped = [e for e in made.entries if e.launch.operand_maps is not None]
    assert {e.family for e in mapped} == {"wgmma", "skinny_tc"}
    shapes = [(e, s) for e in mapped for s in nearby(e.problem)[:4]]
    answers = ask(programs["gcc"], [f"maps {e.index} {m} {n} {k}" for e, (m, n, k) in shapes])
    for (entry, (m, n, k)), answer in zip(shapes, answers, strict=True):
        maps = entry.launch.operand_maps
        assert maps is not None
        fields = []
        for spec in tma.operand_tiled_maps(maps, entry.problem.dtype, (m, n, k)):
            fields += [spec.data_type, *spec.dims, spec.stride_bytes, *spec.box]
            fields += [spec.interleave, spec.swizzle, spec.l2_promotion, spec.oob_fill]
        assert answer == " ".join(map(str, [2, *fields]))
    plain = next(e for e in made.entries if e.launch.operand_maps is None)
    assert ask(programs["gcc"], [f"maps {plain.index} {plain.problem.m} {plain.problem.n} {plain.problem.k}"]) == ["0"]


# Problems of every family (and both GEMV layouts) whose spaces the synthetic bundle samples: the
# shipped entries use few of the configs the rules must judge (no skinny config narrower than a warp).
SAMPLED = (
    Problem("gemv", "float16", 4096, 4096),
    Problem("gemv", "float32", 1000, 3000),
    # Transposed GEMVs of 16 columns and more: the narrow family (odd widths: scalar loads only), and
    # narrower ones: the skinny family.
    Problem("gemv", "bfloat16", 4096, 1024, trans=True),
    Problem("gemv", "float32", 333, 1000, trans=True),
    Problem("gemv", "float16", 131072, 256, trans=True),
    Problem("gemv", "bfloat16", 70001, 1000, trans=True),
    Problem("gemv", "float32", 20000, 255, trans=True),
    Problem("gemv", "float16", 8, 65536, trans=True),
    Problem("gemv", "float16", 262144, 8, trans=True),
    Problem("gemv", "float32", 16384, 7, trans=True),
    Problem("gemm", "float16", 8, 4096, 4096),
    Problem("gemm", "bfloat16", 16, 1000, 2048),
    Problem("gemm", "float32", 4, 1000, 2000),
    Problem("gemm", "float16", 1, 100, 4096),
    Problem("gemm", "float32", 512, 512, 512),
    Problem("gemm", "float16", 1000, 1001, 999),
    Problem("gemm", "bfloat16", 1024, 1024, 1024),
    # B stored N x K (trans): every family's rules for W's rows along K.
    Problem("gemm", "float16", 4, 4096, 4096, trans=True),
    Problem("gemm", "bfloat16", 12, 1001, 1000, trans=True),
    Problem("gemm", "float32", 8, 1000, 2000, trans=True),
    Problem("gemm", "float16", 1, 100, 4096, trans=True),
    Problem("gemm", "float32", 512, 513, 512, trans=True),
    Problem("gemm", "float16", 1000, 1001, 999, trans=True),
    Problem("gemm", "bfloat16", 1024, 1001, 1024, trans=True),
)
CONFIGS_PER_PROBLEM = 40


def sampled_bundle() -> bundle.Bundle:
    """Entries of random valid configs of every family (kernel files left unwritten)."""
    rng = random.Random(31)
    target = bundle.BundleGpu(H200, "9.0", 132)
    made = bundle.Bundle(target)
    with targeting(target.compute_capability):
        for problem in SAMPLED:
            op = ops.for_problem(problem)
            space = op.space(problem)
            configs = [op.default_config(problem), *op.seed_configs(problem)]
            for _ in range(20000):
                if len(configs) >= CONFIGS_PER_PROBLEM:
                    break
                config = {name: rng.choice(values) for name, values in space.choices().items()}
                if space.check(config) is None and config not in configs:
                    configs.append(config)
            for config in configs[:CONFIGS_PER_PROBLEM]:
                index = len(made.entries)
                made.entries.append(bundle.make_entry(target, index, problem, config, f"kernels/{index}.cubin"))
    return made


@needs_gcc
def test_shape_rules_and_launches_match_the_ops_for_sampled_configs_of_every_family(tmp_path: Path) -> None:
    made = sampled_bundle()
    assert {e.family for e in made.entries} == {"gemv", "skinny", "skinny_tc", "simt", "mma", "wgmma", "narrow", "tall"}
    (tmp_path / bundle.HEADER).write_text(header.render(made))
    program = compile_query("gcc", tmp_path, tmp_path / "query")
    questions, expected = [], []
    for entry in made.entries:
        for shape in nearby(entry.problem):
            for sms in (132, 78):
                questions.append(f"launch {entry.index} {shape[0]} {shape[1]} {shape[2]} {sms}")
                expected.append(python_launch(made, entry, shape, sms))
    answers = ask(program, questions)
    wrong = [(q, a, e) for q, a, e in zip(questions, answers, expected, strict=True) if a != e]
    assert not wrong, wrong[:5]
    refused = sum(e == "-1" for e in expected)
    assert 0.1 < refused / len(expected) < 0.9


# --- strings from the database -----------------------------------------------------------------------


EVIL = 'Evil "GPU" \\ */ /* ??/ ??= \n\t% \u00e9 \u2603 end'


@needs_gcc
def test_a_gpu_name_with_quotes_backslashes_newlines_and_comment_ends_reaches_c_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = GpuInfo(EVIL, "GPU-evil", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    api.new_session()
    db = str(tmp_path / "evil.db")
    with open_store(db, import_shipped=False) as store:
        record(store, Problem("gemv", "float16", 4096, 8192), {**gemv.DEFAULT_CONFIG, "vec": 8}, ok(20.0), gpu)
    monkeypatch.setattr(bundle, "_kernel_image", lambda job: (b"not a real kernel", "cubin"))
    made = bundle.export_bundle(tmp_path / "evil", EVIL, db=db)
    api.new_session()
    assert made.gpu.name == EVIL
    text = (tmp_path / "evil" / bundle.HEADER).read_text()
    assert "Evil" not in text.split("#define AUTOTUNE_BUNDLE_GPU")[0]  # never in the comments before it
    program = compile_query("gcc", tmp_path / "evil", tmp_path / "query")
    assert bytes.fromhex(ask(program, ["gpu"])[0]) == EVIL.encode()
    assert json.loads((tmp_path / "evil" / bundle.MANIFEST).read_text())["gpu"]["name"] == EVIL


def test_c_strings_escape_what_c_would_read_otherwise() -> None:
    assert header.c_string('a"b\\c') == '"a\\"b\\\\c"'
    assert header.c_string("??/") == '"\\?\\?/"'
    assert header.c_string("\n\x01\u00e9") == '"\\n\\001\\303\\251"'
    assert header.c_string("*/") == '"*/"'  # harmless inside a literal


# --- bad input ---------------------------------------------------------------------------------------


@pytest.fixture
def tuned(tmp_path: Path) -> Iterator[str]:
    api.new_session()
    (tmp_path / "store").mkdir()
    db = str(tmp_path / "store" / "tuned.db")
    h200 = GpuInfo(H200, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    with open_store(db, import_shipped=False) as store:
        record(store, Problem("gemv", "float16", 4096, 8192), {**gemv.DEFAULT_CONFIG, "vec": 8}, ok(20.0), h200)
    yield db
    api.new_session()


@pytest.fixture
def fake_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "_kernel_image", lambda job: (b"kernel " + job.name.encode(), "cubin"))


def cli_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, out, err = run_cli(monkeypatch, capsys, *args)
    return code, out + err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu", "NVIDIA A100"], "unknown GPU 'NVIDIA A100': the database holds"),
        (["--gpu", "h200", "--op", "foo"], "unknown op 'foo'"),
        (["--gpu", "h200", "--op", "sgemm"], "nothing to bundle: no problem of float32 gemm"),
        (["--gpu", "h200", "--top", "2"], "--top applies to jsonl and csv"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tuned: str,
    fake_kernels: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    words: str,
) -> None:
    code, text = cli_run(
        monkeypatch, capsys, "export", "--format", "bundle", "-o", str(tmp_path / "out"), *args, "--db", tuned
    )
    lines = text.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], text
    assert "Traceback" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_an_output_that_is_a_file_or_another_folder_is_refused(tuned: str, fake_kernels: None, tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    with pytest.raises(AutotuneError, match="is a file") as error:
        exports.export(target, fmt="bundle", gpu="h200", db=tuned)
    assert "\n" not in str(error.value) and target.read_text() == "mine"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.c").write_text("int main(void) { return 0; }\n")
    with pytest.raises(AutotuneError, match="holds something else than a bundle"):
        exports.export(folder, fmt="bundle", gpu="h200", db=tuned)
    assert sorted(p.name for p in folder.iterdir()) == ["main.c"]


def test_a_bundle_folder_holding_other_files_or_the_working_folder_is_refused(
    tuned: str, fake_kernels: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program built beside an exported bundle's header: exported again, the bundle replaced its
    folder whole and the program was gone. `-o .` failed on the rename and left a retired folder."""
    out = tmp_path / "bundle"
    assert exports.export(out, fmt="bundle", gpu="h200", db=tuned) == 1
    (out / "main.c").write_text("int main(void) { return 0; }\n")
    (out / "kernels" / "cache").mkdir()
    with pytest.raises(AutotuneError, match=r"holds files that are not the bundle's \(main.c, kernels/cache\)"):
        exports.export(out, fmt="bundle", gpu="h200", db=tuned)
    assert (out / "main.c").exists() and (out / "kernels" / "cache").is_dir()
    monkeypatch.chdir(out / "kernels")
    for here in (Path("."), Path("..")):
        with pytest.raises(AutotuneError, match="is the folder you are in"):
            exports.export(here, fmt="bundle", gpu="h200", db=tuned)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "store"]  # no retired folder left


def test_a_bundle_is_replaced_whole_and_a_failed_write_leaves_the_old_one(
    tuned: str, fake_kernels: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "bundle"
    assert exports.export(out, fmt="bundle", gpu="h200", db=tuned) == 1
    (out / "kernels" / "stale.cubin").write_bytes(b"from an earlier export")
    assert exports.export(out, fmt="bundle", gpu="h200", db=tuned) == 1
    assert not (out / "kernels" / "stale.cubin").exists()
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def broken(made: bundle.Bundle) -> dict[str, Any]:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle, "manifest", broken)
    with pytest.raises(AutotuneError, match=r"cannot write the bundle .*No space left on device"):
        exports.export(out, fmt="bundle", gpu="h200", db=tuned)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "store"]


def test_a_replacing_bundle_gets_a_new_folders_mode(tuned: str, fake_kernels: None, tmp_path: Path) -> None:
    # mkdtemp stages it at 0700, which another account deploying the bundle could not read.
    out = tmp_path / "bundle"
    old = os.umask(0o022)
    try:
        for _ in range(2):  # new, then replacing the earlier one
            exports.export(out, fmt="bundle", gpu="h200", db=tuned)
            assert oct(out.stat().st_mode & 0o777) == oct(0o755)
    finally:
        os.umask(old)


def test_a_bundle_leaving_problems_out_is_refused_unless_partial_is_allowed(
    tuned: str, fake_kernels: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged = Problem("gemv", "float16", 1024, 1024)
    h200 = GpuInfo(H200, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    with open_store(tuned, import_shipped=False) as store:
        record(store, damaged, gemv.DEFAULT_CONFIG, ok(3.0), h200)
    with targeting("9.0"):
        broken = ops.compile_job(damaged, gemv.DEFAULT_CONFIG, "sm_90").name
    packed = tmp_path / "site-packages" / "db" / "kernels" / "gemv_f16.fatbin.xz"  # a path of the build machine
    whole = bundle._kernel_image

    def image(job: Any) -> tuple[bytes, str]:
        if job.name == broken:
            raise AutotuneError(f"the shipped kernel {packed} is damaged: reinstall autotune-kernels")
        return whole(job)

    monkeypatch.setattr(bundle, "_kernel_image", image)
    out = tmp_path / "bundle"
    args = ("export", "--format", "bundle", "-o", str(out), "--gpu", "h200", "--db", tuned)
    code, text = cli_run(monkeypatch, capsys, *args)
    errors = [line for line in text.splitlines() if line.startswith("error: ")]
    assert code == 2 and "Traceback" not in text, text
    assert "hgemv 1024x1024 is left out of the bundle" in text  # each one warned, with its path here
    assert errors == [
        "error: 1 problem cannot be bundled (the first, hgemv 1024x1024: no kernel: the shipped kernel "
        "gemv_f16.fatbin.xz is damaged: reinstall autotune-kernels); nothing written: --allow-partial writes the "
        "bundle without them, listed in its manifest"
    ]
    assert not out.exists()
    code, text = cli_run(monkeypatch, capsys, *args, "--allow-partial")
    assert code == 0 and "wrote 1 entry to" in text, text  # the noun in the number counted
    written = (out / bundle.MANIFEST).read_text()
    assert str(tmp_path) not in written  # the manifest travels: no folder of the machine that built it
    skipped = json.loads(written)["skipped"]
    assert [(s["m"], s["reason"]) for s in skipped] == [
        (1024, "no kernel: the shipped kernel gemv_f16.fatbin.xz is damaged: reinstall autotune-kernels")
    ]


def test_problems_that_share_a_kernel_take_it_once_though_each_build_differs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvcc's bytes differ from one build of a kernel to the next, and another process may rebuild the
    cached cubin between two problems' look-ups: two problems picking one kernel share its first image.
    Two different kernels of one name are still refused."""
    builds = iter(range(1000))
    monkeypatch.setattr(bundle, "_kernel_image", lambda job: (f"build {next(builds)}".encode(), "cubin"))
    h200 = GpuInfo(H200, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    db = str(tmp_path / "shared.db")
    config = {**gemv.DEFAULT_CONFIG, "vec": 8}
    with open_store(db, import_shipped=False) as store:
        for m in (4096, 8192):
            record(store, Problem("gemv", "float16", m, 8192), config, ok(20.0), h200)
    api.new_session()
    made = bundle.build("h200", db=db)
    assert len(made.entries) == 2 and len(made.kernels) == 1
    assert made.entries[0].kernel_file == made.entries[1].kernel_file
    real_job = ops.compile_job
    units = iter(range(1000))
    monkeypatch.setattr(  # one name for a new translation unit each time
        ops, "compile_job", lambda *a, **k: replace(real_job(*a, **k), name="same", source=f"unit {next(units)}")
    )
    with pytest.raises(AutotuneError, match="two different kernels are named same"):
        bundle.build("h200", db=db)
    api.new_session()


def test_a_problem_only_cublaslt_was_measured_on_is_neither_bundled_nor_refused(
    tuned: str, fake_kernels: None, tmp_path: Path
) -> None:
    """As the H100's tall transposed GEMVs are since their family changed: no trial of ours, only the
    library's. The bundle carries our kernels, so the problem is not one it lost."""
    from autotune.ops.cublas import FAMILY as CUBLAS
    from autotune.ops.cublas.mapping import SOURCE_PREFIX

    vendor_config = CUBLAS.config

    tall = Problem("gemv", "float16", 131072, 256, trans=True)
    with open_store(tuned, import_shipped=False) as store:
        pid = store.problem_id(tall, H200)
        gpu = GpuInfo(H200, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
        where = Provenance(pid, store.upsert_gpu(gpu), f"{SOURCE_PREFIX}130100", toolchain(), "13.0", "13.0")
        store.record_trial(where, vendor_config(0), ok(21.9))
    made = bundle.export_bundle(tmp_path / "b", "h200", db=tuned)
    assert [e.problem for e in made.entries] == [Problem("gemv", "float16", 4096, 8192)] and made.skipped == []


def test_op_filters_take_blas_names_and_families(tuned: str, fake_kernels: None, tmp_path: Path) -> None:
    assert bundle.wanted_ops(["hgemv", "gemm"]) == {("gemv", "float16"), ("gemm", None)}
    made = bundle.build("h200", ["hgemv"], db=tuned)
    assert [(e.problem, e.family) for e in made.entries] == [(Problem("gemv", "float16", 4096, 8192), "gemv")]
    with pytest.raises(AutotuneError, match="nothing to bundle"):
        bundle.build("h200", ["bgemv"], db=tuned)
    with pytest.raises(AutotuneError, match="--op is empty"):  # not the default op, hgemv, alone
        bundle.wanted_ops([" "])


def test_a_kernel_that_takes_its_clusters_at_launch_is_left_out(
    tuned: str, fake_kernels: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header's launches carry no attributes: a family giving its clusters at launch
    (Launch.cluster_dims) cannot be bundled, and says so rather than run without them."""
    clustered, plain = Problem("gemv", "float16", 4096, 8192), Problem("gemv", "float16", 1024, 1024)
    h200 = GpuInfo(H200, "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
    with open_store(tuned, import_shipped=False) as store:
        record(store, plain, gemv.DEFAULT_CONFIG, ok(3.0), h200)
    compiled_in = gemv.OP.launch

    def launch(problem: Problem, config: Any, sm_count: int) -> Any:
        geom = compiled_in(problem, config, sm_count)
        return replace(geom, cluster_dims=(1, 2, 1)) if problem == clustered else geom

    monkeypatch.setattr(gemv.OP, "launch", launch)
    made = bundle.build("h200", ["hgemv"], db=tuned)
    assert [entry.problem for entry in made.entries] == [plain]
    assert [(s["m"], s["n"], s["reason"]) for s in made.skipped] == [
        (4096, 8192, "its kernel takes its thread-block clusters at launch, which a bundle cannot give")
    ]
    assert len(made.kernels) == 1  # its kernel is neither compiled nor carried
