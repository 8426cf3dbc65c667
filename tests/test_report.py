"""`autotune report`: the page's content from a small database, that every string from the database
is escaped, the command, and (marker `browser`, where `chromium` is on PATH) that the page renders in
headless Chromium with every chart drawn and no console message."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autotune import api, ops
from autotune.core.fingerprint import GpuInfo
from autotune.core.outcome import Outcome, Status
from autotune.core.problem import Problem
from autotune.ops import gemv
from autotune.ops.cublas import FAMILY as CUBLAS
from autotune.report import gather, render, svg, write_report
from autotune.report.page import plot_count
from autotune.store import Store, open_store
from tests.fakes import ok, record, run_cli

H200 = GpuInfo("NVIDIA H200", "GPU-1111", "9.0", 132, 60 * 2**20, 141 * 2**30, "13.0", "13.0")
PLANTED = "<script>alert(1)</script>"
EVIL = GpuInfo(f"{PLANTED} GPU", "GPU-6666", "9.0", 132, 60 * 2**20, 80 * 2**30, "13.0", "13.0")
SHAPE = Problem("gemv", "float16", 4096, 8192)
SMALL = Problem("gemv", "float16", 1024, 1024)
GEMM = Problem("gemm", "float16", 64, 128, 256)
FAST = {**gemv.DEFAULT_CONFIG, "block": 256, "vec": 8}


def measure(
    store: Store,
    problem: Problem,
    config: dict[str, int],
    outcome: Outcome,
    gpu: GpuInfo = H200,
    src: str | None = None,
) -> None:
    record(store, problem, config, outcome, gpu, src)


def fill(store: Store) -> None:
    """hgemv 4096x8192 on the H200 at 9, then 4 us, a wrong result, then 6 us, with a read floor of
    3.5 us; hgemv 1024x1024 at 3 us; an hgemm; on a GPU with a planted name, a launch error whose
    message is planted too, and one OK trial."""
    for block, outcome in (
        (64, ok(9.0)),
        (256, ok(4.0)),
        (512, Outcome(Status.WRONG_RESULT, "max error 0.5")),
        (128, ok(6.0)),
    ):
        measure(store, SHAPE, {**FAST, "block": block}, outcome)
    store.record_read_floor(H200, SHAPE.matrix_bytes, 3.5, "read_floor_v8")
    measure(store, SMALL, FAST, ok(3.0))
    measure(store, GEMM, dict(ops.for_problem(GEMM).default_config(GEMM)), ok(20.0))
    measure(store, SHAPE, {**FAST, "block": 64}, Outcome(Status.LAUNCH_ERROR, f"line 1\n{PLANTED}"), gpu=EVIL)
    measure(store, SHAPE, FAST, ok(5.0), gpu=EVIL)


@pytest.fixture
def db(db_path: Path) -> Iterator[str]:
    api.new_session()  # a store cached by another test's URL stays out of the way
    with open_store(str(db_path), import_shipped=False) as store:
        fill(store)
    yield str(db_path)
    api.new_session()


class _Page(HTMLParser):
    """The page's text, its script elements, its tags, the ids of its elements (by tag) and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.scripts = 0
        self.tags: list[str] = []
        self.ids: dict[str, bool] = {}  # id -> whether a <details> holds its element
        self.links: list[str] = []
        self.details = 0  # <details> open around the parser's position

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.scripts += tag == "script"
        values = dict(attrs)
        if values.get("id"):
            self.ids[str(values["id"])] = self.details > 0
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))
        self.details += tag == "details"

    def handle_endtag(self, tag: str) -> None:
        self.details -= tag == "details"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def expected_plots(html: str) -> int:
    found = re.search(r'data-plots-expected="(\d+)"', html)
    assert found
    return int(found.group(1))


def test_report_shows_best_floor_and_counts_per_gpu_and_op(db: str) -> None:
    data = gather(db=db)
    assert [g.name for g in data.gpus] == [EVIL.name, H200.name]
    h200 = data.gpus[1]
    assert [g.title for g in h200.groups] == ["hgemm", "hgemv"]
    big = h200.groups[1].shapes[1]
    assert (big.label, big.summary.best_us, big.floor_us) == ("4096x8192", 4.0, 3.5)
    assert big.best_so_far() == [(1, 9.0), (2, 4.0), (3, 4.0), (4, 4.0)]  # the wrong result is trial 3
    assert sorted(big.ok_times()) == [4.0, 6.0, 9.0]
    assert h200.statuses() == {"ok": 5, "wrong_result": 1}
    html = render(data)
    text = " ".join(parse(html).text)
    for cells in ("4096x8192 3/4 4.00 250 3.50 1.14", "1024x1024 1/1 3.00 333 - -"):
        assert cells in re.sub(r"\s+", " ", text)  # shape, ok/trials, best us, GB/s, floor, best/floor
    assert "TFLOP/s" in text and "block=256" in text
    assert "wrong_result" in text and "max error 0.5" in text
    # Per GPU a failures chart and the clocks, per op a convergence chart and a scatter.
    assert expected_plots(html) == plot_count(html) == 2 * 2 + 2 * (1 + 2)


