"""Pick the trial to ship and write it for production `vllm serve` (shell, `--config` YAML, JSON).

Selection is pure (trial points in, a `Selection` out). Rendering always targets production's
`vllm serve MODEL ...` through `tuner.spec.space`, whichever way the study launched its engine,
and carries the figures that justify the choice so whoever deploys it knows what to expect.

A stored config that vLLM refuses on the study's platform is never handed out as a command
(`check_deployable`). A study measured before a rule was known (the simulated engine took
`--block-size 8` on a CUDA GPU until it followed vLLM 0.32's attention backends,
`tuner.spec.vllm_rules`) may hold such a trial as its best; `tuner best` and `tuner export`
refuse it with vLLM's message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import yaml

from tuner import trial as tr
from tuner.errors import UserError
from tuner.results import capacity_words as words
from tuner.results.change import DefaultsComparison, against_defaults, worse_lines
from tuner.results.commandline import (
    comment,
    env_assignments,
    one_line_quote,
    shell_command,
    vllm_config,
)
from tuner.results.pareto import check_complete, check_stored
from tuner.results.recommend import Recommendation, recommendation
from tuner.results.setting import judged_by, setting_lines
from tuner.results.smallest import shipped_params, smallest_lines
from tuner.results.verdicts import Verdict, verdicts
from tuner.runners.plan import study_platform
from tuner.sim.vllm_defaults import VLLM_VERSION
from tuner.spec.figures import exact_all, figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.slo import SloLimit, straddle_words
from tuner.spec.space import check_rules, effective_flags, max_model_len, serve_argv, serve_env
from tuner.spec.study import StudySpec
from tuner.spec.values import Params, Scalar
from tuner.trial import SmallestChange, StudyRecord, TrialPoint
from tuner.trial.words import at_rate, scenario_parts

FORMATS = ("shell", "yaml", "json")


@dataclass(frozen=True)
class Selection:
    """The trial to export and, in words, why it was picked."""

    point: TrialPoint
    why: str
    limits: tuple[SloLimit, ...] = ()
    scores: tuple[float, ...] = ()  # every measured score of this config when it was confirmed
    notes: tuple[str, ...] = ()  # configs `--confirm` found wanting (`tuner.trial.miss_notes`)
    ranked: tuple[TrialPoint, ...] = ()  # the candidates it was chosen among, best first
    # set by `judge`: the change against vLLM's defaults, and every verdict on the choice
    comparison: DefaultsComparison | None = None
    worse: tuple[str, ...] = ()  # everything that got worse against the defaults, in words
    verdicts: tuple[Verdict, ...] = ()
    recommendation: Recommendation | None = None  # set by `judge`: the candidate held back?
    smallest: SmallestChange | None = None  # set by `judge`: the flags that carry the gain

    @property
    def params(self) -> dict[str, Scalar]:
        """The flags to ship: the trial's, less the changed ones that do not carry its gain."""
        return shipped_params(self.smallest, self.point)

    @property
    def held(self) -> bool:
        """The defaults are exported in place of the candidate (`hold`)."""
        rec = self.recommendation
        return rec is not None and rec.held and self.point.number != rec.candidate.number

    @property
    def candidate(self) -> TrialPoint | None:
        """Held: the best tuned config, shown beside the defaults exported in its place."""
        rec = self.recommendation
        return rec.candidate if self.held and rec is not None else None


def judge(
    choice: Selection,
    points: Sequence[TrialPoint],
    spec: StudySpec,
    study: StudyRecord | None,
    baseline: TrialPoint | None,
    *,
    trim: bool = True,
) -> Selection:
    """The choice with its change against vLLM's defaults, what got worse and its verdicts,
    computed once for every output that shows it (`best`, each `export` format, the report's
    deploy cards). `trim`: the command leaves out the changed flags that do not carry the gain
    (`tuner.results.smallest`; not for a trial asked for by number, nor under `--slo` limits
    beyond the study's own)."""
    ranked = choice.ranked or tuple(tr.ranked(points))
    found = verdicts(choice.point, points, spec, study, ranked=ranked, notes=choice.notes)
    # the simulator's check, whose dropped flags `--confirm` re-measures (part of its cost)
    flags = study.smallest.get(choice.point.number) if study is not None else None
    rec = recommendation(choice.point, found, ranked, spec, baseline, flags)
    comparison = against_defaults(spec, choice.point, baseline)
    # the check judged the study's own SLO: trimmed under `--slo` limits only when among them
    judged = {str(limit) for limit in spec.slo_limits()}
    trim = trim and {str(limit) for limit in choice.limits} <= judged
    change = study.smallest_of(choice.point) if study is not None and trim else None
    return replace(
        choice,
        comparison=comparison,
        worse=tuple(worse_lines(spec, choice.point, baseline)),
        verdicts=found,
        recommendation=rec,
        smallest=change,
    )


