"""Never launch what the simulator already rules out (issue 22 §2; docs/early-stopping.md,
"Prediction skips").

Before each launch of `tuner run` / `tuner plan`, with any sampler, the study's simulator
predicts the config's whole trial in virtual time (`PlanRunner`, the planner's own code: the
same workload, rate steps and scenarios, no early stop). The prediction is calibrated on this
study's launched trials, and trusted only to a margin measured on them:

- every launched trial stores the prediction made for it *before* it ran (`SkipPrediction`);
  once measured whole, its miss is a true held-out error: log(measured / predicted) per SLO
  metric, measured − predicted for the score; trials the simulator predicted alike give one
  (averaged) miss;
- calibration: the median miss is added to each new prediction (the simulator's systematic
  error on this study's engine);
- margin: the larger of `SAFETY` × the largest miss left after calibration and a one-sided
  99 % prediction bound from the misses' spread, at least `MIN_MARGIN` (on the score:
  `MIN_MARGIN` × the largest weight, 5 % of the heaviest-weighted metric); with fewer than
  `MIN_ERRORS` distinct misses, the stated conservative margin `CONSERVATIVE_MARGIN` (the
  simulator may be off by a factor of 2 on every figure) and no calibration.

Once one launched trial is measured whole, a config is ruled out when, even with the whole
margin in its favour, it breaks an SLO (scalar mode) or its score cannot beat the best
feasible score so far. The baseline, a `--confirm` re-run and every queued config (warm
starts, the screen's choices, re-queued trials) are predicted but never ruled out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tuner import trial as tr
from tuner.measure.objective import metric_direction
from tuner.runners.engine_runner import TrialContext
from tuner.runners.plan import PlanRunner
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.trial import SkipPrediction, TrialPoint, scoring

MIN_ERRORS = 3  # distinct predictions measured whole, before margins are measured
CONSERVATIVE_MARGIN = math.log(2.0)  # until then: each figure may be off by a factor of 2
SAFETY = 1.5  # the measured margin: this times the largest held-out miss after calibration
MIN_MARGIN = 0.05  # never trusted closer than 5 % on one figure
SCORE = "score"


class PredictionSkip:
    """Predicts each config before launch and says whether to skip it."""

    def __init__(self, spec: StudySpec, requests: Callable[[], list[Any]]) -> None:
        """`requests()`: the study's workload, asked on the first prediction (the runner
        builds it when the study starts, after this is made)."""
        self.spec = spec
        self._requests = requests
        self._plan: PlanRunner | None = None
        self.slos = [lim for text in spec.objective.slo for lim in parse_slo(text)]
        self.capacity = spec.objective.mode == "capacity"
        w = [abs(v) for v in spec.objective.weights.values()]
        # a factor on every figure moves the score by Σ|w| times its log; 5 % on the heaviest
        # metric by max|w| times 0.05 (capacity mode's score is one log-ratio)
        self.score_scale = 1.0 if self.capacity else sum(w) or 1.0
        self.score_floor = MIN_MARGIN * (1.0 if self.capacity else max(w, default=1.0) or 1.0)

    def predict(
        self, params: dict[str, Any], points: Sequence[TrialPoint], host: str | None
    ) -> SkipPrediction | None:
        """The calibrated prediction with its margins (None: the simulator refuses it)."""
        if self._plan is None:
            self._plan = PlanRunner(self.spec)  # the study's own profile: never a hidden truth
            self._plan.use_requests(self._requests())
        m = self._plan.measure(TrialContext(self.spec.name, -1, dict(params), lambda s: None))
        if m.metrics is None:
            return None
        ref = tr.reference(points, host)
        raw_score = scoring.score_trial(self.spec, m, ref).score if ref is not None else None
        keys = [s.metric for s in self.slos if s.metric in m.metrics]
        raw = {k: float(m.metrics[k]) for k in keys if m.metrics[k] > 0}
        misses = _misses(points)
        bias, margin = {}, {}
        for key in [*raw, SCORE]:
            found = [e[key] for e in misses if key in e]
            if len(found) < MIN_ERRORS:
                scale = self.score_scale if key == SCORE else 1.0
                bias[key], margin[key] = 0.0, CONSERVATIVE_MARGIN * scale
                continue
            bias[key] = statistics.median(found)
            floor = self.score_floor if key == SCORE else MIN_MARGIN
            margin[key] = max(_margin(found, bias[key]), floor)
        return SkipPrediction(
            raw=raw,
            raw_score=raw_score,
            metrics={k: v * math.exp(bias[k]) for k, v in raw.items()},
            score=raw_score + bias[SCORE] if raw_score is not None else None,
            margin=margin,
            errors_from=min((sum(k in e for e in misses) for k in margin), default=0),
            engine_s=_typical_engine_s(points) or m.engine_s,
        )

    def judge(
        self,
        params: dict[str, Any],
        points: Sequence[TrialPoint],
        host: str | None,
        *,
        may_skip: bool,
    ) -> SkipPrediction | None:
        """The prediction, with `ruled_out` set when the launch is to be skipped."""
        p = self.predict(params, points, host)
        if p is None or not may_skip or not any(_whole(q) for q in points):
            return p  # nothing measured yet: nothing calibrates the simulator
        if not self.capacity:
            for s in self.slos:
                if s.metric not in p.metrics:
                    continue
                best_case = _in_favour(s.metric, p.metrics[s.metric], p.margin[s.metric])
                if not s.met({s.metric: best_case}):
                    why = f"predicted {s.metric} {p.metrics[s.metric]:.4g} breaks {s}"
                    return replace(p, ruled_out=f"{why} by more than its margin")
        top = tr.best(points)
        if top is None or top.score is None or p.score is None:
            return p
        if p.score - p.margin[SCORE] >= top.score:
            return replace(
                p,
                incumbent=top.score,
                ruled_out=(
                    f"predicted score {p.score:+.3f} ± {p.margin[SCORE]:.3f} cannot beat "
                    f"the best so far ({top.score:+.3f}, trial {top.number})"
                ),
            )
        return p


def _in_favour(metric: str, value: float, margin: float) -> float:
    """The figure with the whole margin on the config's side (lower latency, higher rate)."""
    lower_is_better = metric_direction(metric) == "minimize"
    return value * math.exp(-margin if lower_is_better else margin)


