"""`tuner verify`'s judgement (pure): a running engine's figures against the study's, and the
engine's own flags against the exported command.

A figure *moved* when its two 95 % bootstrap intervals (the study's stored one and the verify
run's own) do not overlap; when only one of them was stored, when the other's point lies outside
it; with none, it is not judged; and never by less than `MIN_MOVE_PCT`. The verdict, in this
order: a broken SLO; a headline figure worse outside its interval ("slower than measured by X
%"); the engine is not the one measured (a flag, the vLLM version or the GPU differs); else
"holds". The exit code of each, for a cron job: docs/verify.md, "The verdict and the exit
codes".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import SupportsFloat

from tuner.measure.objective import MIN_CLEAR_GAIN
from tuner.spec.figures import figure
from tuner.spec.metric_keys import THROUGHPUTS, direction
from tuner.spec.slo import SloLimit
from tuner.verify.engine_info import Bound

HOLDS_EXIT_CODE = 0
NOT_MEASURED_EXIT_CODE = 1  # no verdict: every request failed, or the time cap stopped it
DRIFT_EXIT_CODE = 3  # figures worse outside their interval, or the engine is not the study's
SLO_EXIT_CODE = 4  # the verify run breaks the study's SLO

Interval = tuple[float, float]
# A change smaller than this is not called moved, even outside the intervals: the bootstrap
# intervals cover the sampling of requests within one run, not the drift between two runs of
# one engine (the same simulated engine, verified twice on this box: median ITL 1.5 % apart,
# the intervals not overlapping; docs/verify.md); "clearly better" keeps the same floor.
MIN_MOVE_PCT = MIN_CLEAR_GAIN * 100


@dataclass(frozen=True)
class MetricCheck:
    """One figure: the study's and the verify run's, each with its interval."""

    metric: str
    stored: float
    stored_ci: Interval | None
    measured: float
    measured_ci: Interval | None
    comparable: bool = True  # False: a throughput of a shorter or lighter run than the study's

    @property
    def change_pct(self) -> float:
        """Signed change, measured against stored, in percent."""
        if self.stored == 0:
            return 0.0 if self.measured == 0 else math.copysign(math.inf, self.measured)
        return 100.0 * (self.measured - self.stored) / abs(self.stored)

    @property
    def worse_pct(self) -> float:
        """The change in the bad direction, in percent (> 0: worse)."""
        up_is_bad = direction(self.metric) != "maximize"
        return self.change_pct if up_is_bad else -self.change_pct

    @property
    def moved(self) -> bool | None:
        """Outside the interval (see the module's docstring) by at least `MIN_MOVE_PCT`;
        None: no interval to judge by."""
        a, b = self.stored_ci, self.measured_ci
        if (a is not None or b is not None) and abs(self.change_pct) < MIN_MOVE_PCT:
            return False
        if a is not None and b is not None:
            return a[1] < b[0] or b[1] < a[0]
        if a is not None:
            return not a[0] <= self.measured <= a[1]
        if b is not None:
            return not b[0] <= self.stored <= b[1]
        return None

    @property
    def worse(self) -> bool:
        return bool(self.comparable and self.moved and self.worse_pct > 0)

    def line(self) -> str:
        how = {True: "MOVED", False: "within", None: "no interval"}[self.moved]
        if not self.comparable:
            how = "not compared (a shorter or lighter run than the study's)"
        return (
            f"  {self.metric}: {figure(self.measured)} {_ci(self.measured_ci)} vs study "
            f"{figure(self.stored)} {_ci(self.stored_ci)}: {self.change_pct:+.1f} %, {how}"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "measured": self.measured,
            "measured_ci": list(self.measured_ci) if self.measured_ci else None,
            "stored": self.stored,
            "stored_ci": list(self.stored_ci) if self.stored_ci else None,
            "change_pct": self.change_pct,
            "moved": self.moved,
            "worse": self.worse,
            "comparable": self.comparable,
        }


def _ci(ci: Interval | None) -> str:
    return f"[{figure(ci[0])}, {figure(ci[1])}]" if ci is not None else "[no interval]"


def metric_checks(
    names: Sequence[str],
    stored: Mapping[str, float],
    stored_cis: Mapping[str, Interval],
    measured: Mapping[str, float],
    measured_cis: Mapping[str, Interval],
    *,
    lighter: bool = False,
) -> list[MetricCheck]:
    """A check per name that both runs hold. `lighter`: the verify ran fewer prompts or a
    lower rate than the study, so its throughputs are not compared (fewer requests bear the
    last one's latency; a lower rate caps them); its latencies, under no more load than the
    study's, are (a slowdown still counts)."""
    return [
        MetricCheck(
            name,
            stored[name],
            stored_cis.get(name),
            measured[name],
            measured_cis.get(name),
            comparable=not (lighter and name in THROUGHPUTS),
        )
        for name in names
        if name in stored and name in measured
    ]


@dataclass(frozen=True)
class FlagCheck:
    """A flag of the exported command against what the engine says it runs with."""

    flag: str
    exported: object
    engine: object  # None: the engine does not expose it

    @property
    def differs(self) -> bool:
        return self.engine is not None and not same_value(self.exported, self.engine)


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def same_value(a: object, b: object) -> bool:
    """Equal as a flag's value: numbers by value, booleans by truth (an environment's "1" is
    vLLM's True), text case-blind, a torch dtype by its name (vLLM's config says
    `torch.bfloat16` for `--dtype bfloat16`)."""
    x, y = _word(a), _word(b)
    if isinstance(a, bool) or isinstance(b, bool) or x in ("true", "false"):
        return (x in _TRUE and y in _TRUE) or (x in _FALSE and y in _FALSE)
    if not isinstance(a, str | SupportsFloat) or not isinstance(b, str | SupportsFloat):
        return x == y  # not a number (`float` would raise TypeError)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except ValueError:
        return x == y


def _word(value: object) -> str:
    return str(value).strip().lower().removeprefix("torch.")


def flag_checks(exported: Mapping[str, object], engine: Mapping[str, object]) -> list[FlagCheck]:
    """Each exported flag (dash names) with the engine's own value where it states one."""
    return [FlagCheck(flag, value, engine.get(flag)) for flag, value in exported.items()]


@dataclass(frozen=True)
class InferredCheck:
    """An exported flag the engine does not state, against the bound its /metrics put on it
    (`engine_info.Bound`): exported outside the bound, the engine cannot run the export."""

    flag: str
    exported: object
    bound: Bound

    @property
    def contradicts(self) -> bool:
        value = self.exported
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and self.bound.excludes(value)
        )

    def line(self) -> str:
        state = "CONTRADICTS the export" if self.contradicts else "consistent"
        return (
            f"flag --{self.flag}: inferred {self.bound.words} from /metrics "
            f"({self.bound.evidence}), exported {self.exported}: {state}"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "flag": self.flag,
            "exported": self.exported,
            "at_least": self.bound.at_least,
            "at_most": self.bound.at_most,
            "evidence": self.bound.evidence,
            "contradicts": self.contradicts,
        }


def inferred_checks(
    exported: Mapping[str, object], engine: Mapping[str, object], bounds: Sequence[Bound]
) -> list[InferredCheck]:
    """The bounds on exported flags the engine does not state itself (it stated: that value
    is compared instead, `flag_checks`)."""
    return [
        InferredCheck(b.flag, exported[b.flag], b)
        for b in bounds
        if b.flag in exported and engine.get(b.flag) is None
    ]


@dataclass(frozen=True)
class Verdict:
    kind: str  # holds, slower, changed, breaks-slo, not-measured
    text: str
    exit_code: int

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind, "text": self.text, "exit_code": self.exit_code}