def hold(choice: Selection) -> Selection:
    """The judged choice with vLLM's defaults in the candidate's place when its verdicts hold
    it back (`recommend.recommendation`); the candidate's change and verdicts stay beside
    them. Unchanged when nothing holds it back."""
    rec = choice.recommendation
    if rec is None or not rec.held or rec.defaults is None:
        return choice
    why = f"vLLM's defaults, in place of the best tuned config (trial {rec.candidate.number})"
    return replace(choice, point=rec.defaults, why=why)


def slo_violation(point: TrialPoint, limits: Sequence[SloLimit]) -> float:
    """Total relative distance from the limits (0 when all are met); for "closest trial"."""
    return sum(
        max(limit.violation(point.metrics), 0.0) for limit in limits if not limit.met(point.metrics)
    )


def _figures(point: TrialPoint, names: Sequence[str]) -> str:
    return ", ".join(f"{n}={figure(point.metrics[n])}" for n in names if n in point.metrics)


def select_trial(
    points: Sequence[TrialPoint],
    study_name: str,
    *,
    trial: int | None = None,
    limits: Sequence[SloLimit] = (),
) -> Selection:
    """`--trial N`; else the best-scoring healthy trial that meets every limit given (they
    replace the study file's SLO); else, with no limits, the best feasible trial. Lowest
    `score` wins (it is stored in multi-objective studies too), ties go to the earlier trial.
    When no trial qualifies, the UserError names the closest: the smallest total relative
    SLO violation. The order is `tuner.trial.ranked`'s, shared with `tuner best`: configs
    that `--confirm` re-measured rank by their mean score."""
    limits = tuple(limits)
    check_complete(points, study_name)
    check_stored(points, [limit.metric for limit in limits], study_name)
    if trial is not None:
        return _given(points, study_name, trial, limits)
    # With limits given, they replace the study's SLO; health constraints still hold.
    pool = [p for p in points if (p.healthy if limits else p.feasible) and p.confirm_of is None]
    in_pool = {p.number for p in pool}
    ok = tr.ranked(
        points, eligible=lambda p: p.number in in_pool and all(lim.met(p.metrics) for lim in limits)
    )
    text = ",".join(str(limit) for limit in limits)
    kind = "measured" if limits else "feasible"
    if ok:
        best = ok[0]
        why = f"best score among the {len(pool)} {kind} trials"
        if limits:
            why = f"best score among the {len(ok)} of {len(pool)} {kind} trials meeting {text}"
        runs = tuple(tr.confirmation_runs(points).get(best.number, ()))
        return Selection(best, why, limits, runs, tuple(tr.miss_notes(points)), tuple(ok))
    if pool:
        near = min(pool, key=lambda p: (slo_violation(p, limits), p.number))
        figures = _figures(near, [limit.metric for limit in limits])
        raise UserError(
            f"no {kind} trial of study {study_name!r} meets {text}; "
            f"closest is trial {near.number} ({figures})"
        )
    notes = "".join(f"; {note}" for note in tr.miss_notes(points))
    if notes and not limits:
        raise UserError(f"no feasible trial of study {study_name!r} held up{notes}")
    closest = closest_miss(points)
    if closest is None:
        raise UserError(f"no trial of study {study_name!r} was measured: nothing to export")
    raise UserError(f"no feasible trial in study {study_name!r}; {closest}")


