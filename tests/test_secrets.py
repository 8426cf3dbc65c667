"""A database password never reaches an error, `doctor`, a report page or a log, however the URL is
written: as user:password@, as ?password=, with an unencoded "@", mistyped, or with a bad port."""

# The CLI fixtures (run) come from test_cli; ruff takes their use as arguments for redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from autotune.core.redact import mask_url, scrub
from tests.test_cli import Cli, assert_one_error, run  # noqa: F401

SECRET = "S3cretPw"
SERVER = "postgresql+psycopg://autotune:{}@127.0.0.1:1/tuning"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SERVER.format(SECRET), "postgresql+psycopg://autotune:***@127.0.0.1:1/tuning"),
        (SERVER.format("se@" + SECRET), "postgresql+psycopg://autotune:***@127.0.0.1:1/tuning"),
        (SERVER.format("a/b:" + SECRET), "postgresql+psycopg://autotune:***@127.0.0.1:1/tuning"),
        (
            f"postgresql://autotune@h/db?sslmode=require&PassWord={SECRET}",
            "postgresql://autotune@h/db?sslmode=require&PassWord=***",
        ),
        (
            f"postgresql://autotune@h/db?pass%77ord={SECRET}&sslpassword={SECRET}",
            "postgresql://autotune@h/db?pass%77ord=***&sslpassword=***",
        ),
        (f"postgresql+psycopg//autotune:{SECRET}@h/db", "postgresql+psycopg//autotune:***@h/db"),
        (f"postgresql+psycopg:/autotune:{SECRET}@h/db", "postgresql+psycopg:/autotune:***@h/db"),
        (f"postgresql+psycopg:autotune:{SECRET}@h/db", "postgresql+psycopg:autotune:***@h/db"),
        (f"postgresql://autotune:{SECRET}", "postgresql://autotune:***"),  # "@host" missing: a port?
        ("postgresql://autotune@h:5432/db", "postgresql://autotune@h:5432/db"),
        ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),  # no port with a password typed into it
        (f"sqlite+pysqlcipher://:{SECRET}@/tuning.db", "sqlite+pysqlcipher://:***@/tuning.db"),
    ],
)
def test_every_form_of_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert SECRET not in scrub(f"failed for {url}", url)


def test_a_drivers_message_is_scrubbed_of_the_password_and_its_pieces() -> None:
    # SQLAlchemy splits a password at an unencoded "@": the driver names its tail as the host.
    url = SERVER.format("se@" + SECRET)
    said = scrub(f"failed to resolve host '{SECRET}@127.0.0.1'", url)
    assert said == "failed to resolve host '***@127.0.0.1'"


def test_a_short_password_is_hidden_where_it_stands_alone_not_inside_the_drivers_words() -> None:
    url = "postgresql+psycopg://u:p@127.0.0.1:1/x"
    said = scrub(
        'connection to server at "127.0.0.1", port 1 failed: Connection refused (is it accepting connections?) '
        "for postgresql://u:p@127.0.0.1:1/x, password=p",
        url,
    )
    assert said == (
        'connection to server at "127.0.0.1", port 1 failed: Connection refused (is it accepting connections?) '
        "for postgresql://u:***@127.0.0.1:1/x, password=***"
    )
    # A longer secret is hidden even inside a word.
    assert scrub(f"host x{SECRET}y", SERVER.format(SECRET)) == "host x***y"


MISTYPED = [
    f"postgresql+psycopg//autotune:{SECRET}@127.0.0.1:5432/db",
    f"postgresql+psycopg:/autotune:{SECRET}@127.0.0.1:5432/db",
]


@pytest.mark.parametrize("command", [["list"], ["gpus"], ["best", "--m", "64", "--n", "64", "--gpu", "x"]])
@pytest.mark.parametrize(
    ("url", "words"),
    [
        *((url, ["looks like a URL without its '://'"]) for url in MISTYPED),
        (SERVER.format("se@" + SECRET), ["'@' that is not percent-encoded", "%40"]),
        (f"postgresql+psycopg://autotune:{SECRET}@127.0.0.1:notaport/db", ["port is not a number"]),
        (f"postgresql+psycopg://autotune@127.0.0.1:1/db?password={SECRET}", ["password=***"]),
        (SERVER.format(SECRET), ["autotune:***@127.0.0.1:1"]),  # nothing listens there
    ],
)
def test_a_bad_or_unreachable_url_is_one_line_without_the_password(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], url: str, words: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert_one_error(run(*command, "--db", url), *words)
    assert SECRET not in run(*command, "--db", url).text
    monkeypatch.setenv("AUTOTUNE_DB", url)
    result = run(*command)
    assert_one_error(result, *words)
    assert SECRET not in result.text
    assert list(tmp_path.iterdir()) == []  # a mistyped URL never becomes a SQLite file here


@pytest.mark.parametrize("url", [*MISTYPED, f"postgresql+psycopg://u:{SECRET}@127.0.0.1:notaport/db"])
def test_doctor_names_a_bad_url_without_its_password(
    run: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.chdir(tmp_path)
    result = run("doctor", "--db", url)
    assert "Traceback" not in result.text and SECRET not in result.text
    assert "--  database" in result.out and "***" in result.out, result.out


def test_a_file_name_that_begins_like_a_url_is_written_with_dot_slash(
    run: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("list", "--db", "notes:v2.db").code == 2
    assert run("list", "--db", "./notes:v2.db").code == 0 and (tmp_path / "notes:v2.db").is_file()


def test_a_secret_query_parameter_stays_out_of_doctor_and_the_report(
    run: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # SQLite ignores the parameter (with a warning), so the page and doctor's line are made for real.
    monkeypatch.setenv("COLUMNS", "300")
    url = f"sqlite:///{tmp_path / 'tuning.db'}?password={SECRET}"
    doctor = run("doctor", "--db", url)
    assert "ok  database" in doctor.out and "password=***" in doctor.out and SECRET not in doctor.text, doctor
    page = tmp_path / "report.html"
    reported = run("report", "-o", str(page), "--db", url)
    assert reported.code == 0 and SECRET not in reported.text, reported
    assert SECRET not in page.read_text() and "password=***" in page.read_text()


@pytest.mark.stress
def test_a_password_as_query_parameter_stays_out_of_a_real_servers_doctor_and_report(
    run: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On PostgreSQL, where libpq takes ?password= and the database opens."""
    from tests import postgres

    monkeypatch.setenv("COLUMNS", "300")
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))  # the server's user must reach it
    with postgres.server(folder) as server:
        url = server.new_database()
        head, _, rest = url.partition("://")
        user_password, _, where = rest.partition("@")
        user, _, password = user_password.partition(":")
        as_parameter = f"{head}://{user}@{where}?password={password}"
        doctor = run("doctor", "--db", as_parameter)
        assert "ok  database" in doctor.out and "password=***" in doctor.out, doctor
        page = tmp_path / "report.html"
        reported = run("report", "-o", str(page), "--db", as_parameter)
        assert reported.code == 0, reported
        for said in (doctor.text, reported.text, page.read_text()):
            assert password not in said
    shutil.rmtree(folder, ignore_errors=True)
