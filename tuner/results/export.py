"""Write the chosen trial for production `vllm serve` (shell, `--config` YAML, JSON).

Rendering always targets production's `vllm serve MODEL ...` through `tuner.spec.space`,
whichever way the study launched its engine, and carries the figures that justify the choice
so whoever deploys it knows what to expect. The choice itself is `tuner.results.selection`.

A stored config that vLLM refuses on the study's platform is never handed out as a command
(`check_deployable`). A study measured before a rule was known (the simulated engine took
`--block-size 8` on a CUDA GPU until it followed vLLM 0.32's attention backends,
`tuner.spec.vllm_rules`) may hold such a trial as its best; `tuner best` and `tuner export`
refuse it with vLLM's message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import yaml

from tuner.errors import UserError
from tuner.results import capacity_words as words
from tuner.results.commandline import (
    comment,
    env_assignments,
    one_line_quote,
    shell_command,
    vllm_config,
)
from tuner.results.selection import Selection
from tuner.results.setting import judged_by, setting_lines
from tuner.results.smallest import smallest_lines
from tuner.sim.profile_file import platform_of
from tuner.spec.figures import exact_all, figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.parts import Measuring, Serving
from tuner.spec.slo import SloLimit, straddle_words
from tuner.spec.space import check_rules, effective_flags, max_model_len, serve_argv, serve_env
from tuner.spec.values import Params
from tuner.spec.vllm_rules import VLLM_VERSION
from tuner.trial import TrialPoint
from tuner.trial.words import at_rate, scenario_parts

FORMATS = ("shell", "yaml", "json")


def check_deployable(spec: Serving, number: int, params: Params) -> None:
    """UserError when vLLM refuses trial `number`'s flags on the study's platform."""
    platform = platform_of(spec.simulated_accelerator)  # a profile's platform: data, no simulation
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
    spec: Measuring,
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
    elif (found := p.searches().get("")) is not None:
        lines.append(f"  {at_rate(found)}:")
    limits = [*spec.slo_limits(), *choice.limits]
    for name in names:
        if name in p.metrics:
            lines.append(f"  {name} = {figure(p.metrics[name])}{_around(p, name, limits)}")
            if baseline is not None and name in baseline.metrics and baseline.number != p.number:
                lines[-1] += f"; baseline trial {baseline.number}: {figure(baseline.metrics[name])}"
    if p.score is not None:
        lines.append(f"  score = {figure(p.score, 3, sign=True)} (lower is better; {choice.zero})")
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
    spec: Measuring,
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
            "moved_from_defaults": [m.as_json() for m in choice.moved],
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