def closest_miss(points: Sequence[TrialPoint]) -> str | None:
    """The measured trial that breaks the study's constraints least, in words: "closest is
    trial 0 (breaks p99_ttft_ms<=1: p99_ttft_ms=107.3)"; None when no trial was measured.
    `export`, `best` and the end of `tuner run` say it when no trial is feasible."""
    measured = [p for p in points if p.status == "infeasible"]
    if not measured:
        return None
    near = min(measured, key=lambda p: (sum(max(v, 0) for v in p.constraints.values()), p.number))
    broken = near.broken_constraints
    shown = _figures(near, [re.split(r"[<>]=", name)[0] for name in broken])
    return (
        f"closest is trial {near.number} (breaks {', '.join(broken)}{': ' if shown else ''}{shown})"
    )


def _given(
    points: Sequence[TrialPoint], study_name: str, number: int, limits: tuple[SloLimit, ...]
) -> Selection:
    by_number = {p.number: p for p in points}
    point = tr.config_figures(points).get(number, by_number.get(number))  # pooled if confirmed
    if point is None:
        span = f"0–{max(by_number)}" if by_number else "none"
        raise UserError(f"study {study_name!r} has no trial {number} (trials: {span})")
    if point.status == "failed":
        raise UserError(f"trial {number} failed ({point.failure}): there is no config to export")
    if point.state != "COMPLETE" or not point.metrics:
        raise UserError(f"trial {number} is {point.state.lower()}: it has no measurement")
    missed = [limit for limit in limits if not limit.met(point.metrics)]
    if missed:
        text = ", ".join(f"{_figures(point, [m.metric])} vs {m}" for m in missed)
        raise UserError(f"trial {number} does not meet the SLO: {text}")
    why = f"trial {number}, as asked"
    if point.status == "infeasible":
        broken = ", ".join(point.broken_constraints)
        why += f" (WARNING: it breaks the study's constraints: {broken})"
    notes = [n for n in tr.miss_notes(points) if n.startswith(f"trial {number} ")]
    return Selection(point, why, limits, notes=tuple(f"WARNING: {n}" for n in notes))


# Rendering ------------------------------------------------------------------------------


def check_deployable(spec: StudySpec, number: int, params: Params) -> None:
    """UserError when vLLM refuses trial `number`'s flags on the study's platform."""
    platform = study_platform(spec)
    refused = check_rules(effective_flags(spec, params), max_model_len(spec), platform)
    if refused is not None:
        raise UserError(
            f"trial {number}'s config would not start on vLLM {VLLM_VERSION} ({platform}): "
            f"{refused} Export another trial (--trial N), or run the study again"
        )


def _provenance(simulated: bool, version: str | None) -> str:
    if simulated:
        return "PREDICTED by the tuner's simulator, not measured on a real engine: verify them"
    return f"measured on vLLM {version or '(version not recorded)'}"


def justification(
    spec: StudySpec,
    choice: Selection,
    study_name: str,
    simulated: bool,
    baseline: TrialPoint | None,
) -> list[str]:
    """The lines that say what this config is and what to expect from it."""
    p = choice.point
    names = list(dict.fromkeys([*HEADLINE_METRICS, *(limit.metric for limit in choice.limits)]))
    lines = [
        f"tuner export: study {study_name}, trial {p.number}: {choice.why}",
        f"figures {_provenance(simulated, p.record.vllm_version)}",
        *setting_lines(spec, choice.limits),
    ]
    if choice.held:
        lines += _candidate_lines(choice)
    elif choice.comparison is not None:
        lines += choice.comparison.lines()
    if not choice.held:
        lines += smallest_lines(choice.smallest, p)
    lines += words.capacity_lines(p, baseline)  # capacity mode: the headline
    if p.scenario_names:
        lines += [f"  {part}" for part in scenario_parts(p.record)]
        lines.append("  pooled over every scenario's requests (a mix no one serves):")
    elif p.record.capacity is not None:
        lines.append(f"  {at_rate(p.record.capacity)}:")
    limits = [*spec.slo_limits(), *choice.limits]
    for name in names:
        if name in p.metrics:
            lines.append(f"  {name} = {figure(p.metrics[name])}{_around(p, name, limits)}")
            if baseline is not None and name in baseline.metrics and baseline.number != p.number:
                lines[-1] += f"; baseline trial {baseline.number}: {figure(baseline.metrics[name])}"
    if p.score is not None:
        lines.append(
            f"  score = {figure(p.score, 3, sign=True)} (lower is better; the baseline scores 0)"
        )
    if not choice.held:  # held: the candidate's are above
        lines += choice.worse
        lines += _verdict_lines(choice) or [f"  {note}" for note in choice.notes]
    return lines


