"""`search.fidelity: multi`: the calibrated simulator chooses every real trial.

The loop, calibrate → screen candidates in virtual time → rank → enqueue, and the rank rule (a
lower confidence bound on the predicted score, with its `exploration`, `error` and `distance`
terms, and the Thompson draws) are docs/multi-fidelity.md, "The loop".

What callers may assume: `Screen` proposes only configs not yet run, each handed to Optuna with
`enqueue_trial` and its prediction attached, so Optuna's storage and sampler stay the source of
truth and the trial runs through the ordinary pipeline; the candidates are simulated by
`tuner.sim.fit.predict`, with no Optuna trial, storage or bootstrap; a candidate predicted to
break an SLO never outranks one predicted to meet them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from tuner import trial as tr
from tuner.errors import UserError
from tuner.fidelity.calibration import Trust
from tuner.fidelity.unit_cube import distance, from_unit, to_unit
from tuner.measure import objective as obj
from tuner.runners.plan import study_profile, study_workload
from tuner.runners.precheck import predict_refusal
from tuner.sim import fit as cal
from tuner.sim.profiles import GpuProfile, known_model, load_model
from tuner.spec.parts import Measuring
from tuner.spec.space import baseline_params, distributions, engine_env, simulator_flags, spec_rules
from tuner.spec.values import Params, Scalar
from tuner.trial import CalibrationRecord, ScreenInfo, TrialPoint, TrialRecord, params_key

if TYPE_CHECKING:
    from tuner.workload.request import BenchRequest

# Until two real trials have a score error: the screen's score is assumed this far off per
# unit of objective weight (a 10 % miss on each weighted metric).
PRIOR_ERROR_PER_WEIGHT = 0.1
LOCAL_SHARE = 0.25  # of the candidates: perturbations of the best real trial (the rest: Sobol)
LOCAL_SCALE = 0.08  # their spread, in the unit cube
# Of the candidates: a coordinate search from the best-ranked one (`Screen.refine`), with
# these steps (besides each end of the range), in the unit cube
REFINE_SHARE = 0.4
REFINE_STEPS = (-0.15, -0.05, 0.05, 0.15)
CALIBRATION_FOLDS = 3
CALIBRATION_MAX_NFEV = 30
CALIBRATION_MAX_OBSERVATIONS = 12  # the best real trials fit the region the search is in
# Screened trials chosen the plain way (Sobol and local candidates only, ranked on the fitted
# profile) before the coordinate search (`Screen.refine`) and the posterior draws
# (`Screen.draw`): the first, from the baseline alone, is an exploration shot; a one-trial
# fit extrapolates to the bounds the search reaches poorly (a 29 % TPOT miss on
# tests/test_run_multi_fidelity.py's truth, within 10 % without it).
PLAIN_FIRST = 1
# After it, every other screened trial ranks on a draw, the others on the fitted profile: a
# draw explores what the trials cannot tell apart, the fit exploits what they can (draws on
# every pick left 2 of 3 seeds of a hidden truth at max-num-seqs 10-12, 1.25 % short of its
# optimum at 8 after 5 real trials; docs/multi-fidelity.md, "Screen changes").
DRAW_EVERY = 2
_Best = tuple[tuple[bool, float], Params, dict[str, float], float, float]  # _Ranking.best


@dataclass(frozen=True)
class ScreenChoice:
    """The config the screen runs next, and what it predicted for it."""

    params: Params
    metrics: dict[str, float]
    score: float
    info: ScreenInfo

    @property
    def record(self) -> TrialRecord:
        """What the trial records: the prediction (`predicted_*`) and how it was chosen."""
        finite = {k: float(v) for k, v in self.metrics.items() if tr.is_finite(v)}
        score = float(self.score) if tr.is_finite(self.score) else None
        return TrialRecord(predicted_metrics=finite, predicted_score=score, screen=self.info)

    @property
    def attrs(self) -> dict[str, object]:
        """The same as stored (Optuna user attrs)."""
        return self.record.encode()


def make_screen(
    spec: Measuring, requests: Sequence[BenchRequest], *, seed: int = 0
) -> Screen | None:
    """The study's screen; None when the simulator does not know its model (an unknown
    model: the sampler proposes every trial, as the preflight's note says)."""
    if known_model(spec.engine.model) is None:
        return None
    return Screen(spec, requests, seed=seed)