def verdict(
    checks: Sequence[MetricCheck],
    limits: Sequence[SloLimit],
    measured: Mapping[str, float],
    changes: Sequence[str],
    max_failed_fraction: float = 1.0,
) -> Verdict:
    """The one-line verdict; `changes`: what is not as the study measured it (the engine's
    flags, vLLM version, GPU; the traffic), in words. More failed requests than the study's
    `objective.max_failed_fraction` break the config as the study would (infeasible), whatever
    the figures of the requests that completed."""
    done, failed = measured.get("completed", 0.0), measured.get("failed", 0.0)
    if failed and failed / (done + failed) > max_failed_fraction:
        return Verdict(
            "breaks-slo",
            f"breaks: {failed:g} of {done + failed:g} requests failed (the study counts more "
            f"than {max_failed_fraction:.0%} failed as infeasible)",
            SLO_EXIT_CODE,
        )
    broken = [limit for limit in limits if not limit.met(dict(measured))]
    if broken:
        words = ", ".join(f"{lim.metric} {figure(measured.get(lim.metric))}" for lim in broken)
        slo = ", ".join(str(lim) for lim in broken)
        return Verdict("breaks-slo", f"breaks the SLO: {words} (SLO {slo})", SLO_EXIT_CODE)
    worse = sorted((c for c in checks if c.worse), key=lambda c: -c.worse_pct)
    tail = f"; changed since the study: {'; '.join(changes)}" if changes else ""
    if worse:
        top = worse[0]
        more = f" ({len(worse) - 1} more figure(s) worse)" if len(worse) > 1 else ""
        text = (
            f"slower than measured by {top.worse_pct:.1f} % (outside the interval): "
            f"{top.metric} {figure(top.measured)} vs {figure(top.stored)}{more}{tail}"
        )
        return Verdict("slower", text, DRIFT_EXIT_CODE)
    better = [c for c in checks if c.comparable and c.moved and c.worse_pct < 0]
    holds = "holds"
    if better:
        top = min(better, key=lambda c: c.worse_pct)
        holds += (
            f" (better than measured outside the interval: {top.metric} {top.change_pct:+.1f} %"
            + (f" and {len(better) - 1} more" if len(better) > 1 else "")
            + ")"
        )
    if changes:
        return Verdict("changed", f"{holds}, but{tail[1:]}", DRIFT_EXIT_CODE)
    return Verdict("holds", holds, HOLDS_EXIT_CODE)


def not_measured(reason: str) -> Verdict:
    return Verdict("not-measured", f"no verdict: {reason}", NOT_MEASURED_EXIT_CODE)