def banner_text(html: str) -> str:
    found = re.search(r'<p class="note">(.*?)</p>', html)
    assert found
    return unescape(found.group(1))


def test_the_banner_counts_what_the_database_holds(db: str) -> None:
    """No cuBLASLt trial and one read floor; then a cuBLASLt algorithm the fastest on one problem, one
    problem holding only imported (kept) trials, and no floor."""
    html = render(gather(db=db))
    assert banner_text(html) == (
        "No cuBLASLt time is stored for these 4 problems: 'best' is among autotune's own kernels only (a "
        "sweep times cuBLASLt where it finds the library). Read floors (the time to only read the matrix) "
        "are stored for 1 of 4 problems."
    )
    assert "read floor µs" in " ".join(parse(html).text)
    with open_store(db, import_shipped=False) as store:
        measure(store, SMALL, CUBLAS.config(0), ok(2.0), src="cublasLt-130000")
        measure(store, GEMM, CUBLAS.config(1), ok(30.0), src="cublasLt-130000")
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM read_floors")
        connection.execute("UPDATE trials SET origin = 'shipped:h200.jsonl' WHERE time_us IN (20.0, 30.0)")
    data = gather(db=db)
    hgemm = data.gpus[1].groups[0]
    assert [s.kept_only for s in hgemm.shapes] == [True] and hgemm.shapes[0].kept_ratios() == [(1, 1.0), (2, 1.5)]
    html = render(data)
    assert banner_text(html) == (
        "cuBLASLt's algorithms are stored for 2 of 4 problems and take part in 'best' (config "
        "cublas_algo=rank): cuBLASLt is the fastest for 1. No read floor is stored (autotune bench measures "
        "one), so the tables have no floor columns. 1 of 4 problems hold only the fastest configs a records "
        "file kept, not the tuning run that found them; their charts show those kept leaders."
    )
    text = re.sub(r"\s+", " ", " ".join(parse(html).text))
    assert "read floor" not in text.replace(banner_text(html), "") and "best/floor" not in text
    assert "1024x1024 2/2 2.00 500 cuBLASLt cublas_algo=0" in text
    assert "The 2 fastest configs kept per problem" in text and "cuBLASLt best for 1" in text
    # The kept hgemm draws its kept leaders instead of a convergence chart: the plot count stays.
    assert expected_plots(html) == plot_count(html) == 2 * 2 + 2 * (1 + 2)


