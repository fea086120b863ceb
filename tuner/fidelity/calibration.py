"""The simulator against one study's measured trials (issue 35: one model of how far off the
simulator is; docs/architecture.md, "The simulator's trust"): which trials are evidence, each
as the simulator takes it (an `Observation`), and what is read off them. The multi-fidelity
screen fits its profile to the best of them, the prediction skip measures its misses on the
launched ones, the plan notes and `tuner calibrate` compare the profile with the ones an
engine measured, and `tuner calibrate` fits it to them. The fit itself is pure and lives in
`tuner.sim.fit`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.runners.plan import study_profile, study_workload
from tuner.sim.fit import LOOP_PRIOR_WEIGHT, Calibration, Observation, fit, median_errors, predict
from tuner.sim.profiles import load_model
from tuner.spec.parts import Measuring
from tuner.spec.space import simulator_flags
from tuner.trial.specs import of_current

if TYPE_CHECKING:
    from tuner.workload.request import BenchRequest


@dataclass(frozen=True)
class Trust:
    """A study's trials as evidence of how far off its simulator is. `study`: the stored
    study's record when `points` are every stored trial (`StudyRead.every`: only its current
    spec's count); None when they are one spec's already (the loop's)."""

    spec: Measuring
    points: Sequence[tr.TrialPoint]
    study: tr.StudyRecord | None = None

    def whole(self) -> list[tr.TrialPoint]:
        """Measured to the end, with figures: what the screen fits and measures distances
        from (in `tuner plan`, its virtual trials are the real ones)."""
        return [p for p in self.points if p.measured and not p.partial and p.metrics]

    def launched(self) -> list[tr.TrialPoint]:
        """Launched and measured to the end (a reused result was not launched): what the
        prediction skip measures its misses on."""
        return [p for p in self.points if p.measured and not p.partial and p.record.engine_s]

    def engine_s(self) -> float | None:
        """The median engine time of the launched trials: what a launch is expected to take."""
        found = [float(p.record.engine_s or 0.0) for p in self.launched()]
        return statistics.median(found) if found else None

    def observation(self, p: tr.TrialPoint) -> Observation:
        """A trial as the simulator takes it: its config's flags, its measured figures."""
        return Observation(simulator_flags(self.spec, p.params), dict(p.metrics), trial=p.number)

    def best_observations(self, limit: int) -> list[Observation]:
        """The `limit` best whole trials, best first: the region the search is in."""
        ranked = sorted(self.whole(), key=lambda p: (p.score is None, p.score or 0.0))
        return [self.observation(p) for p in ranked[:limit]]

    def current(self) -> list[tr.TrialPoint]:
        """The trials of the study's current spec."""
        return (
            list(self.points) if self.study is None else of_current(self.study, list(self.points))
        )

    def observations(self) -> list[Observation]:
        """The trials an engine measured in full, in trial order (`TrialPoint.engine_measured`:
        never `tuner plan`'s predictions or a stopped run)."""
        ordered = sorted(self.current(), key=lambda p: p.number)
        return [self.observation(p) for p in ordered if p.engine_measured]

    def left_out(self) -> dict[int, str]:
        """Trials that ran on an engine but are not observations, with why."""
        out: dict[int, str] = {}
        for p in self.current():
            if p.planned or p.record.reused_from is not None or p.engine_measured:
                continue
            if p.record.ruled_out:
                out[p.number] = "never launched: ruled out by prediction"
            elif p.status == "pruned":
                out[p.number] = (
                    "stopped early: its figures cover only the requests finished by the stop, "
                    "and the simulator predicts the whole workload"
                )
        return out

    def profile_errors(self, requests: Callable[[], Sequence[BenchRequest]]) -> dict[str, float]:
        """How far the study's profile, as it is, predicts the observations off: the median of
        |predicted / measured - 1| per headline figure (`tuner.sim.fit.median_errors`, as the
        fit's "before"); {} without observations, `requests()` asked only with some. A
        UserError: no profile to predict on."""
        seen = self.observations()
        if not seen:
            return {}
        workload = study_workload(self.spec, requests())
        model, gpu = load_model(self.spec.engine.model), study_profile(self.spec)
        return median_errors(seen, [predict(model, gpu, o.flags, workload) for o in seen])

    def residuals(self, cal: Calibration) -> dict[str, list[float]]:
        """Per metric, measured / predicted of each trial `cal` held out of its fit (its
        fold's prediction, `Calibration.held_out_predictions`): what narrows the band on the
        calibrated simulator's figures (`tuner.fidelity.bands.Bands.narrowed`). {} when nothing
        was held out (one trial)."""
        if not cal.folds:
            return {}
        measured = {o.trial: o.metrics for o in self.observations()}
        out: dict[str, list[float]] = {}
        for trial, predicted in zip(cal.trials, cal.held_out_predictions, strict=False):
            for m, value in predicted.items():
                seen = measured.get(trial, {}).get(m)
                if seen and value and seen > 0 and value > 0:
                    out.setdefault(m, []).append(seen / value)
        return out

    def calibrate(
        self,
        requests: Sequence[BenchRequest],
        *,
        folds: int | None = None,
        max_requests: int | None = None,
    ) -> Calibration:
        """Fit the study's profile to the observations (`tuner.sim.fit.fit`) with the search
        loop's prior (`LOOP_PRIOR_WEIGHT`), so from one trial on, as the screen does."""
        return fit(
            study_profile(self.spec),
            self.observations(),
            model=load_model(self.spec.engine.model),
            workload=study_workload(self.spec, requests),
            folds=folds,
            max_requests=max_requests,
            prior_weight=LOOP_PRIOR_WEIGHT,
            min_observations=1,
        )


def observations(
    spec: Measuring, study: tr.StudyRecord, points: Sequence[tr.TrialPoint]
) -> list[Observation]:
    """`Trust.observations` of a stored study's trials."""
    return Trust(spec, points, study).observations()