def _misses(points: Sequence[TrialPoint]) -> list[dict[str, float]]:
    """How far the pre-launch predictions of the launched trials measured whole were off, one
    entry per distinct prediction: configs that the simulator predicts alike (flags that
    change nothing it models) are one piece of evidence, not several, so their misses are
    averaged into one."""
    groups: dict[tuple, list[dict[str, float]]] = {}
    for p in points:
        pred = p.record.skip_prediction
        if pred is None or pred.ruled_out or not p.measured or p.partial or not p.metrics:
            continue
        e = {
            k: math.log(p.metrics[k] / v)
            for k, v in pred.raw.items()
            if tr.is_finite(p.metrics.get(k)) and p.metrics[k] > 0 and v > 0
        }
        if pred.raw_score is not None and p.score is not None and not p.baseline:
            e[SCORE] = p.score - pred.raw_score
        key = (
            tuple(sorted((k, float(f"{v:.6g}")) for k, v in pred.raw.items())),
            None if pred.raw_score is None else float(f"{pred.raw_score:.6g}"),
        )
        groups.setdefault(key, []).append(e)
    return [
        {k: statistics.fmean(e[k] for e in group if k in e) for k in {k for e in group for k in e}}
        for group in groups.values()
    ]


def _margin(found: Sequence[float], bias: float) -> float:
    """How far the next miss may lie from `bias`, from `found` (held-out misses, one per
    distinct prediction): the larger of `SAFETY` × the largest seen and the one-sided 99 %
    prediction bound of a normal sample, t(0.99, n − 1) · s · √(1 + 1/n). The second grows
    as n shrinks: the largest of 3 misses says less about the next than the largest of 17."""
    from scipy.stats import t  # lazily: the CLI's start-up does not pay for scipy

    n = len(found)
    largest = max(abs(e - bias) for e in found)
    bound = float(t.ppf(0.99, n - 1)) * statistics.stdev(found) * math.sqrt(1 + 1 / n)
    return max(SAFETY * largest, bound)


def _whole(p: TrialPoint) -> bool:
    """Launched and measured to the end (a reused result is not launched)."""
    return p.measured and not p.partial and bool(p.record.engine_s)


def _typical_engine_s(points: Sequence[TrialPoint]) -> float | None:
    """The median engine time of this study's launched trials measured whole."""
    found = [float(p.record.engine_s or 0.0) for p in points if _whole(p)]
    return statistics.median(found) if found else None


def ruled_out(p: TrialPoint) -> bool:
    """Skipped before launch on a prediction."""
    s = p.record.skip_prediction
    return s is not None and s.ruled_out is not None
