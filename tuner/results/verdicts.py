"""How sure we are of a chosen config, in words, computed once (pure).

`verdicts` lists every doubt (and every reassurance) about the trial `tuner best` or `tuner
export` picked, as `Verdict(kind, text, doubt)`; every kind and its words: docs/results.md, "The
answer in plain figures". "Clearly better" is `objective.clearly_better`, the one rule. One
list, rendered per output: `best` and `export` write it as comment lines, JSON as a `verdicts`
list, the report in its deploy card.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tuner import trial as tr
from tuner.measure.modes import Objective
from tuner.results.study_file import study_file_words
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS, metric_words
from tuner.spec.parts import Judging
from tuner.spec.slo import SloLimit, straddle_words
from tuner.trial import StudyRecord, TrialPoint
from tuner.trial.clearly import ClearlyBetter

Kind = Literal[
    "defaults-not-measured",
    "confirmation-failed",
    "confirmed",
    "baseline-is-best",
    "clearly-better-than-baseline",
    "not-clearly-better-than-baseline",
    "not-clearly-better-than-runner-up",
    "not-the-best",
    "fragile",
    "robust",
    "robustness-not-checked",
    "warm-prefix-cache",
    "interval-straddles-slo",
]


@dataclass(frozen=True)
class Verdict:
    """One finding about the chosen config; `doubt`: a reason to hesitate before deploying."""

    kind: Kind
    text: str
    doubt: bool

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind, "text": self.text, "doubt": self.doubt}


def reference_words(point: TrialPoint, points: Sequence[TrialPoint]) -> str:
    """What the score is relative to: "baseline", or the first measured trial."""
    ref = point.record.reference_trial
    if ref is None or any(p.number == ref and p.baseline for p in points):
        return "baseline"
    return f"trial {ref}, the first measured: vLLM's defaults were not measured,"


def zero_words(point: TrialPoint, points: Sequence[TrialPoint]) -> str:
    """What a score of 0 is, for `tuner best` and `export`: `baseline = 0`; once `--confirm`
    re-measured the reference, 0 is the mean of its runs (`tr.pooled`), and its first run
    alone, which `tuner trials` lists with its own score, is said (the fourth round of trust:
    the baseline's row read −0.05 beside "the baseline scores 0")."""
    ref, number = reference_words(point, points), point.record.reference_trial
    runs = tr.confirmation_runs(points).get(number) if number is not None else None
    if not runs:
        return f"{ref} = 0"
    first = figure(runs[0], 3, sign=True)
    return f"{ref} = 0, the mean of its {len(runs)} runs: trial {number} alone scores {first}"


def verdicts(
    point: TrialPoint,
    points: Sequence[TrialPoint],
    spec: Judging,
    objective: Objective,
    study: StudyRecord | None,
    *,
    ranked: Sequence[TrialPoint] | None = None,
    notes: Sequence[str] | None = None,
    limits: Sequence[SloLimit] = (),
) -> tuple[Verdict, ...]:
    """Every verdict on `point`, in the order `tuner best` prints them. `ranked`: the
    candidates it was chosen among, best first (default `tuner.trial.ranked`); `notes`: the
    configs `--confirm` found wanting (default `tuner.trial.miss_notes`); `limits`: the SLO
    it was chosen under (`--slo`; default the study's)."""
    ranked = list(tr.ranked(points) if ranked is None else ranked)
    out: list[Verdict] = []
    if reference_words(point, points) != "baseline":
        out.append(
            Verdict(
                "defaults-not-measured",
                f"vLLM's defaults were not measured: scores are relative to trial "
                f"{point.record.reference_trial}, the first measured",
                True,
            )
        )
    if point.warm_runs:  # docs/metrics.md, "Every run cold"
        first, n = point.warm_runs[0], len(point.warm_runs)
        text = (
            f"measured with a warm prefix cache: {first.words()}"
            + (f", and {n - 1} more run(s)" if n > 1 else "")
            + "; its figures are better than a cold engine's"
        )
        out.append(Verdict("warm-prefix-cache", text, True))
    for note in tr.miss_notes(points) if notes is None else notes:
        out.append(Verdict("confirmation-failed", note, True))
    runs = tr.confirmation_runs(points).get(point.number)
    if runs:
        mean = sum(runs) / len(runs)
        spread = (sum((x - mean) ** 2 for x in runs) / max(len(runs) - 1, 1)) ** 0.5
        shown = figure(mean, 3, sign=True)
        text = f"confirmed over {len(runs)} runs: score {shown} ± {spread:.3f} (std)"
        out.append(Verdict("confirmed", text, False))
    out += _straddles(point, spec, list(limits) or spec.slo_limits())
    out += _confidence(point, ranked, ClearlyBetter(objective), tr.confirmation_runs(points))
    robust = study.robustness_of(point) if study is not None else None
    if robust is not None and robust.verdict:
        kind: Kind = (
            "fragile"
            if robust.fragile
            else "robust"
            if robust.fragile is False
            else "robustness-not-checked"
        )
        out.append(Verdict(kind, robust.verdict, bool(robust.fragile)))
    return tuple(out)


def _straddles(point: TrialPoint, spec: Judging, limits: list[SloLimit]) -> list[Verdict]:
    """A doubt for each stored interval with an SLO limit inside it: the figure met the SLO (it
    was chosen under it), but as measured it may keep the limit or break it. The same words
    as the figure's own line (`straddle_words`), so that every output says it as a doubt."""
    out = []
    names = dict.fromkeys([*HEADLINE_METRICS, *(limit.metric for limit in limits)])
    for name in names:
        ci = point.ci(name)
        straddle = straddle_words(name, ci, limits)
        if ci is not None and straddle:
            label, unit = metric_words(name)
            file = study_file_words()  # the user's file, as every suggested command names it
            text = (
                f"{label} 95% CI {figure(ci[0])}–{figure(ci[1])}{unit}: {straddle}; it may keep "
                f"the limit or break it (tuner run {file} --confirm K, or tuner verify {file}, "
                "re-measures it)"
            )
            out.append(Verdict("interval-straddles-slo", text, True))
    return out


def _pooled_order(
    point: TrialPoint, runner_up: TrialPoint, confirmed: dict[int, list[float]]
) -> Verdict | Literal[False] | None:
    """With `--confirm` repeats of both configs (2 or more runs each): False when the means of
    their scores differ by more than twice the standard error of the difference (Welch), else
    a verdict saying they do not; None without such repeats (the intervals of one run decide)."""
    a, b = confirmed.get(point.number) or [], confirmed.get(runner_up.number) or []
    if len(a) < 2 or len(b) < 2:
        return None
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / (len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / (len(b) - 1)
    se = (var_a / len(a) + var_b / len(b)) ** 0.5
    if mean_b - mean_a > 2 * se:  # lower scores are better
        return False
    text = (
        f"not clearly better than the runner-up (trial {runner_up.number}) over their "
        f"--confirm repeats: mean score {mean_a:+.3f} over {len(a)} runs against "
        f"{mean_b:+.3f} over {len(b)} (a gap within twice its standard error, {se:.3f})"
    )
    return Verdict("not-clearly-better-than-runner-up", text, True)


def _defaults_hold(point: TrialPoint, ranked: list[TrialPoint], clear: ClearlyBetter) -> str:
    """What holds when vLLM's defaults (`point`) are the best trial, against the best tuned
    config: the defaults clearly better, or no tuned config clearly better than them."""
    tuned = next((p for p in ranked if not p.baseline), None)
    if tuned is None:  # refused, ruled out, failed or breaking an SLO: none to compare
        return (
            "the baseline (vLLM's defaults) is the only config measured within the SLOs: no "
            "tuned config to compare it with (`tuner trials` says why each is not)"
        )
    text = "the baseline (vLLM's defaults) is the best trial: no tuned config beat it"
    if clear(point, tuned):
        on = ", ".join(clear.on(point, tuned))
        return (
            f"{text}; the defaults are CLEARLY better than the best tuned config (trial "
            f"{tuned.number}) on {on}: keep them"
        )
    if clear(tuned, point):
        on = ", ".join(clear.on(tuned, point))
        return (
            f"{text}; the best tuned config (trial {tuned.number}) is clearly better on {on} "
            "only, and worse on the study's objective: keep the defaults"
        )
    return (
        f"{text}; no tuned config is clearly better than the defaults (the best, trial "
        f"{tuned.number}: {clear.why_of(point, tuned)}): keep them"
    )


def _confidence(
    point: TrialPoint,
    ranked: list[TrialPoint],
    clear: ClearlyBetter,
    confirmed: dict[int, list[float]] | None = None,
) -> list[Verdict]:
    out = []
    base = [p for p in ranked if p.baseline]
    if point.baseline and ranked and ranked[0].number == point.number:
        # no runner-up verdict: the order of the defaults and a tuned config that scored
        # worse is no doubt about deploying the defaults (`export` exits 3: nothing to ship)
        return [Verdict("baseline-is-best", _defaults_hold(point, ranked, clear), False)]
    if base and not point.baseline and clear(point, base[0]):
        on = ", ".join(clear.on(point, base[0]))
        text = (
            f"CLEARLY better than vLLM's defaults (baseline trial {base[0].number}) on {on}: "
            + clear.why_clear
        )
        out.append(Verdict("clearly-better-than-baseline", text, False))
    elif base and not point.baseline:
        out.append(
            Verdict(
                "not-clearly-better-than-baseline",
                f"NOT clearly better than the baseline (trial {base[0].number}): "
                + clear.why_of(point, base[0]),
                True,
            )
        )
    if ranked and ranked[0].number != point.number:
        top = ranked[0]
        text = f"not the first choice: trial {top.number} ranks above it"
        out.append(Verdict("not-the-best", text, True))
        return out
    runner_up = next((p for p in ranked if p.number != point.number), None)
    if runner_up is None:
        return out
    pooled = _pooled_order(point, runner_up, confirmed or {})
    if pooled is not None:  # both re-measured: their repeats decide, not one run's intervals
        if pooled:
            out.append(pooled)
        return out
    if runner_up.baseline and any(v.kind == "not-clearly-better-than-baseline" for v in out):
        return out  # the runner-up is the baseline, already said: one line, not two
    if not clear(point, runner_up):
        out.append(
            Verdict(
                "not-clearly-better-than-runner-up",
                f"not clearly better than the runner-up (trial {runner_up.number}): "
                "re-measure both (tuner run --confirm K) before trusting the order",
                True,
            )
        )
    return out
