"""Tables that fit a person's terminal (`tuner trials`, `tuner pareto`), and comment lines that
wrap (`tuner best`). What a narrow terminal gets, in order (stacked headers, short names
explained in a legend, columns left out by a stated priority): docs/results.md, "Tables that fit
the terminal".

A table is a list of `Column`s of ready-made cells (`tuner.spec.figures.figure` made every
number); rich reads 80 columns on a pipe or a file. What callers may assume: a column marked
optional or spare may be left out, and is named under the table; the trial, its state, its
figures and its score never are; a cell is never wrapped or cut (`no_wrap`: a table still too
wide prints wider than the terminal); columns empty in every row are dropped; `wide=True`
(`--wide`) leaves no column out and shortens no header.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table

GAP = 2  # spaces between two columns

# Short names for the flags tuned most, when the whole flag name does not fit; any other flag
# of three words or more reads as its initials. The legend line under the table spells them out.
FLAG_ALIASES = {
    "max-num-seqs": "seqs",
    "max-num-batched-tokens": "batch tokens",
    "gpu-memory-utilization": "gpu mem",
    "enable-chunked-prefill": "chunked",
    "enable-prefix-caching": "prefix cache",
    "block-size": "block",
    "tensor-parallel-size": "TP",
    "pipeline-parallel-size": "PP",
    "max-model-len": "model len",
    "kv-cache-dtype": "kv dtype",
}


def flag_alias(name: str) -> str:
    """A flag's short header: `max-num-seqs` -> "seqs", `foo-bar-baz-qux` -> "fbbq"."""
    if name in FLAG_ALIASES:
        return FLAG_ALIASES[name]
    parts = [p for p in name.replace("_", "-").split("-") if p]
    return "".join(p[0] for p in parts) if len(parts) >= 3 else name


@dataclass
class Column:
    """One column: its whole header (words with a unit: "P99 TTFT (ms)", or a flag name), the
    cells, top to bottom, and how it gives way on a narrow terminal."""

    header: str
    cells: list[str]
    short: str = ""  # an alias, spelled out in the legend: a flag name's `flag_alias`
    text: bool = False  # left-justified words; numbers go right
    optional: bool = False  # left out first (and said so) when the table does not fit
    spare: bool = False  # left out next, after every optional column (a tuned flag)
    stack: bool = field(default=True)  # header may stack its words on lines
    short_cells: list[str] | None = None  # shorter words for text cells, in the legend

    def header_for(self, short: bool) -> str:
        return self.short if short and self.short else self.header

    def cells_for(self, short: bool) -> list[str]:
        return self.short_cells if short and self.short_cells is not None else self.cells

    @property
    def give_way(self) -> int:
        """Which columns a narrow table leaves out first: the highest, the rightmost first;
        0: never."""
        return 2 if self.optional else 1 if self.spare else 0


def _pieces(header: str) -> list[str]:
    """The header's words; a long hyphenated name breaks only after its hyphens."""
    out = []
    for word in header.split():
        parts = word.split("-")
        out += [p + "-" for p in parts[:-1]] + [parts[-1]] if len(word) > 8 else [word]
    return [p for p in out if p]


def _stacked(header: str, width: int) -> str:
    """The header on lines of at most `width` characters, broken only between words."""
    lines: list[str] = []
    for piece in _pieces(header):
        glue = "" if lines and lines[-1].endswith("-") else " "
        if lines and len(lines[-1]) + len(glue) + len(piece) <= width:
            lines[-1] += glue + piece
        else:
            lines.append(piece)
    return "\n".join(lines)


def _width_of(col: Column, short: bool, stack: bool) -> int:
    header = col.header_for(short)
    widest_cell = max((len(c) for c in col.cells_for(short)), default=0)
    if not (stack and col.stack):
        return max(widest_cell, len(header))
    return max(widest_cell, max((len(p) for p in _pieces(header)), default=0))


def _total(cols: Sequence[Column], short: bool, stack: bool) -> int:
    return sum(_width_of(c, short, stack) for c in cols) + GAP * max(len(cols) - 1, 0)


