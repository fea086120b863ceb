"""Tables that fit a person's terminal (`tuner trials`, `tuner pareto`), and comment lines that
wrap (`tuner best`).

A table is a list of `Column`s of ready-made cells (`tuner.spec.figures.figure` made every
number). Narrow terminals (80 columns) get, in this order, until the table fits:
headers stacked on whole words (never `max-num -batche d-token s`), then short header aliases
explained in a legend line, then optional columns left out, said so under the table. No cell is
ever wrapped or cut (`no_wrap`): a number is never split across lines. Columns empty for every
row are dropped. `wide=True` (`--wide`) shows every column with its whole header, however wide.
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
    optional: bool = False  # left out (and said so) when the table does not fit
    stack: bool = field(default=True)  # header may stack its words on lines

    def header_for(self, short: bool) -> str:
        return self.short if short and self.short else self.header


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
    widest_cell = max((len(c) for c in col.cells), default=0)
    if not (stack and col.stack):
        return max(widest_cell, len(header))
    return max(widest_cell, max((len(p) for p in _pieces(header)), default=0))


def _total(cols: Sequence[Column], short: bool, stack: bool) -> int:
    return sum(_width_of(c, short, stack) for c in cols) + GAP * max(len(cols) - 1, 0)


def _table(cols: Sequence[Column], short: bool, stack: bool, title: str | None) -> Table:
    table = Table(
        title=title,
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
    for row in zip(*(c.cells for c in cols), strict=True):
        table.add_row(*row)
    return table


def layout(
    columns: Sequence[Column], width: int, *, wide: bool = False, title: str | None = None
) -> tuple[Table, list[str]]:
    """The table for a terminal `width` columns wide, and the lines to print under it (the
    aliases used, the columns left out)."""
    cols = [c for c in columns if any(c.cells)]  # a column empty for every row says nothing
    if wide:
        return _table(cols, short=False, stack=False, title=title), []
    # whole headers on one line, stacked on words, then aliases: the first that fits
    short, stack = next(
        ((sh, st) for sh, st in ((False, False), (False, True)) if _total(cols, sh, st) <= width),
        (True, True),
    )
    left_out: list[str] = []
    while _total(cols, short, stack) > width and any(c.optional for c in cols):
        last = max(i for i, c in enumerate(cols) if c.optional)
        left_out.insert(0, cols.pop(last).header)
    notes = []
    if short:
        used = [f"{c.short} = {c.header}" for c in cols if c.short and c.short != c.header]
        if used:
            notes.append("; ".join(used))
    if left_out:
        notes.append(f"not shown, to fit {width} columns: {', '.join(left_out)} (--wide)")
    return _table(cols, short, stack, title), notes


def print_table(
    console: Console,
    columns: Sequence[Column],
    *,
    wide: bool = False,
    title: str | None = None,
    notes: Sequence[str] = (),
) -> None:
    """The table fitted to the console, then its legend and `notes`, wrapped to the console."""
    table, legend = layout(columns, console.width, wide=wide, title=title)
    if wide:  # as wide as it needs: a terminal wraps it, a file or `less -S` keeps it
        console = Console(
            file=console.file,
            width=max(console.width, _total([c for c in columns if any(c.cells)], False, False)),
            highlight=False,
        )
    console.print(table)
    for line in [*legend, *notes]:
        console.print(wrap(line, console.width), markup=False, highlight=False, soft_wrap=True)


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
        if line.startswith("# ") and len(line) > width:
            parts = textwrap.wrap(
                line[2:],
                width - 2,
                subsequent_indent="  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            out += [f"# {part}" for part in parts]
        else:
            out.append(line)
    return "\n".join(out)
