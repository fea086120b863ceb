"""What the study predicts for the user's traffic, when its lengths are outside the study's
range (SIMULATED; docs/verify.md, "What the study predicts for your traffic").

The study's simulator (calibrated by `tuner.fidelity.calibration.Trust.calibrate`, as `tuner
calibrate` does) runs the shipped config twice: at the log's lengths with the study's request
count and arrivals (rate, burstiness, seed, concurrency), and on the study's own workload for a
like-for-like comparison; both on the study's hardware (its calibrated profile), not on today's
GPU. What callers may assume: every figure here is SIMULATED and none enters the verdict; the
verify's measured figures still come from the study's workload.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuner.errors import UserError
from tuner.fidelity.bands import Bands, range_text, regime, with_bands
from tuner.fidelity.calibration import Trust
from tuner.measure.modes import Objective
from tuner.runners.plan import study_workload
from tuner.sim.fit import predict
from tuner.sim.profiles import known_model
from tuner.spec.figures import figure
from tuner.spec.parts import Measuring, Traffic
from tuner.spec.space import simulator_flags
from tuner.spec.values import Params
from tuner.trial import StudyRecord, TrialPoint
from tuner.workload.request import BenchRequest

# a capacity study's trials were measured each at its own capacity rate, which the
# calibration (one workload at one rate per observation, `Trust.calibrate`) does not model
CAPACITY_NOT_PREDICTED = (
    "a capacity study: its trials ran at their own capacity rates, which the calibration "
    "does not model"
)


@dataclass(frozen=True)
class TrafficPrediction:
    """The calibrated simulator's figures for the shipped config (vLLM bench keys)."""

    yours: dict[str, float] = field(default_factory=dict)  # on the request log's lengths
    study: dict[str, float] = field(default_factory=dict)  # on the study's own workload
    calibrated_on: tuple[int | None, ...] = ()  # the study's trials the fit used
    seconds: float = 0.0
    not_predicted: str | None = None  # why there is no prediction
    bands: Bands | None = None  # each figure's band, narrowed by the calibration's residuals

    def as_json(self) -> dict[str, object]:
        return {
            "simulated": True,
            "your_traffic": with_bands(self.yours, self.bands),
            "study_workload": with_bands(self.study, self.bands),
            "calibrated_on_trials": list(self.calibrated_on),
            "seconds": round(self.seconds, 2),
            "not_predicted": self.not_predicted,
        }

    def lines(self, names: Sequence[str], measured: Mapping[str, object]) -> list[str]:
        """One line per figure: SIMULATED on your traffic and on the study's workload, next
        to what the verify measured (on the study's workload)."""
        if self.not_predicted is not None:
            return [f"your traffic: not predicted ({self.not_predicted})"]
        trials = ", ".join(str(n) for n in self.calibrated_on)
        out = [
            "what the study predicts for your traffic (SIMULATED: its simulator calibrated on "
            f"trials {trials}, on the study's hardware, the shipped config, the study's "
            "request count and arrivals at your lengths; in parentheses, the band that holds "
            f"about 80 % of true figures{self._band_source(names)}):"
        ]
        for name in names:
            yours, studied = self.yours.get(name), self.study.get(name)
            if yours is None or studied is None:
                continue
            change = f" ({100 * (yours / studied - 1):+.1f} %)" if studied else ""
            got = measured.get(name)
            now = f"; measured now {figure(got)} on the study's workload" if got is not None else ""
            out.append(
                f"  {name}: SIMULATED {self._banded(name, yours)} on your traffic vs SIMULATED "
                f"{self._banded(name, studied)} on the study's workload{change}{now}"
            )
        return out

    def _banded(self, name: str, value: float) -> str:
        """`1450 (1420-2280)`: a figure and its band."""
        around = self.bands.around(name, value) if self.bands is not None else None
        return figure(value) if around is None else f"{figure(value)} ({range_text(around)})"

    def _band_source(self, names: Sequence[str]) -> str:
        """`: published GPU runs, burst; ...`: where the bands come from."""
        if self.bands is None:
            return ""
        found = [b.source for b in (self.bands.ratio(n) for n in names) if b is not None]
        return f": {'; '.join(dict.fromkeys(found))}" if found else ""


def predict_traffic(
    spec: Measuring,
    objective: Objective,
    record: StudyRecord,
    points: Sequence[TrialPoint],
    params: Params,
    studied: Sequence[BenchRequest],
    logged: Sequence[BenchRequest],
    names: Sequence[str],
) -> TrafficPrediction:
    """The shipped config (`params`) on the `logged` requests and on the `studied` ones, by the
    simulator calibrated on the study's measured trials; `not_predicted` says why not when the
    simulator does not know the model, the study names no accelerator, or no trial fits."""
    started = time.perf_counter()
    if not objective.one_run_figures:
        return TrafficPrediction(not_predicted=CAPACITY_NOT_PREDICTED)
    model = known_model(spec.engine.model)
    if model is None:
        return TrafficPrediction(not_predicted=f"the simulator does not know {spec.engine.model}")
    trust = Trust(spec, points, record)
    try:
        cal = trust.calibrate(list(studied))
    except UserError as exc:  # no accelerator profile, or no trial the simulator can run
        return TrafficPrediction(not_predicted=str(exc))
    bands = _bands(spec, logged).narrowed(trust.residuals(cal), "this study's calibration")
    flags = simulator_flags(spec, params)
    figures = [
        predict(model, cal.profile, flags, study_workload(spec, requests), tuple(names))
        for requests in (as_many(logged, len(studied)), studied)
    ]
    if figures[0] is None or figures[1] is None:
        why = "the simulator refuses the shipped config on this traffic"
        return TrafficPrediction(not_predicted=why, calibrated_on=cal.trials)
    return TrafficPrediction(
        figures[0], figures[1], cal.trials, time.perf_counter() - started, None, bands
    )


def _bands(spec: Traffic, logged: Sequence[BenchRequest]) -> Bands:
    """The bands of the prediction: the study's workload's regime, and the one of its
    arrivals at the log's lengths (a long-context log: long context's band too)."""
    w = spec.workload
    prompt = sum(r.prompt_len for r in logged) / len(logged) if logged else 0.0
    yours = regime(
        request_rate=w.request_rate,
        max_concurrency=w.max_concurrency,
        prompt_tokens=prompt,
        num_prompts=w.num_prompts,
    )
    return Bands.of_study(spec).plus(yours)


def as_many(logged: Sequence[BenchRequest], n: int) -> list[BenchRequest]:
    """`n` of the log's requests, evenly spread over it (each repeated when the log is
    shorter): the study's request count at the log's length mix, so the two predictions
    differ by the lengths alone, not by how many requests share the tail."""
    if not logged:
        return []
    return [logged[i * len(logged) // n] for i in range(n)]