def _table(cols: Sequence[Column], short: bool, stack: bool) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP - 1, 0, 0),  # and the box's blank divider: GAP spaces
        collapse_padding=False,
    )
    for col in cols:
        width = _width_of(col, short, stack)
        header = col.header_for(short)
        table.add_column(
            _stacked(header, width) if stack and col.stack else header,
            justify="left" if col.text else "right",
            no_wrap=True,
            min_width=width,
        )
    for row in zip(*(c.cells_for(short) for c in cols), strict=True):
        table.add_row(*row)
    return table


@dataclass
class Layout:
    """A table fitted to a width: the rich table, the lines to print under it (the aliases
    used, the columns left out), and the width it needs (more than asked only when the
    columns that are never left out do not fit: then it is printed wider, never cut)."""

    table: Table
    notes: list[str]
    width: int


def layout(columns: Sequence[Column], width: int, *, wide: bool = False) -> Layout:
    """The table for a terminal `width` columns wide (`Layout`)."""
    cols = [c for c in columns if any(c.cells)]  # a column empty for every row says nothing
    if wide:
        needed = _total(cols, False, False)
        return Layout(_table(cols, short=False, stack=False), [], needed)
    # whole headers on one line, stacked on words, then aliases: the first that fits
    short, stack = next(
        ((sh, st) for sh, st in ((False, False), (False, True)) if _total(cols, sh, st) <= width),
        (True, True),
    )
    left_out: list[Column] = []
    while _total(cols, short, stack) > width and any(c.give_way for c in cols):
        rank = max(c.give_way for c in cols)
        left_out.append(cols.pop(max(i for i, c in enumerate(cols) if c.give_way == rank)))
    notes = []
    if short:
        used = [f"{c.short} = {c.header}" for c in cols if c.short and c.short != c.header]
        used += [
            f"{brief} = {whole}"
            for c in cols
            if c.short_cells is not None
            for brief, whole in dict(zip(c.short_cells, c.cells, strict=True)).items()
            if brief != whole
        ]
        if used:
            notes.append("; ".join(dict.fromkeys(used)))
    if left_out:
        shown = [c.header for c in columns if any(c is gone for gone in left_out)]
        notes.append(f"not shown, to fit {width} columns: {', '.join(shown)} (--wide)")
    table = _table(cols, short, stack)
    return Layout(table, notes, max(width, _total(cols, short, stack)))


def print_table(
    console: Console,
    columns: Sequence[Column],
    *,
    wide: bool = False,
    title: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> None:
    """The `title` (`title_lines`), the table fitted to the console, then its legend and
    `notes`, wrapped to the console."""
    fitted, width = layout(columns, console.width, wide=wide), console.width
    for line in title_lines(title, width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if fitted.width > console.width:  # as wide as it needs: a terminal wraps it, a file or
        # `less -S` keeps it; never a number cut to fit
        console = Console(file=console.file, width=fitted.width, highlight=False)
    console.print(fitted.table)
    for line in [*fitted.notes, *notes]:
        console.print(wrap(line, width), markup=False, highlight=False, soft_wrap=True)


def title_lines(parts: Sequence[str], width: int) -> list[str]:
    """A table's title: its parts one under the other, left-aligned, each wrapped on words to
    `width` (continuations indented). Not rich's table title: that one is centred over the
    table and broken wherever the width falls, mid-phrase ("...lower is better against mean
    TPOT (ms), lower is better — 1 of\n1 feasible configs, among those...")."""
    return [wrap(part, width) for part in parts]


def wrap(line: str, width: int, indent: str = "  ") -> str:
    """One line wrapped on words to `width`, its continuation lines indented."""
    return "\n".join(
        textwrap.wrap(
            line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        or [""]
    )


def wrap_comments(text: str, width: int) -> str:
    """Every `# ` comment line longer than `width` wrapped on words, each part still a comment
    (so the text stays a shell script); other lines as they are."""
    out = []
    for line in text.splitlines():
        if line.startswith("# ") and len(line) > width:  # wrapped as `wrap` wraps a line
            out += [f"# {part}" for part in wrap(line[2:], width - 2).splitlines()]
        else:
            out.append(line)
    return "\n".join(out)
