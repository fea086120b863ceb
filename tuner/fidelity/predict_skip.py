"""Prediction skips: a config the calibrated simulator already rules out is not launched (issue
22 §2). The method, each step with its reason (relative to the reference, at the reference's
measured speed, misses under today's judging, the margin, the rule) and the studies that set
its constants, is docs/early-stopping.md, "Prediction skips"; this module is all of it.

Its constants, by name: `SAFETY` (the margin's factor on the largest miss), `MIN_MARGIN` (its
floor, per figure and × the largest weight on the score), `MIN_ERRORS` (distinct misses
before the margin is measured) and `CONSERVATIVE_MARGIN` (the margin until then).

What callers may assume: the pipeline asks `judge` before each launch (any sampler); a
ruled-out trial ends as `ruled_out_record` says, a launched one keeps its prediction, whose
miss calibrates the next. No verdict reads the simulator's absolute figures, none is given
before one launched trial is measured whole, and the baseline, a `--confirm` re-run and
queued configs are predicted, never ruled out. Which trials are evidence, and the engine time
a launch takes: `tuner.fidelity.calibration.Trust`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.fidelity.bands import Bands
from tuner.fidelity.calibration import Trust
from tuner.fidelity.engine_speed import fitted_speed, round_speed
from tuner.measure.capacity import predicted_bracket
from tuner.measure.measurement import Measurement
from tuner.measure.modes import CAPACITY_RPS, Objective
from tuner.runners.plan import PlanRunner
from tuner.runners.trial_runner import TrialContext, TrialRunner
from tuner.sim.fit import apply_factors, speed_factors
from tuner.sim.profile_file import load_gpu
from tuner.sim.profiles import known_model
from tuner.spec.figures import figure
from tuner.spec.parts import Measuring
from tuner.spec.slo import metric_direction
from tuner.spec.values import Params
from tuner.trial import SkipPrediction, TrialPoint, TrialRecord, scoring

if TYPE_CHECKING:
    from tuner.workload.request import BenchRequest

MIN_ERRORS = 3  # distinct predictions measured whole, before margins are measured
CONSERVATIVE_MARGIN = math.log(2.0)  # until then: each figure may be off by a factor of 2
SAFETY = 1.5  # the measured margin: this times the largest held-out miss after calibration
MIN_MARGIN = 0.05  # never trusted closer than 5 % on one figure
SCORE = "score"
STOCK = 1.0  # the study's profile as it is: speed 1
RULED_OUT = "ruled out by prediction"  # how a ruled-out trial's `pruned_reason` starts


def prediction_skip(spec: Measuring, runner: TrialRunner, wanted: bool) -> PredictionSkip | None:
    """The study's predictor, unless turned off (`--no-prediction-skip`,
    `pruning.prediction_skip: false`), or the study names no accelerator profile to predict
    on, or a model the simulator does not know (`tuner.sim.profiles`)."""
    if not wanted or not spec.pruning.prediction_skip:
        return None
    if not spec.simulated_accelerator:
        return None
    if known_model(spec.engine.model) is None:
        return None
    return PredictionSkip(spec, runner.objective, lambda: runner.requests)


def capacity_bracket(
    spec: Measuring, objective: Objective, p: SkipPrediction | None
) -> tuple[float, float] | None:
    """Capacity mode's first two rates for a launched config (issue 47; docs/objective.md,
    "Capacity mode"): around its predicted capacity (calibrated: at the reference's speed,
    anchored on its miss), as wide as the simulator's band on a throughput
    (`tuner.fidelity.bands`). None: not capacity mode, `capacity.start_rps` set (the study's own
    start wins), a scenario mix (each scenario's search starts from its own rate), or no
    capacity predicted."""
    search = spec.objective.search
    if p is None or not objective.has_capacity or spec.workloads or search.start_rps:
        return None
    rps = p.metrics.get(CAPACITY_RPS, p.raw.get(CAPACITY_RPS))  # calibrated, else as simulated
    if rps is None or not rps > 0 or not math.isfinite(rps):
        return None
    band = Bands.of_study(spec).family_band("throughput")
    return predicted_bracket(rps, (band.low, band.high), search.resolution)


def ruled_out_record(p: SkipPrediction, planned: bool) -> tuple[TrialRecord, dict[str, float]]:
    """What a launch skipped on its prediction records, and the constraints the sampler is
    told: under "cannot beat the best", the calibrated predicted score as the PRUNED trial's
    intermediate value and constraint `pruned` 0 (feasible as far as is known, ranked by that
    score, after every measured trial); under "breaks an SLO", `pruned` 1 (TPE reads it
    infeasible). Why: docs/early-stopping.md ("Prediction skips")."""
    on_score = p.incumbent is not None
    record = TrialRecord(
        skip_prediction=p,
        pruned_reason=f"{RULED_OUT}: {p.ruled_out}",
        pruned_score_bound=p.score if on_score else None,
        simulated=planned or None,
        engine_s=0.0,  # never launched
    )
    return record, {"pruned": 0.0 if on_score else 1.0}


class PredictionSkip:
    """Predicts each config before launch and says whether to skip it."""

    def __init__(
        self,
        spec: Measuring,
        objective: Objective,
        requests: Callable[[], Sequence[BenchRequest]],
    ) -> None:
        """`requests()`: the study's workload, asked on the first prediction (the runner
        builds it when the study starts, after this is made)."""
        self.spec = spec
        self._requests = requests
        self._plans: dict[float, PlanRunner] = {}  # one simulator per speed
        self._simulated: dict[tuple[float, tr.ParamsKey], Measurement | None] = {}
        self._speeds: dict[tuple[int, tuple[tuple[str, float], ...]], float] = {}
        self.slos = spec.slo_limits()
        self.objective = objective  # the study's (its runner's)
        self.weights = self.objective.weights
        # a factor on every figure moves the score by Σ|w| times its log; 5 % on the heaviest
        # metric by max|w| times 0.05 (capacity mode's score is one log-ratio)
        self.score_span = self.objective.score_span()
        self.score_scale = self.score_span.scale
        self.score_floor = MIN_MARGIN * self.score_span.floor

    def simulate(self, params: Params, speed: float = STOCK) -> Measurement | None:
        """The simulator's whole trial of a config (None: it refuses it), on the study's
        profile with every constant `speed`× faster (`STOCK`: as it is). The planner is
        deterministic, so each config is simulated once per process and speed; a resumed
        study simulates its launched trials again, with today's simulator (their misses are
        the misses of the predictor that predicts the next config)."""
        key = (speed, tr.params_key(params))
        if key not in self._simulated:
            if speed not in self._plans:
                from tuner.workload.request import Workload

                workload = Workload(tuple(self._requests()))
                plan = PlanRunner(self.spec, workload=workload)  # the study's own profile
                if speed != STOCK:  # a profile named in the engine's flags is loaded here
                    base = plan.gpu or load_gpu(str(self.spec.engine.flags.get("gpu", "")))
                    plan.gpu = apply_factors(base, speed_factors(speed))
                self._plans[speed] = plan
            ctx = TrialContext(self.spec.name, -1, dict(params), lambda s: None)
            m = self._plans[speed].measure(ctx)
            # kept without its per-request records: scoring reads the figures alone
            self._simulated[key] = replace(m, records=[]) if m.metrics is not None else None
        return self._simulated[key]

    def predict(
        self, params: Params, points: Sequence[TrialPoint], host: str | None
    ) -> SkipPrediction | None:
        """The calibrated prediction with its margins (None: the simulator refuses it), on
        the study's profile at the speed the reference measured (`speed`; before anything is
        measured, as it is)."""
        ref = tr.reference(points, host)
        speed = self.speed(ref) if ref is not None else STOCK
        m = self.simulate(params, speed)
        if m is None or m.metrics is None:
            return None
        keys = [s.metric for s in self.slos if s.metric in m.metrics]
        raw = {k: float(m.metrics[k]) for k in keys if m.metrics[k] > 0}
        found = m.found_rps
        if found is not None and found > 0:  # capacity mode: where its search starts
            raw[CAPACITY_RPS] = float(found)
        engine_s = Trust(self.spec, points).engine_s() or m.engine_s
        anchored = self._anchored(ref, speed) if ref is not None else None
        if anchored is None:  # nothing measured yet, or the simulator refuses the reference
            return SkipPrediction(raw=raw, engine_s=engine_s)
        predicted_ref, anchor = anchored
        raw_score = scoring.score_trial(self.spec, self.objective, m, predicted_ref).score
        misses = self.misses(points)
        bias, margin = {}, {}
        for key in [*raw, SCORE]:
            errors = [e[key] for e in misses if key in e]
            bias[key], margin[key] = self._trusted(key, errors, anchor)
        return SkipPrediction(
            raw=raw,
            raw_score=raw_score,
            metrics={k: v * math.exp(anchor[k] + bias[k]) for k, v in raw.items() if k in anchor},
            score=raw_score + bias[SCORE],
            margin=margin,
            anchor=anchor,
            errors_from=min((sum(k in e for e in misses) for k in margin), default=0),
            engine_s=engine_s,
            speed=speed,
        )

    def speed(self, ref: TrialPoint) -> float:
        """How much faster the engine is than the study's profile, as the reference trial
        measured it: the speed at which the profile, every constant re-scaled, reproduces
        the reference's measured figures (`tuner.fidelity.engine_speed`); fitted once per
        reference and figures. `STOCK` when the simulator refuses the reference."""
        key = (ref.number, tuple(sorted(_figures(ref).items())))
        if key not in self._speeds:

            def misses_at(speed: float) -> dict[str, float] | None:
                anchored = self._anchored(ref, round_speed(speed))
                return anchored[1] if anchored is not None else None

            self._speeds[key] = fitted_speed(misses_at)
        return self._speeds[key]

    def _anchored(
        self, ref: TrialPoint, speed: float = STOCK
    ) -> tuple[TrialPoint, dict[str, float]] | None:
        """The reference trial as the simulator predicts it at `speed` (what predicted scores
        are relative to, so the profile's scale cancels), and its miss: ln(measured /
        predicted) per figure the prediction reads (capacity mode: `capacity_rps` too).
        None: the simulator refuses the reference's config."""
        m = self.simulate(ref.params, speed)
        if m is None:
            return None
        predicted = scoring.simulated_reference(self.spec, self.objective, m, ref.params)
        mine, theirs = _figures(ref), _figures(predicted)
        wanted = {s.metric for s in self.slos} | set(self.weights) | {CAPACITY_RPS}
        anchor = {
            k: math.log(mine[k] / theirs[k])
            for k in wanted
            if k in mine and k in theirs and mine[k] > 0 and theirs[k] > 0
        }
        return predicted, anchor

    def _trusted(
        self, key: str, found: Sequence[float], anchor: dict[str, float]
    ) -> tuple[float, float]:
        """(calibration, margin) of one figure (or the score) from the misses `found`. With
        fewer than `MIN_ERRORS`: no calibration, the stated margin widened by the reference's
        own miss at its speed (what one speed does not explain, the profile may misjudge in
        the engine's load too). Never narrower than `SAFETY` × the largest miss seen."""
        seen = SAFETY * max((abs(e) for e in found), default=0.0)
        if len(found) < MIN_ERRORS:
            if key == SCORE:
                off = sum(abs(anchor.get(k, 0.0)) for k in self.score_span.searched)
                off += sum(w * abs(anchor.get(k, 0.0)) for k, w in self.weights.items())
                stated = CONSERVATIVE_MARGIN * self.score_scale + off
            else:
                stated = CONSERVATIVE_MARGIN + abs(anchor.get(key, 0.0))
            return 0.0, max(stated, seen)
        bias = statistics.median(found)
        floor = self.score_floor if key == SCORE else MIN_MARGIN
        return bias, max(_margin(found, bias), floor)

    def misses(self, points: Sequence[TrialPoint]) -> list[dict[str, float]]:
        """How far the predictions of the launched trials measured whole were off, under
        today's judging, one entry per distinct prediction: ln(measured / predicted) − the
        reference's own miss per SLO figure, measured − predicted score (both relative to
        their reference trial). The reference itself gives none (its relative miss is 0 by
        construction: it is the anchor). Configs that the simulator predicts alike (flags
        that change nothing it models) are one piece of evidence, not several: their misses
        are averaged into one. Each prediction is made at the speed its trial's reference
        measured (`speed`)."""
        by_number = {p.number: p for p in points}
        groups: dict[tuple[tuple[tuple[str, float], ...], str], list[dict[str, float]]] = {}
        for p in Trust(self.spec, points).launched():
            if not p.metrics or p.record.skip_prediction is None:
                continue
            ref = by_number.get(p.reference) if p.reference is not None else None
            ref = ref or tr.reference(points, p.host)
            if ref is None or ref.number == p.number:
                continue
            speed = self.speed(ref)  # both kept: fitted once per reference, simulated once
            anchored = self._anchored(ref, speed)
            m = self.simulate(p.params, speed)
            if anchored is None or m is None or m.metrics is None:
                continue
            predicted_ref, anchor = anchored
            raw = {s.metric: m.metrics.get(s.metric, 0.0) for s in self.slos}
            e = {
                k: math.log(p.metrics[k] / v) - anchor[k]
                for k, v in raw.items()
                if k in anchor and tr.is_finite(p.metrics.get(k)) and p.metrics[k] > 0 and v > 0
            }
            predicted = scoring.score_trial(self.spec, self.objective, m, predicted_ref).score
            if p.score is not None:
                e[SCORE] = p.score - predicted
            key = (
                tuple(sorted((k, float(f"{v:.6g}")) for k, v in raw.items())),
                f"{predicted:.6g}",
            )
            groups.setdefault(key, []).append(e)
        return [
            {
                k: statistics.fmean(e[k] for e in group if k in e)
                for k in {k for e in group for k in e}
            }
            for group in groups.values()
        ]

    def judge(
        self,
        params: Params,
        points: Sequence[TrialPoint],
        host: str | None,
        *,
        may_skip: bool,
    ) -> SkipPrediction | None:
        """The prediction, with `ruled_out` set when the launch is to be skipped."""
        p = self.predict(params, points, host)
        if p is None or not may_skip or not Trust(self.spec, points).launched():
            return p  # nothing measured yet: nothing calibrates the simulator
        off = p.speed not in (None, STOCK)
        at = f" (at the reference's speed, {p.speed:.3g}× the profile's)" if off else ""
        if not self.objective.has_capacity:  # else the SLOs chose the rates it ran
            for s in self.slos:
                if s.metric not in p.metrics:
                    continue
                best_case = _in_favour(s.metric, p.metrics[s.metric], p.margin[s.metric])
                if not s.met({s.metric: best_case}):
                    why = f"predicted {s.metric} {figure(p.metrics[s.metric])} breaks {s}"
                    return replace(p, ruled_out=f"{why} by more than its margin{at}")
        top = tr.best(points)
        if top is None or top.score is None or p.score is None:
            return p
        if p.score - p.margin[SCORE] >= top.score:
            return replace(
                p,
                incumbent=top.score,
                ruled_out=(
                    f"predicted score {p.score:+.3f} ± {p.margin[SCORE]:.3f} cannot beat "
                    f"the best so far ({top.score:+.3f}, trial {top.number}){at}"
                ),
            )
        return p


def _in_favour(metric: str, value: float, margin: float) -> float:
    """The figure with the whole margin on the config's side (lower latency, higher rate)."""
    lower_is_better = metric_direction(metric) == "minimize"
    return value * math.exp(-margin if lower_is_better else margin)


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


def _figures(p: TrialPoint) -> dict[str, float]:
    """A trial's metrics, and its capacity in capacity mode (`CAPACITY_RPS`)."""
    cap = p.capacity_rps
    return {**p.metrics, **({CAPACITY_RPS: cap} if cap is not None else {})}
