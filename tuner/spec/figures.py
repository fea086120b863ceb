"""How a number reads to a person: one formatter for every table and line.

`figure` is the only number formatter of every output: `tuner trials`, `pareto`, `best` and
`export`, the headline words every progress line shows, the report's tables, hover texts and
axes, and the PNG: plain decimals, never `1.726e+04`, never
`0.8999999999999999` (a metric's name with its unit: `tuner.spec.metric_keys.metric_label`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TypeVar, overload

EXACT_DIGITS = 12  # a float written for a program (JSON, CSV, a flag): what it stands for
SIGNIFICANT = 4  # digits kept when no places are asked: 3123, 197.5, 88.1, 0.09684
MAX_PLACES = 6  # a smaller figure reads 0 (its sign kept)
PARTIAL_MARK = "~"  # before a stopped trial's figures: they cover only the requests done then
PARTIAL_NOTE = f"{PARTIAL_MARK}: partial, the trial was stopped early (requests done then)"


def figure(value: object, places: int | None = None, *, sign: bool = False) -> str:
    """`value` as people read it; "" for None or NaN.

    A bool reads True/False, an int as written, anything but a number as `str` gives it. A
    float is rounded to `places` decimals when given (kept, so a column's decimals line up:
    197.50), else to SIGNIFICANT digits without ever rounding away a digit before the point
    (17255.3 -> 17255) and without trailing zeros (0.8999999999999999 -> 0.9).
    `sign`: a + on positive figures (a score: +0.097).
    """
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, int):
        return f"{value:+d}" if sign else str(value)
    v = float(value)
    if math.isnan(v):
        return ""
    if math.isinf(v):
        return ("+" if sign and v > 0 else "") + ("inf" if v > 0 else "-inf")
    if places is None:
        magnitude = math.floor(math.log10(abs(v))) if v else 0
        decimals = min(max(SIGNIFICANT - 1 - magnitude, 0), MAX_PLACES)
        text = f"{v:.{decimals}f}"
        if "." in text:
            text = text.rstrip("0").rstrip(".")
    else:
        text = f"{v:.{places}f}"
    if text.lstrip("-").strip("0.") == "":  # -0.000 and -0 read as 0
        text = text.lstrip("-")
    if sign and not text.startswith("-"):
        text = "+" + text
    return text


def partial_figure(text: str, partial: bool) -> str:
    """A figure as written (`figure`), marked `~812.0` when it is a stopped trial's: early
    stopping's figures cover only the requests done by then. The one mark of every output
    that shows them: `tuner trials`, the report's table, the live line of `tuner run`."""
    return f"{PARTIAL_MARK}{text}" if partial and text else text


def trials_words(numbers: Iterable[int]) -> str:
    """Trial numbers in words, never a Python list: "trial 0", "trials 0 and 3",
    "trials 0, 3 and 5"."""
    shown = [str(n) for n in numbers]
    if len(shown) < 2:
        return f"trial {''.join(shown)}"
    return f"trials {', '.join(shown[:-1])} and {shown[-1]}"


V = TypeVar("V")


@overload
def exact(value: float) -> float: ...
@overload
def exact(value: V) -> V: ...
def exact(value: object) -> object:
    """A float as the decimal it stands for, for a program to read (JSON, CSV, a flag's
    value): `EXACT_DIGITS` significant digits, so a stepped range's 0.9199999999999999 is
    0.92 and 0.7799999999999999 is 0.78, while a measured figure keeps every digit that
    matters (1.2345678901e-05 stays). Anything else as it is."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{EXACT_DIGITS}g}")
    return value


def exact_all(value: object) -> object:
    """`exact` on every float in nested dicts, lists and tuples (a JSON document)."""
    if isinstance(value, dict):
        return {k: exact_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact_all(v) for v in value]
    return exact(value)
