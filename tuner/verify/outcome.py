"""One `tuner verify` written down: what it found (`Findings`, judged by `session.judge`) as
the JSON document a monitoring job reads, and that is stored, and as the lines a person reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tuner.results.selection import Selection
from tuner.spec.sections import HardwareSpec
from tuner.spec.slo import SloLimit
from tuner.verify import compare
from tuner.verify.caps import CappedWorkload, Caps
from tuner.verify.changes import flag_lines
from tuner.verify.engine_info import EngineInfo
from tuner.verify.request_log import Traffic


@dataclass(frozen=True)
class Outcome:
    document: dict[str, object]  # the JSON a monitoring job reads, and what is stored
    lines: list[str]
    verdict: compare.Verdict


@dataclass(frozen=True)
class Sent:
    """What one verify sent, and to what."""

    base_url: str
    work: CappedWorkload  # the workload sent, cut to the caps
    info: EngineInfo  # what the engine says about itself
    started: float  # when sending began (epoch s)
    requests: int | None  # how many, the client's initial test request included


@dataclass(frozen=True)
class Findings:
    """What one verify sent and found, before it is written down."""

    sent: Sent
    flags: list[compare.FlagCheck]  # the engine's flags against the exported command's
    checks: list[compare.MetricCheck]  # each figure compared, against the study's
    names: list[str]  # the figures compared (`session.figure_names`)
    limits: list[SloLimit]  # the SLO judged
    measured: dict[str, float]  # the figures measured now ({}: none)
    changes: list[str]  # what changed since the study: the flags, the platform, the traffic
    capacity_rps: float | None  # capacity mode: the shipped capacity, the rate judged at
    verdict: compare.Verdict
    retune: list[str]  # what to do when it does not hold
    # the exported flags the engine does not state, bounded from its /metrics instead
    inferred: list[compare.InferredCheck] = field(default_factory=list)


def written(
    study_name: str,
    choice: Selection,
    hardware: HardwareSpec,
    caps: Caps,
    mix: Traffic,
    found: Findings,
) -> Outcome:
    """The findings against the study's shipped config (`choice`) as the document and the
    lines; `mix`: the user's request log against the study's workload."""
    point, sent = choice.point, found.sent
    document = {
        "verified_at": time.time(),
        "started_at": sent.started,
        "study": study_name,
        "trial": point.number,
        "shipped": choice.why,
        "base_url": sent.base_url,
        **_what_was_sent(caps, sent.work),
        "requests_sent": sent.requests,
        "engine": sent.info.as_json(),
        "study_vllm_version": point.record.vllm_version,
        "study_gpu": hardware.gpu,
        "capacity_rps": found.capacity_rps,
        "flags": [
            {"flag": c.flag, "exported": c.exported, "engine": c.engine, "differs": c.differs}
            for c in found.flags
        ],
        "inferred_flags": [c.as_json() for c in found.inferred],
        "changes": found.changes,
        "traffic": mix.lines,
        "predicted": mix.predicted.as_json() if mix.predicted is not None else None,
        "metrics": found.measured,
        "checks": [c.as_json() for c in found.checks],
        "slo": [str(lim) for lim in found.limits],
        "verdict": found.verdict.as_json(),
        "retune": found.retune,
    }
    lines = _lines(study_name, choice, found)
    lines += mix.lines
    if mix.predicted is not None:
        lines += mix.predicted.lines(found.names, found.measured)
    lines += [*found.retune, f"verdict: {found.verdict.text}"]
    return Outcome(document, lines, found.verdict)


def _what_was_sent(caps: Caps, work: CappedWorkload) -> dict[str, object]:
    w = work.workload
    return {
        "caps": {
            "max_requests": caps.max_requests,
            "max_rate": caps.max_rate,
            "max_time_s": caps.max_time_s,
        },
        "workload": {
            "num_prompts": w.num_prompts,
            "request_rate": w.request_rate,
            "notes": list(work.notes),
        },
    }


def _lines(study_name: str, choice: Selection, found: Findings) -> list[str]:
    point, sent = choice.point, found.sent
    w, notes = sent.work.workload, sent.work.notes
    lines = [
        f"tuner verify: study {study_name}, trial {point.number} ({choice.why}) against "
        f"{sent.base_url}",
        f"workload: {w.num_prompts} prompts at {w.request_rate:g} req/s"
        + (f" ({'; '.join(notes)})" if notes else f" ({_whose(point.number, found.capacity_rps)})"),
    ]
    if point.simulated:
        lines.append("the study's figures are SIMULATED (its engine was `tuner sim serve`)")
    if sent.requests is not None:
        lines.append(f"sent {sent.requests} requests (the client's initial test request included)")
    seen = ", ".join(sent.info.sources) or "nothing (no /version, /metrics, /server_info)"
    lines.append(f"engine: vLLM {sent.info.version or '(not stated)'}; read from {seen}")
    lines += flag_lines(found.flags, found.inferred)
    if found.checks:
        lines.append("figures, verify [95% interval] vs study [95% interval]:")
        lines += [c.line() for c in found.checks]
    measured = found.measured
    for lim in found.limits:
        got = measured.get(lim.metric)
        state = "not measured" if got is None else ("met" if lim.met(dict(measured)) else "BROKEN")
        lines.append(f"SLO {lim}: {state}" + (f" ({got:.4g})" if got is not None else ""))
    return lines


def _whose(number: int, capacity_rps: float | None) -> str:
    """Whose workload verify sends: the study's, in capacity mode at the shipped capacity
    (`capacity_rps`, None in the other modes)."""
    if capacity_rps is None:
        return "the study's"
    return f"the study's, at trial {number}'s capacity rate"