class Screen:
    """Chooses each real trial of one study from the calibrated simulator."""

    def __init__(self, spec: Measuring, requests: Sequence[BenchRequest], *, seed: int = 0) -> None:
        self.spec = spec
        self.base = study_profile(spec)
        self.model = load_model(spec.engine.model)
        self.workload = study_workload(spec, requests).head(spec.search.screen_prompts)
        self.dists = distributions(spec.search_space)
        self.names = list(self.dists)
        self.rng = np.random.default_rng(seed)
        o = spec.objective
        self.slos = spec.slo_limits()
        wanted = [m for m, w in o.weights.items() if w > 0] + [s.metric for s in self.slos]
        self.metrics = tuple(dict.fromkeys(wanted))
        self.calibration = cal.Calibration(self.base)  # the study's profile, until fitted
        self._calibrated_on: tuple[int, ...] = ()

    # Calibration -------------------------------------------------------------------------

    def calibrate(self, points: Sequence[TrialPoint]) -> cal.Calibration:
        """Refit to the best real trials when they changed; the study's profile until one."""
        trust = Trust(self.spec, points)
        numbers = tuple(p.number for p in trust.whole())
        if numbers == self._calibrated_on:
            return self.calibration
        self._calibrated_on = numbers
        if not numbers:
            return self.calibration
        with suppress(UserError):  # the study's profile refuses every trial measured so far
            self.calibration = cal.fit(
                self.base,
                trust.best_observations(CALIBRATION_MAX_OBSERVATIONS),
                model=self.model,
                workload=self.workload,
                folds=CALIBRATION_FOLDS,
                max_nfev=CALIBRATION_MAX_NFEV,
                metrics=self.metrics,
                prior_weight=cal.LOOP_PRIOR_WEIGHT,
                min_observations=1,
            )
        return self.calibration

    def calibration_record(self) -> CalibrationRecord:
        """The calibrated profile as the study records it."""
        c = self.calibration
        return CalibrationRecord(
            asdict(c.profile), dict(c.factors), dict(c.held_out_error), c.observations
        )

    # Prediction --------------------------------------------------------------------------

    def flags(self, params: Params) -> dict[str, Scalar | None]:
        """What the simulator takes for a config (as `tuner plan` passes it)."""
        return simulator_flags(self.spec, params)

    def predict(self, params: Params, profile: GpuProfile | None = None) -> dict[str, float] | None:
        """The calibrated simulator's figures for one config (on `profile`, e.g. a draw,
        when given); None if it would not start."""
        flags = self.flags(params)
        if spec_rules(self.spec, flags, self.base.platform) is not None:
            return None
        env = engine_env(self.spec, dict(params))
        if predict_refusal(self.spec.engine.model, self.spec.hardware, flags, env) is not None:
            return None
        gpu = profile or self.calibration.profile
        return cal.predict(self.model, gpu, flags, self.workload, self.metrics)

    def draw(self, points: Sequence[TrialPoint]) -> dict[str, float]:
        """The factors of a profile drawn from the calibration's posterior (a Thompson draw:
        the screen ranks on constants the trials allow, not only on the likeliest ones); {}
        (rank on the calibrated profile) for the first screened trial, every other one
        after it (`DRAW_EVERY`), or with no covariance. Along what the trials identify the
        draws agree with the fit; along what they cannot tell apart (step overhead against
        bandwidth) they spread as wide as the prior, and so do the rankings they give."""
        c = self.calibration
        n = _screened(points)
        if n < PLAIN_FIRST or (n - PLAIN_FIRST) % DRAW_EVERY or not c.covariance or not c.factors:
            return {}
        cov = np.asarray(c.covariance, dtype=float)
        values, vectors = np.linalg.eigh((cov + cov.T) / 2)
        z = vectors @ (np.sqrt(np.clip(values, 0.0, None)) * self.rng.standard_normal(len(values)))
        bound = math.log(cal.MAX_FACTOR)
        return {
            name: float(math.exp(min(max(math.log(f) + dz, -bound), bound)))
            for (name, f), dz in zip(c.factors.items(), z, strict=True)
        }

    # Choosing ----------------------------------------------------------------------------

    def choose(self, points: Sequence[TrialPoint], host: str | None = None) -> ScreenChoice | None:
        """The next real trial of `host` (None: every candidate was run already or would not
        start). Scores are relative to the same reference trial as the measured ones'."""
        t0 = time.perf_counter()
        self.calibrate(points)
        t1 = time.perf_counter()
        tried = {params_key(p.params) for p in points}
        real = Trust(self.spec, points).whole()
        ref = tr.reference(points, host)
        ref_params = ref.params if ref is not None else baseline_params(self.spec.search_space)
        drawn = self.draw(points)
        gpu = cal.apply_factors(self.base, drawn) if drawn else None
        reference = self.predict(ref_params, gpu) if ref_params is not None else None
        seen = np.array([self.to_unit(p.params) for p in real]) if real else None
        error = self.score_error(points)
        ranking = _Ranking(self, gpu, reference, seen, error, tried)
        plain = _screened(points) < PLAIN_FIRST
        n_refine = 0 if plain else int(self.spec.search.candidates * REFINE_SHARE)
        for candidate in self.candidates(real, self.spec.search.candidates - n_refine):
            ranking.consider(candidate)
        self.refine(ranking, n_refine)
        best, screened = ranking.best, ranking.screened
        if best is None:
            return None
        (infeasible, rank), params, metrics, score, dist = best
        if drawn:  # recorded: the calibrated profile's prediction, what `prediction_error` reads
            metrics, score = self._predicted(params, ref_params, metrics, score)
        info = ScreenInfo(
            candidates=self.spec.search.candidates,
            screened=screened,
            requests=len(self.workload.prompt_lens),
            calibrate_s=round(t1 - t0, 4),
            screen_s=round(time.perf_counter() - t1, 4),
            rank=rank,
            distance=dist,
            score_error=error,
            predicted_feasible=not infeasible,
            calibrated_on=self.calibration.observations,
            drawn_factors=drawn,
        )
        return ScreenChoice(params, metrics, score, info)

    def _predicted(
        self,
        params: Params,
        ref_params: Params | None,
        metrics: dict[str, float],
        score: float,
    ) -> tuple[dict[str, float], float]:
        """The calibrated profile's figures and score for a config a draw chose (the draw's
        own when the calibrated profile cannot predict it)."""
        mine = self.predict(params)
        reference = self.predict(ref_params) if ref_params is not None else None
        if mine is None or any(m not in mine for m in self.metrics):
            return metrics, score
        return mine, obj.score(mine, reference or mine, self.spec.objective.weights)

    def score_error(self, points: Sequence[TrialPoint]) -> float:
        """How far off the screen's score is, in score units: the RMS of measured − predicted
        over real trials chosen by a calibrated screen (two at least); else the calibration's
        held-out error per metric, weighted as the score weighs them; else a prior."""
        misses = [
            e["score"]
            for p in points
            if isinstance(e := p.record.prediction_error, dict)
            and tr.is_finite(e.get("score"))
            and p.record.screen is not None
            and p.record.screen.calibrated_on
        ]
        if len(misses) >= 2:
            return float(np.sqrt(np.mean(np.square(misses))))
        weights = {m: w for m, w in self.spec.objective.weights.items() if w > 0}
        held_out = self.calibration.held_out_error
        if held_out and all(m in held_out for m in weights):
            return float(sum(w * abs(math.log1p(held_out[m])) for m, w in weights.items()))
        return PRIOR_ERROR_PER_WEIGHT * sum(weights.values())

    def refine(self, ranking: _Ranking, budget: int) -> None:
        """Coordinate search on the simulator from the best-ranked candidate: one parameter
        at a time to each end of its range and a short and a long step either way; rounds
        from each new best until `budget` predictions or no gain. Random points in 5+
        dimensions rarely land where an optimum often sits, on a bound or two (the floor
        of both `max-num-batched-tokens` and `max-num-seqs`, docs/multi-fidelity.md)."""
        start = ranking.screened
        while ranking.best is not None and ranking.screened - start < budget:
            before = ranking.best[0]
            for i in self.rng.permutation(len(self.names)):
                u = self.to_unit(ranking.best[1])  # from the best so far: coordinate descent
                for x in (0.0, 1.0, *(u[i] + step for step in REFINE_STEPS)):
                    if ranking.screened - start >= budget:
                        return
                    if 0.0 <= x <= 1.0:
                        ranking.consider(self.from_unit([*u[:i], x, *u[i + 1 :]]))
            if ranking.best[0] == before:
                return

    def candidates(self, real: Sequence[TrialPoint], n: int | None = None) -> list[Params]:
        """`n` (default: `search.candidates`) Sobol points over the space, and perturbations
        of the best real trial."""
        n = self.spec.search.candidates if n is None else n
        d = len(self.names)
        top = min(
            (p for p in real if p.feasible and p.score is not None),
            default=None,
            key=lambda p: p.score or 0.0,
        )
        n_local = int(n * LOCAL_SHARE) if top is not None else 0
        n_sobol = n - n_local
        from scipy.stats import qmc  # on first use: a refused `tuner run` stays quick

        sobol = qmc.Sobol(d, scramble=True, seed=self.rng.integers(2**32))
        units = list(sobol.random_base2(max(n_sobol - 1, 1).bit_length())[:n_sobol])
        if top is not None:
            center = np.array(self.to_unit(top.params))
            local = center + self.rng.normal(0.0, LOCAL_SCALE, size=(n_local, d))
            units += list(np.clip(local, 0.0, 1.0 - 1e-9))
        return [self.from_unit(u) for u in units]

    # The unit cube -----------------------------------------------------------------------

    def from_unit(self, u: Sequence[float]) -> Params:
        return {
            name: from_unit(self.dists[name], float(x))
            for name, x in zip(self.names, u, strict=True)
        }

    def to_unit(self, params: Params) -> list[float]:
        return [to_unit(self.dists[n], params.get(n)) for n in self.names]