def _around(p: TrialPoint, name: str, limits: Sequence[SloLimit]) -> str:
    """` (95% CI 13930–24290; the interval straddles the SLO p99_ttft_ms<=20000)`, or ""."""
    ci = p.ci(name)
    if ci is None:
        return ""
    straddle = straddle_words(name, ci, list(limits))
    return f" (95% CI {figure(ci[0])}–{figure(ci[1])}{'; ' + straddle if straddle else ''})"


def _verdict_lines(choice: Selection) -> list[str]:
    return [f"{'DOUBT' if v.doubt else 'note'}: {v.text}" for v in choice.verdicts]


def _candidate_lines(choice: Selection) -> list[str]:
    """A held choice (`hold`): what is recommended and why, what would settle it, and the
    candidate's change against the defaults, what got worse and its verdicts."""
    rec = choice.recommendation
    if rec is None:
        return []
    lines = [*rec.lines(), f"the candidate, trial {rec.candidate.number}:"]
    if choice.comparison is not None:
        lines += choice.comparison.lines()
    lines += choice.worse
    lines += smallest_lines(choice.smallest, rec.candidate)
    lines += _verdict_lines(choice)
    return [*lines, f"what to expect from vLLM's defaults, trial {choice.point.number}:"]


def render(
    fmt: str,
    spec: StudySpec,
    choice: Selection,
    study_name: str,
    *,
    simulated: bool,
    baseline: TrialPoint | None = None,
    config_path: str = "FILE",
) -> str:
    """The export as text, in one of FORMATS; a YAML's comment names `config_path` to run it."""
    p, params = choice.point, choice.params
    check_deployable(spec, p.number, params)
    notes = justification(spec, choice, study_name, simulated, baseline)
    if fmt == "shell":
        return comment(notes) + shell_command(spec, params) + "\n"
    if fmt == "yaml":
        env = serve_env(spec, params)
        run = " ".join(
            [
                *env_assignments(env, one_line_quote),
                f"vllm serve --config {one_line_quote(config_path)}",
            ]
        )
        head = [*notes, f"run with: {run}"]
        body = yaml.safe_dump(vllm_config(spec, params), sort_keys=False, allow_unicode=True)
        return comment(head) + body
    if fmt == "json":
        doc = {
            "study": study_name,
            "trial": p.number,
            "selection": choice.why,
            "slo": judged_by(spec, choice.limits),
            "slo_given": bool(choice.limits),  # --slo replaced the study's
            "simulated": simulated,
            "figures": "predicted by the simulator" if simulated else "measured",
            "vllm_version": p.record.vllm_version,
            "params": params,
            "trial_params": p.params,  # every flag the trial changed (`params` may drop some)
            "smallest_change": choice.smallest.encode() if choice.smallest else None,
            "metrics": p.metrics,
            "metric_ci": {m: list(ci) for m, ci in p.record.cis.items()},
            "score": p.score,
            "baseline_metrics": baseline.metrics if baseline is not None else None,
            "against_defaults": choice.comparison.as_json() if choice.comparison else None,
            "verdicts": [v.as_json() for v in choice.verdicts],
            "recommendation": rec.as_json() if (rec := choice.recommendation) else None,
            "capacity": words.capacity_json(p),
            "command": serve_argv(spec, params),
            "env": serve_env(spec, params),
            "config": vllm_config(spec, params),
            "hardware": spec.hardware.model_dump(),
            "workload": json.loads(spec.workload.model_dump_json()),
            "scenarios": {
                s.name: {
                    "weight": s.weight,
                    "slo": s.slo,
                    "workload": json.loads(s.workload().model_dump_json()),
                }
                for s in spec.scenarios
            },
        }
        return json.dumps(exact_all(doc), indent=2) + "\n"
    raise UserError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