def test_contents_link_to_collapsed_groups_and_the_clocks_have_a_legend(db: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE trials SET power_w = 300 + time_us, sm_mhz = 1980 WHERE status = 'ok'")
    html = render(gather(db=db))
    page = parse(html)
    targets = [link.removeprefix("#") for link in page.links if link.startswith("#")]
    assert len(targets) == len(page.links) == 2 * 3 + 3  # per GPU: itself, failures, clocks; 3 op groups
    assert all(target in page.ids for target in targets), set(targets) - set(page.ids)
    # A link into a closed <details> opens it: each op group's link leads inside its group.
    groups = [target for target in targets if re.fullmatch(r"gpu-\d+-\d+", target)]
    assert len(groups) == 3 and all(page.ids[group] for group in groups)
    assert not any(page.ids[target] for target in targets if target not in groups)
    assert html.count('<details class="group">') == 3 and page.details == 0
    legend = re.findall(r'<g class="legend"><circle [^>]*fill="(#[0-9a-f]+)"/><text [^>]*>([^<]*)</text>', html)
    # The H200's clocks name its two op groups in their colors; the planted GPU's its one.
    assert legend == [(svg.COLORS[0], "hgemv"), (svg.COLORS[0], "hgemm"), (svg.COLORS[1], "hgemv")]


def test_every_string_from_the_database_is_escaped(db: str) -> None:
    html = render(gather(db=db))
    assert PLANTED not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = parse(html)
    assert page.scripts == 1  # the page's own check, nothing planted
    text = "".join(page.text)
    assert f"{PLANTED} GPU" in text  # the GPU's name, shown as text
    assert PLANTED in text.replace(f"{PLANTED} GPU", "")  # and the failure's message


def test_control_characters_from_the_database_are_shown_as_escapes(db: str) -> None:
    # html.escape leaves ESC, BEL and U+202E as they are: `cat` of the page would replay them.
    with open_store(db, import_shipped=False) as store:
        measure(store, SMALL, {**FAST, "block": 64}, Outcome(Status.LAUNCH_ERROR, "\x1b]0;pwned\x07\u202eoops"))
    html = render(gather(db=db))
    assert not any(ch in html for ch in "\x1b\x07\u202e")
    assert "\\x1b]0;pwned\\x07\\u202eoops" in html


def test_a_link_planted_at_the_output_is_replaced_not_followed(db: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    page = tmp_path / "report.html"
    page.symlink_to(victim)
    old = os.umask(0o022)
    try:
        write_report(page, db=db)
    finally:
        os.umask(old)
    assert victim.read_text() == "untouched\n"
    assert not page.is_symlink() and page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert oct(page.stat().st_mode & 0o777) == oct(0o644)  # a new file's mode, not mkstemp's 0600
    assert not list(tmp_path.glob(".*.tmp"))


def test_one_gpu_and_an_empty_database(db: str, tmp_path: Path) -> None:
    data = gather("h200", db=db)
    assert [g.name for g in data.gpus] == [H200.name]
    empty = tmp_path / "empty.db"
    open_store(str(empty), import_shipped=False).close()
    html = render(gather(db=str(empty)))
    assert "holds no tuned problem yet" in html
    assert expected_plots(html) == 0


@pytest.mark.parametrize("time_us", [5e-324, 1e-200, 0.0, -3.0])
def test_a_time_no_kernel_call_takes_written_into_the_database_is_not_charted(db: str, time_us: float) -> None:
    """The planted GPU's only OK trial (all its charts would show), the 1024x1024's only one and the
    read floor, written straight in: the page is written, without them in its charts."""
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE trials SET time_us = ? WHERE status = 'ok' AND time_us IN (3.0, 5.0)", (time_us,))
        connection.execute("UPDATE read_floors SET time_us = ?", (time_us,))
    data = gather(db=db)
    small, big = data.gpus[1].groups[1].shapes
    assert small.ok_times() == [] and small.best_so_far() == [] and small.tflops is None
    assert big.floor_ratio is None and sorted(big.ok_times()) == [4.0, 6.0, 9.0]
    html = render(data)
    assert expected_plots(html) == plot_count(html) == 2 * 2 + 2 * (1 + 2)


def test_a_chart_leaves_out_what_no_axis_holds() -> None:
    for tiny in (5e-324, 1e-200, 0.0, -1.0, float("nan"), float("inf")):
        scatter = svg.scatter_chart(
            [(1, tiny)], best=[(1, tiny, "x")], floors=[(1, tiny)], columns=1, title="t", x_label="x", y_label="y"
        )
        assert 'class="mark note"' in scatter, tiny
        line = svg.line_chart([("a", [(1, tiny), (2, 3.0)])], title="t", x_label="x", y_label="y", log_y=True)
        assert line.count('class="mark"') == 1 and "nan" not in line and "inf" not in line, tiny
    dots = svg.dots_chart([("a", [(1.0, float("inf")), (1e308, 2.0), (1.0, 2.0)])], title="t", x_label="x", y_label="y")
    assert dots.count('class="mark"') == 1 and "nan" not in dots and "inf" not in dots
    assert svg.Scale(2.0, 2.0, 0.0, 10.0)(2.0) == 5.0  # one value, no range: the middle, not 0 / 0


def test_charts_draw_and_say_when_there_is_nothing() -> None:
    assert svg.nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert svg.log_ticks(3, 900) == [5, 10, 20, 50, 100, 200, 500]
    assert svg.log_ticks(1, 1e6) == [1, 10, 100, 1000, 1e4, 1e5, 1e6]
    assert svg.log_ticks(1.0, 1.05) == [1.0, 1.02, 1.04]  # too narrow for 1-2-5: round linear steps
    chart = svg.line_chart([("a<b>", [(1, 2.0), (2, 1.0)])], title="t", x_label="x", y_label="y", log_y=True)
    assert chart.count('class="mark"') == 1 and "a&lt;b&gt;" in chart
    empty = svg.bar_chart([], title="<t>", empty="no failed trial")
    assert 'class="mark note"' in empty and "no failed trial" in empty and "<t>" not in empty


DOC = Path(__file__).resolve().parents[1] / "docs" / "report.md"
STATED = re.compile(
    r"For the shipped records \(([\d,]+) trials of\s+([\d,]+) problems on (\w+) GPUs\) it is written in a few"
    r"\s+seconds \(under (\d+)\), weighs under (\d+) MB and opens under\s+([\d,]+) px tall at (\d+) px wide"
)


def stated() -> dict[str, int]:
    """The figures docs/report.md states of the shipped records' report, which the tests check."""
    found = STATED.search(DOC.read_text(encoding="utf-8"))
    assert found, "docs/report.md no longer states the shipped report's figures in the form this test checks"
    words = {"one": 1, "two": 2, "three": 3, "four": 4}
    trials, problems, gpus, seconds, megabytes, height, width = found.groups()
    number = {k: int(v.replace(",", "")) for k, v in (("trials", trials), ("problems", problems))}
    return {
        **number,
        "gpus": words[gpus],
        "seconds": int(seconds),
        "bytes": int(megabytes) * 10**6,
        "height": int(height.replace(",", "")),
        "width": int(width),
    }


@pytest.mark.slow
@pytest.mark.shipped_records
@pytest.mark.vendor  # the selector answers cuBLASLt where the records say it won
def test_report_of_the_shipped_records(tmp_path: Path) -> None:
    """The records that ship: the counts docs/report.md states, written within its time, its size."""
    api.new_session()
    url = str(tmp_path / "shipped.db")
    open_store(url).close()  # the import, which every first open does, is not the report's time
    start = time.perf_counter()
    data = write_report(tmp_path / "report.html", db=url)
    seconds = time.perf_counter() - start
    api.new_session()
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    held, doc = data.holdings(), stated()
    assert (len(data.gpus), held.problems, held.trials) == (doc["gpus"], doc["problems"], doc["trials"])
    assert seconds < doc["seconds"] and len(html.encode()) < doc["bytes"], (seconds, len(html))
    assert expected_plots(html) == plot_count(html)
    # Every shipped problem holds imported leaders only, none a floor: the banner says so, no table has a floor column.
    assert held.kept_only == held.problems and held.floors == 0 and "read floor µs" not in html
    assert f"cuBLASLt is the fastest for {held.vendor_best}." in banner_text(html) and held.vendor_best > 0
    # The ties it names are where `best` answers ours: the rest of cuBLASLt's wins are what `best` answers.
    assert f"For {held.vendor_ties} of them our fastest kernel is within 2%" in banner_text(html)
    chosen = api.listed_choices(api.list_problems(db=url), db=url)
    api.new_session()
    assert sum(CUBLAS.owns(choice.config) for choice in chosen) == held.vendor_best - held.vendor_ties > 0
    stated_ties = f"in the shipped records {held.vendor_ties} of cuBLASLt's {held.vendor_best})"
    assert stated_ties in " ".join(DOC.read_text(encoding="utf-8").split())


# --- the command --------------------------------------------------------------------------------------


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    def invoke(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, *args)

    return invoke


def test_report_command(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Callable[..., tuple[int, str, str]]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run("report", "--db", db)
    assert code == 0, err
    written = tmp_path / "report.html"
    assert f"report written to {written}" in out and "(4 problems on 2 GPUs)" in out
    assert written.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    code, out, err = run("report", "-o", str(tmp_path / "h200.html"), "--gpu", "nvidia-h200", "--db", db)
    assert code == 0 and "(3 problems on 1 GPU)" in out and (tmp_path / "h200.html").exists()
    for args, words in (
        (["--gpu", "a100"], ["GPU 'a100'", "NVIDIA H200"]),  # what it names, and what the database holds
        (["-o", str(tmp_path / "no" / "such" / "r.html")], ["cannot write the report"]),
    ):
        code, out, err = run("report", *args, "--db", db)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert all(word in lines[0] for word in words)


# --- in a browser -------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
CONSOLE = re.compile(r":CONSOLE[:(]")  # how Chromium's log writes the page's console messages


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.shipped_records
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (apt-get install chromium; .ci/run does)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """The shipped records plus the planted strings: Chromium draws every chart (those of closed groups
    too), the page opens as short as docs/report.md says, logs nothing to the console (no script error,
    nothing the page's policy refused) and takes a screenshot."""
    assert CHROMIUM is not None
    api.new_session()
    url = str(tmp_path / "shipped.db")
    with open_store(url) as store:
        fill(store)
    page = tmp_path / "report.html"
    write_report(page, db=url)
    api.new_session()
    expected = expected_plots(page.read_text(encoding="utf-8"))
    assert expected > 30
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    doc = stated()
    dom = subprocess.run(
        [
            *common,
            f"--window-size={doc['width']},900",
            "--enable-logging=stderr",
            "--log-level=0",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri() + "#gpu-2-1",  # a link of the contents to an op group, which opens it
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-plots="{expected}"' in dom.stdout, re.findall(r"data-plots[-a-z]*=\"\d*\"", dom.stdout)
    height = re.search(r'data-height="(\d+)"', dom.stdout)
    assert height and 1000 < int(height.group(1)) < doc["height"], height  # the contents, groups collapsed
    console = [line for line in dom.stderr.splitlines() if CONSOLE.search(line)]
    assert not console, console
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout
    assert dom.stdout.count('<details class="group" open') == 1, "following a group's link opens it, only it"
    shot = tmp_path / "report.png"
    taken = subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000  # a blank 1280x2000 page is a few kB