class _Ranking:
    """The screen's best candidate so far under one profile (`Screen.choose`), by
    (predicted to break an SLO, rank); each config is predicted once."""

    def __init__(
        self,
        screen: Screen,
        gpu: GpuProfile | None,
        reference: dict[str, float] | None,
        seen: np.ndarray | None,
        error: float,
        tried: set[tr.ParamsKey],
    ) -> None:
        self.screen, self.gpu, self.reference = screen, gpu, reference
        self.seen, self.error, self.tried = seen, error, tried
        self.best: _Best | None = None
        self.screened = 0

    def consider(self, params: Params) -> None:
        s = self.screen
        if params_key(params) in self.tried:
            return
        self.tried.add(params_key(params))
        metrics = s.predict(params, self.gpu)
        self.screened += 1
        if metrics is None or any(m not in metrics for m in s.metrics):
            return
        self.reference = self.reference or metrics  # no measured reference yet: any fixed one
        score = obj.score(metrics, self.reference, s.spec.objective.weights)
        dist = distance(s.to_unit(params), self.seen)
        rank = score - s.spec.search.exploration * self.error * dist
        key = (not all(limit.met(metrics) for limit in s.slos), rank)
        if self.best is None or key < self.best[0]:
            self.best = (key, params, metrics, score, dist)


def _screened(points: Sequence[TrialPoint]) -> int:
    """The real trials the screen chose."""
    return sum(1 for p in points if p.record.screen is not None)
