"""How the `autotune` command lays out text for a terminal of a given width: plain-text tables
whose last column wraps at spaces (or moves below its row where too little room is left), and
lines that wrap at spaces with a hanging indent. A word too long for a line (a path) breaks after a
'/' where it can, never in the middle of a name. Width None means no wrapping (`--wide`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from autotune import ops
from autotune.core.problem import Problem

GAP = "  "  # between columns
# Below this many characters of room, the last column moves onto lines of its own under the row,
# indented by INDENT: a config wrapped into a 20-character column takes more lines than it saves.
MIN_LAST = 28
INDENT = "    "


def config_items(config: dict[str, int] | None, problem: Problem, *, brief: bool = False) -> list[str]:
    """A config as `key=value` words in the order of the problem's space (records store them sorted);
    a library family's config (cuBLASLt's) as what it means (`brief`: without the explanation)."""
    if not config:
        return ["-"]
    library = ops.library_for(config)
    if library is not None:
        words = library.describe(config)
        return [words if brief else f"{words} (the heuristic's answer of that rank)"]
    return [f"{k}={v}" for k, v in ops.in_space_order(problem, config).items()]


def problem_text(problem: Problem) -> str:
    """The problem as str() names it, less input dtypes that its op implies: a float16 int4 problem
    always reads (float16, int4, float16, uint8), so 'hqgemm 1x4096x4096 g128' says it all, and a
    line naming it still fits a terminal. Input dtypes an op does not imply are kept."""
    if problem.inputs and problem.op in ops.names():
        implied = ops.get(problem.op).complete(replace(problem, inputs=())).inputs
        if implied == problem.inputs:
            return str(replace(problem, inputs=()))
    return str(problem)


def _pieces(word: str, width: int) -> list[str]:
    """`word` in pieces of at most `width` characters, cut after a '/' where one is near enough
    (a path keeps whole folder names), else hard."""
    pieces = []
    while len(word) > width:
        cut = word.rfind("/", 0, width) + 1
        if cut < width // 2:  # no slash in the second half: a cut there would waste the line
            cut = width
        pieces.append(word[:cut])
        word = word[cut:]
    return [*pieces, word]


def wrap(text: str, width: int | None, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` characters, broken at spaces (a long word such as a path
    also after a '/'), every line after the first starting with `indent`."""
    if width is None or len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""  # the line being filled, its indent included
    for word in text.split():
        if line.strip() and len(line) + 1 + len(word) <= width:
            line += " " + word
            continue
        if line.strip():
            lines.append(line)
        lead = indent if lines else ""
        *whole, last = _pieces(word, max(width - len(indent), 10))
        for piece in whole:
            lines.append(lead + piece)
            lead = indent
        line = lead + last
    return [*lines, line]


def hanging(prefix: str, text: str, width: int | None) -> list[str]:
    """`prefix` + `text` wrapped to `width`, each following line indented under the text."""
    return wrap(prefix + text, width, " " * min(len(prefix), 8))


@dataclass
class Row:
    """A table row: its cells, and lines to print under it (indented), such as a failure's message."""

    cells: Sequence[str]
    below: Sequence[str] = field(default_factory=list)


def table_lines(headers: Sequence[str], rows: Sequence[Row], width: int | None, right: Sequence[int] = ()) -> list[str]:
    """A plain-text table. Every column but the last is as wide as its widest cell (columns in
    `right` aligned right, as numbers read); the last wraps at spaces into the room left, or, where
    that is under MIN_LAST, goes onto lines of its own under the row. Lines carry no trailing spaces."""
    widths = [max(len(headers[i]), *(len(row.cells[i]) for row in rows)) for i in range(len(headers) - 1)]
    left = sum(widths) + len(GAP) * len(widths)
    room = None if width is None else width - left
    beneath = room is not None and room < MIN_LAST
    below_room = None if width is None else max(width - len(INDENT), 20)

    def lead(cells: Sequence[str]) -> str:
        return GAP.join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    lines = (
        [lead(headers[:-1]).rstrip(), INDENT + headers[-1]]
        if beneath
        else [(lead(headers[:-1]) + GAP + headers[-1]).rstrip()]
    )
    for row in rows:
        last = row.cells[-1]
        if beneath:
            lines.append(lead(row.cells[:-1]).rstrip())
            lines.extend(INDENT + line for line in wrap(last, below_room))
        else:
            first, *rest = wrap(last, room)
            lines.append((lead(row.cells[:-1]) + GAP + first).rstrip())
            lines.extend(" " * left + line for line in rest)
        for note in row.below:
            lines.extend(INDENT + line for line in wrap(note, below_room))
    return lines
