"""The report's "Every trial" table fits a 1024 px window (issue 46): its narrowest layout,
estimated from the words each column cannot break (at spaces and `<wbr>`), the font size and
the failure column's least width in report.css, stays within the page's 960 px. In-process,
no browser; headless Chromium measured the demo's table (5 flags) and a 7-flag study's at
928 px in a 930 px frame (docs/results.md)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
from results_fixtures import frozen

import tuner.results.report as report
from tuner.results.report.page import trials_table
from tuner.trial import read as trial_point

CSS = (Path(report.__file__).parent / "templates" / "report.css").read_text()


def _css_px(rule: str, prop: str, default: float) -> float:
    found = re.search(re.escape(rule) + r"\s*\{[^}]*?" + prop + r":\s*(\d+)px", CSS)
    return float(found.group(1)) if found else default


# system-ui at the table's font size (13 px unless report.css says; `.wide`: more than 5
# flags): about 0.58 em a character (headers bold); each column adds its padding and border
FONT_PX = _css_px("table.trials", "font-size", 13.0)
WIDE_FONT_PX = _css_px("table.trials.wide", "font-size", FONT_PX)
COLUMN_PX, PAGE_PX = 11.0, 1024 - 2 * 32
WHY_MIN_PX = _css_px("table.trials td.why", "min-width", 0.0)
# the flags of search_spaces/vllm-core.yaml, the demo's space, as a study varies them, and
# the two more of vllm-shape.yaml
FLAGS = {
    "max-num-seqs": 256,
    "block-size": 16,
    "max-num-batched-tokens": 16114,
    "gpu-memory-utilization": 0.92,
    "enable-chunked-prefill": True,
}
SHAPE = {**FLAGS, "tensor-parallel-size": 4, "enable-prefix-caching": True}


def _points(flags: dict[str, object]):
    base = dict(p99_ttft_ms=3049.0, mean_tpot_ms=189.4, output_throughput=89.09)
    times = dict(engine_s=114.4, startup_s=87.76, workload_s=26.64)
    rows = [
        frozen(0, baseline=True, score=0.0, **base, **times),
        frozen(1, score=0.351, **base, **times),
        frozen(2, "PRUNED", ruled_out=True, score=0.2),
        frozen(3, "FAIL", failure="engine crashed during measurement (exit 1)", **times),
    ]
    for t in rows:
        t.params = dict(flags)
    return [trial_point(t) for t in rows]


def _unbroken(cell: str, char_px: float) -> float:
    """The widest run of characters a cell cannot break, in px."""
    text = unescape(re.sub(r"<wbr>", "\u200b", re.sub(r"<(?!wbr)[^>]+>", "", cell)))
    words = re.split(r"[\s\u200b]+", text)
    return char_px * max((len(w) for w in words), default=0)


@pytest.mark.parametrize("flags", [FLAGS, SHAPE], ids=["5 flags", "7 flags"])
def test_every_trial_fits_1024_px(flags: dict[str, object]) -> None:
    html = str(trials_table(_points(flags), {1}))
    char_px = 0.58 * (WIDE_FONT_PX if 'class="trials wide"' in html else FONT_PX)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S)
    grid = [re.findall(r"<t([hd])([^>]*)>(.*?)</t[hd]>", r, re.S) for r in rows]
    columns = len(grid[0])
    assert all(len(r) == columns for r in grid)
    widths = []
    for i in range(columns):
        cells = [r[i] for r in grid]
        px = max(_unbroken(text, char_px) for _, _, text in cells)
        if any("why" in attrs for _, attrs, _ in cells):
            px = max(px, WHY_MIN_PX)
        widths.append(px + COLUMN_PX)
    assert sum(widths) <= PAGE_PX, dict(zip((c[2] for c in grid[0]), widths, strict=True))
    assert "engine s (start-<wbr>up s)" in html and "<td>114.4 (87.76)</td>" in html
