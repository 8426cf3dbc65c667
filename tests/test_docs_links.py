"""Every relative link in README.md and docs/*.md names a file that exists, and every anchor a heading
of its file, as GitHub renders them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
INDENTED_CODE = re.compile(r"(?:^(?: {4}|\t).*\n?)+", re.M)  # the docs' 4-space command and output blocks
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def prose(text: str) -> str:
    """`text` without code: fenced blocks, indented blocks and code spans hold no links."""
    return CODE_SPAN.sub("", INDENTED_CODE.sub("", FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation removed except '-' and '_',
    spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a file's headings; a repeated slug gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {_name(linked)}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading of {_name(linked)} has the anchor #{anchor}")
    return broken


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_slugs_follow_githubs_rules() -> None:
    assert slug("BLAS operands: leading dimensions, layouts, batches, strided vectors") == (
        "blas-operands-leading-dimensions-layouts-batches-strided-vectors"
    )
    assert slug("`autotune.gemv()` and `gemm()` in your_program") == "autotunegemv-and-gemm-in-your_program"
    assert slug("Tuning speed: seconds until ≥ 2%") == "tuning-speed-seconds-until--2"


def test_a_missing_file_a_missing_anchor_and_a_repeated_heading_are_told_apart(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Part\n\n## Part\n\n"
        "[ok](#part-1) [dup](#part-2) [gone](gone.md) [self](page.md#title) [web](https://example.com/x)\n"
        "    [in a code block](nowhere.md)\n\n`[in a span](nowhere.md)`\n"
    )
    assert anchors(page) == {"title", "part", "part-1"}
    broken = broken_links(page)
    assert len(broken) == 2
    assert broken[0].startswith("#part-2: no heading")
    assert broken[1].startswith("gone.md: no file")
