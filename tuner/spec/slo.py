"""Metric directions and SLO limits such as `p99_ttft_ms<=2000` (pure, no I/O)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tuner.errors import UserError
from tuner.spec import metric_keys
from tuner.spec.metric_keys import Direction
from tuner.spec.suggest import did_you_mean

__all__ = [
    "Direction",
    "SloLimit",
    "metric_direction",
    "parse_constraint_key",
    "parse_slo",
    "straddle_words",
]


def metric_direction(name: str) -> Direction:
    """Whether a stored metric is better low or high; unknown names are a user error."""
    found = metric_keys.direction(name)
    if found is None:
        hint = did_you_mean(name, metric_keys.example_metrics())
        raise UserError(f"unknown metric {name!r}{hint}; metrics: {metric_keys.METRICS_WORDS}")
    return found


_LIMIT = re.compile(r"^\s*([a-z0-9_.]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")
Op = Literal["<=", ">=", "<", ">"]
_OPS: dict[str, Op] = {"<=": "<=", ">=": ">=", "<": "<", ">": ">"}  # what `_LIMIT` matched


@dataclass(frozen=True)
class SloLimit:
    metric: str
    op: Op
    value: float

    @property
    def upper(self) -> bool:
        """An upper limit (`<=`, `<`): the figure must stay below it; else a lower one."""
        return self.op in ("<=", "<")

    def violation(self, metrics: dict[str, float]) -> float:
        """How far off the limit a value is, relative to it (> 0 means broken)."""
        got = metrics.get(self.metric)
        if got is None:
            return float("inf")
        scale = abs(self.value) or 1.0
        if self.upper:
            return (got - self.value) / scale
        return (self.value - got) / scale

    def met(self, metrics: dict[str, float]) -> bool:
        got = metrics.get(self.metric)
        if got is None:
            return False
        return {
            "<=": got <= self.value,
            "<": got < self.value,
            ">=": got >= self.value,
            ">": got > self.value,
        }[self.op]

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def straddled_by(self, low: float, high: float) -> bool:
        """Whether an interval [low, high] of this metric has the limit strictly inside it:
        the figure may keep the SLO or break it, the measurement cannot say which."""
        return low < self.value < high

    def constraint_key(self, scenario: str = "") -> str:
        """The Optuna constraint this SLO is stored as: `metric<=value`, or
        `scenario:metric<=value` for one scenario's figures (`parse_constraint_key` reads it)."""
        return f"{scenario}:{self}" if scenario else str(self)


def straddle_words(metric: str, ci: tuple[float, float] | None, limits: list[SloLimit]) -> str:
    """ "the interval straddles the SLO p99_ttft_ms<=20000" for each limit on `metric` that
    lies inside its interval `ci`; "" when none does (or no interval is stored)."""
    if ci is None:
        return ""
    found = [str(x) for x in limits if x.metric == metric and x.straddled_by(*ci)]
    return f"the interval straddles the SLO {' and '.join(found)}" if found else ""


def parse_constraint_key(key: str) -> tuple[str, SloLimit] | None:
    """(scenario, limit) of an SLO's constraint key (scenario "" for the study's own SLOs);
    None for any other constraint (`measured`, `failed_requests`, `capacity`, `pruned`)."""
    scenario, _, text = key.rpartition(":")
    m = _LIMIT.match(text)
    if m is None or metric_keys.direction(m.group(1)) is None:
        return None
    try:
        value = float(m.group(3))
    except ValueError:
        return None
    return scenario, SloLimit(m.group(1), _OPS[m.group(2)], value)


def check_sense(text: str) -> None:
    """An SLO that can be met and bounds the side it should: metrics are never negative,
    and a limit bounds a lower-is-better metric from above, a higher-is-better one from
    below (`output_throughput<=5` would reward a slower engine)."""
    for limit in parse_slo(text):
        if limit.value < 0 or (limit.op == "<" and limit.value == 0):
            raise UserError(f"SLO {str(limit)!r} can never be met: metrics are never negative")
        upper = limit.upper
        if upper != (metric_direction(limit.metric) == "minimize"):
            side, better = (">=", "higher") if upper else ("<=", "lower")
            raise UserError(
                f"SLO {str(limit)!r} bounds the wrong side: {limit.metric} is {better} "
                f"is better, so its limit is {limit.metric}{side}VALUE"
            )


def parse_slo(text: str) -> list[SloLimit]:
    """Parse `p99_ttft_ms<=2000,mean_tpot_ms<=80` into limits; a bad part is a user error."""
    limits = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _LIMIT.match(part)
        if not m:
            raise UserError(f"malformed SLO {part.strip()!r}: expected METRIC<=VALUE")
        metric, op, raw = m.groups()
        metric_direction(metric)
        try:
            value = float(raw)
        except ValueError:
            raise UserError(f"malformed SLO {part.strip()!r}: {raw!r} is not a number") from None
        limits.append(SloLimit(metric, _OPS[op], value))
    if not limits:
        raise UserError("empty SLO")
    return limits
