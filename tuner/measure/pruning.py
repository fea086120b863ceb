"""Early stopping: stop a trial whose end is already decided, from its partial records.

Pure: records in, a decision out. At each checkpoint (`Checkpoints`) the runner hands over a
`Snapshot` (the measured requests sent so far, finished or still streaming, and the seconds
since the first dispatch); `decide` says stop, with a reason in words, or go on. The rules,
each from a bound that the rest of the run cannot undo, and when each applies:
docs/early-stopping.md, "The stop rule":

(a) an SLO is broken for sure (lower bounds on every request's latency, censored where it is
    still waiting);
(b) the trial cannot beat the incumbent by more than `margin` (after `min_completed` requests
    and `min_fraction` of the workload; scalar mode only, as multi mode has no incumbent);
(c) queue growth (`tuner.measure.backlog`).

What callers may assume: the engine's own gauges (`EngineSample`, scraped at each checkpoint)
are evidence, never a ground on their own: a growing queue (`overloaded`) lets (b) decide
before its wait is over, (c) needs pressure (`backlog.pressure`), and the reason names either.
A request that waited long and then failed leaves the final statistics; the failed-request
constraint (`objective.max_failed_fraction`) judges the trial instead.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from tuner.measure import backlog
from tuner.measure.records import RequestRecord
from tuner.measure.snapshot import EngineSample, Snapshot
from tuner.spec.slo import SloLimit, metric_direction

if TYPE_CHECKING:  # the study file's section, read here, never loaded by the simulation core
    from tuner.spec.sections import PruningSpec

_LATENCY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|e2el)_ms$")
_FLOOR = 1e-9


@dataclass(frozen=True)
class Rule:
    """What the study file's `pruning:` section asks, plus the study so far."""

    slos: Sequence[SloLimit] = ()
    weights: Mapping[str, float] | None = None  # scalar mode's; None: no incumbent rule
    reference: Mapping[str, float] | None = None  # what scores are relative to
    incumbent: float | None = None  # best feasible score so far
    min_completed: int = 20
    min_fraction: float = 0.2
    margin: float = 0.0
    queue_growth: int = 8  # requests the engine's queue must grow by to count as overload
    # A stop must save this fraction of the run's expected workload time: never stop later
    # than (1 - min_saving) of it (`expected_workload_s`); such a trial runs on and is scored.
    min_saving: float = 0.2
    # the workload's length in the study's full runs so far (the median; None: unknown)
    expected_s: float | None = None
    backlog: bool = True  # rule (c), queue growth (off: the rule before it, for comparisons)


def study_rule(
    p: PruningSpec,
    slos: Sequence[SloLimit],
    *,
    weights: Mapping[str, float] | None = None,
    reference: Mapping[str, float] | None = None,
    incumbent: float | None = None,
    expected_s: float | None = None,
) -> Rule:
    """The study file's `pruning:` section as a `Rule` over `slos`, with what the study so
    far adds (the incumbent's comparison, the expected workload time): the one home of it."""
    return Rule(
        slos=slos,
        weights=weights,
        reference=reference,
        incumbent=incumbent,
        min_completed=p.min_completed,
        min_fraction=p.min_fraction,
        margin=p.margin,
        queue_growth=p.queue_growth,
        min_saving=p.min_saving,
        expected_s=expected_s,
    )


@dataclass(frozen=True)
class Decision:
    """Stop or go on. A stop says what it learnt, for the sampler: `score_bound`, the lower
    bound on the final score that rule (b) stopped on; `censored`, each SLO that rule (a) found
    broken with the lower bound of its violation ({`metric<=value`: relative distance})."""

    stop: bool
    reason: str = ""
    engine: EngineSample | None = None  # the engine's gauges when it stopped, if scraped
    score_bound: float | None = None
    censored: Mapping[str, float] = field(default_factory=dict)
    sent_fraction: float | None = None  # of the workload's requests, sent by the stop
    backlog_bound_ms: float | None = None  # rule (c)'s bound, when (c) stopped it


GO_ON = Decision(False)


def lower_bounds(snap: Snapshot, kind: str) -> np.ndarray:
    """Per-request lower bounds (seconds) on the final TTFT, TPOT or E2EL, over the whole
    workload: requests not sent, or with no bound yet, count 0."""
    out = np.zeros(snap.total)
    t = snap.elapsed_s
    for i, (r, done) in enumerate(zip(snap.sent, snap.done, strict=True)):
        if done and not r.success:
            continue
        waited = max(t - r.start_s, 0.0)
        if kind == "ttft":
            out[i] = r.ttft_s if r.ttft_s else (0.0 if done else waited)
        elif kind == "e2el":
            out[i] = r.latency_s if done else waited
        elif done and r.output_tokens > 1:  # tpot: finished requests only
            out[i] = (r.latency_s - r.ttft_s) / (r.output_tokens - 1)
    return out


def metric_bound(snap: Snapshot, name: str) -> float | None:
    """A bound the final value of `name` cannot beat: a lower bound for latencies (ms), an
    upper bound for throughputs; None when there is none."""
    m = _LATENCY.match(name)
    if m:
        stat, pct, kind = m.groups()
        values = lower_bounds(snap, kind)
        if stat == "mean":
            return float(values.mean()) * 1000
        q = 50.0 if stat == "median" else float(pct)
        return float(np.percentile(values, q)) * 1000
    if snap.elapsed_s <= 0:
        return None
    if name == "request_throughput":
        return snap.total / snap.elapsed_s
    if name == "output_throughput" and snap.max_output_tokens is not None:
        return snap.max_output_tokens / snap.elapsed_s
    if name == "total_token_throughput":
        outs, ins = snap.max_output_tokens, snap.input_tokens
        return (outs + ins) / snap.elapsed_s if outs is not None and ins is not None else None
    return None


def score_bound(snap: Snapshot, weights: Mapping[str, float], ref: Mapping[str, float]) -> float:
    """A lower bound on the final score (lower is better; `tuner.measure.objective.score`)."""
    total = 0.0
    for name, w in weights.items():
        if w == 0:
            continue
        bound = metric_bound(snap, name)
        if bound is None or name not in ref or w < 0:
            return -math.inf
        sign = 1.0 if metric_direction(name) == "minimize" else -1.0
        total += w * sign * math.log(max(bound, _FLOOR) / max(ref[name], _FLOOR))
    return total


def overloaded(snap: Snapshot, growth: int) -> str | None:
    """Overload at this arrival rate, in words, or None. The engine's waiting queue counts
    only while the client still sends at the workload's rate (samples up to the last
    dispatch): there it must have grown by at least `growth` requests over at least three
    checkpoints, rise on a least-squares fit and stand at its highest now."""
    dispatching_until = (
        math.inf if len(snap.sent) < snap.total else max((r.start_s for r in snap.sent), default=0)
    )
    samples = [e for e in snap.engine if e.t_s <= dispatching_until]
    if len(samples) < 3 or samples[-1].t_s <= samples[0].t_s:
        return None
    t = np.array([e.t_s for e in samples])
    q = np.array([e.waiting for e in samples], dtype=float)
    low = int(np.argmin(q))
    if q[-1] - q[low] < growth or q[-1] < q.max() or np.polyfit(t, q, 1)[0] <= 0:
        return None
    return (
        f"overloaded at this rate: the engine's queue grew from {q[low]:.0f} to {q[-1]:.0f} "
        f"in {t[-1] - t[low]:.1f} s while requests still arrived"
    )


def expected_workload_s(snap: Snapshot) -> float | None:
    """The run's expected length (an estimate, erring short so that a stop errs towards
    running on; None: no pace to project from yet).

    Once every request is streaming or done, only decoding is left: each streaming request
    ends its typical decode (the median of finished ones, first token to end) after its
    first token; before any has finished there is no pace, and the run may end any moment
    (then every TTFT is final, so an SLO on it would have stopped the run already). Before
    that, the requests not finished are projected at the pace of finishes, the smaller of
    the whole run's and its second half's (a queue drains faster once arrivals end), or at
    the pace of first tokens while none has finished."""
    t = snap.elapsed_s
    if t <= 0:
        return None
    live = list(zip(snap.sent, snap.done, strict=True))
    ended = [r for r, d in live if d]
    streaming = [r.start_s + r.ttft_s for r, d in live if not d and r.ttft_s]
    if len(snap.sent) == snap.total and len(ended) + len(streaming) == snap.total:
        decodes = [r.latency_s - r.ttft_s for r in ended if r.success and r.ttft_s]
        if not decodes:  # no pace: it may end any moment (and rule (b) needs finishes)
            return t
        typical = float(np.median(decodes))
        return max([t, *(f + typical for f in streaming)])
    if not ended:
        return t * snap.total / len(streaming) if streaming else None
    expected = t * snap.total / len(ended)
    recent = sum(1 for r in ended if r.start_s + r.latency_s > t / 2)
    if recent:
        expected = min(expected, t + (snap.total - len(ended)) * (t / 2) / recent)
    return expected


def too_late(snap: Snapshot, rule: Rule) -> bool:
    """A stop now would save less than `rule.min_saving` of the run's expected workload time:
    the smaller of this run's own estimate (`expected_workload_s`) and the study's full runs'
    length (`rule.expected_s`), so that a late stop is ruled out when either says so."""
    found = [e for e in (expected_workload_s(snap), rule.expected_s) if e is not None]
    if not found:
        return False
    expected = min(found)
    return expected - snap.elapsed_s < rule.min_saving * expected


def decide(snap: Snapshot, rule: Rule) -> Decision:
    """Stop (with the reason) or go on, at one checkpoint. Never in the last `min_saving` of
    the expected run: a stop there saves little and throws away an almost whole measurement."""
    if too_late(snap, rule):
        return GO_ON
    queue = snap.waiting_first_token
    last = snap.engine[-1] if snap.engine else None
    over = overloaded(snap, rule.queue_growth)
    evidence = f"; {queue} request(s) still wait for a first token" if queue else ""
    if last is not None:
        evidence += f"; engine: {last.describe()}"
    if over:
        evidence += f"; {over}"
    for slo in rule.slos:
        if not slo.upper or not _LATENCY.match(slo.metric):
            continue
        bound = metric_bound(snap, slo.metric)
        if bound is not None and (bound > slo.value or (slo.op == "<" and bound >= slo.value)):
            return Decision(
                True,
                f"SLO {slo} broken for sure: {slo.metric} is at least {bound:.0f} ms after "
                f"{snap.elapsed_s:.1f} s ({snap.completed} of {snap.total} requests done)"
                f"{evidence}",
                last,
                censored={str(slo): max(slo.violation({slo.metric: bound}), 1e-6)},
                sent_fraction=len(snap.sent) / snap.total,
            )
    stopped = backlog_stop(snap, rule.slos, evidence) if rule.backlog else None
    if stopped is not None:
        return stopped
    if rule.weights is None or rule.reference is None or rule.incumbent is None:
        return GO_ON
    early = snap.completed < rule.min_completed or snap.completed < rule.min_fraction * snap.total
    if early and not over:  # overload evidence ends the wait; the bound still decides
        return GO_ON
    bound = score_bound(snap, rule.weights, rule.reference)
    if bound > rule.incumbent + rule.margin:
        return Decision(
            True,
            f"cannot beat the best trial: its score will be at least {bound:+.3f}, the best "
            f"is {rule.incumbent:+.3f} ({snap.completed} of {snap.total} requests done after "
            f"{snap.elapsed_s:.1f} s){evidence}",
            last,
            score_bound=bound,
            sent_fraction=len(snap.sent) / snap.total,
        )
    return GO_ON


def backlog_stop(snap: Snapshot, slos: Sequence[SloLimit], evidence: str) -> Decision | None:
    """Rule (c): a percentile SLO on TTFT or E2EL that the queue's growth already breaks
    (`backlog.percentile_bound_ms`), taken only while the engine's gauges show pressure."""
    seen = backlog.pressure(snap.engine)
    if seen is None:
        return None
    for slo in slos:
        m = _LATENCY.match(slo.metric)
        if not slo.upper or not m or m.group(1) == "mean" or m.group(3) == "tpot":
            continue
        q = 50.0 if m.group(1) == "median" else float(m.group(2))
        bound = backlog.percentile_bound_ms(snap, m.group(3), q)
        if bound is None or not (bound > slo.value or (slo.op == "<" and bound >= slo.value)):
            continue
        pending = snap.waiting_first_token + snap.total - len(snap.sent)
        return Decision(
            True,
            f"SLO {slo} broken by queue growth: {slo.metric} will be at least {bound:.0f} ms, "
            f"{pending} request(s) not yet served after {snap.elapsed_s:.1f} s "
            f"({len(snap.sent)} of {snap.total} sent) and {seen}{evidence}",
            snap.engine[-1],
            censored={str(slo): max(slo.violation({slo.metric: bound}), 1e-6)},
            sent_fraction=len(snap.sent) / snap.total,
            backlog_bound_ms=bound,
        )
    return None


class Checkpoints:
    """When to check: every `every_s` seconds of the workload and, if set, each time another
    `every_requests` requests have completed. A real run asks `due` at every watchdog poll,
    `replay` at each instant a checkpoint could fall on: the same schedule in both."""

    def __init__(self, every_s: float, every_requests: int | None = None) -> None:
        self.every_s, self.every_requests = every_s, every_requests
        self.next_s = every_s
        self.next_completed = every_requests or 0

    def due(self, elapsed_s: float, completed: int) -> bool:
        hit = False
        if elapsed_s >= self.next_s:
            hit, self.next_s = True, elapsed_s + self.every_s
        if self.every_requests and completed >= self.next_completed:
            hit = True
            self.next_completed = (completed // self.every_requests + 1) * self.every_requests
        return hit


def replay(
    records: Sequence[RequestRecord],
    every_s: float,
    every_requests: int | None = None,
    engine: Sequence[EngineSample] = (),
    *,
    max_output_tokens: int | None = None,
    input_tokens: int | None = None,
    arrivals_s: Sequence[float] | None = None,
) -> Iterator[tuple[float, Snapshot]]:
    """Snapshots of a finished run as they stood at each checkpoint (virtual time, for
    `tuner plan`): a request is sent at its start, has its first token at start + TTFT, is
    done at start + E2EL. `engine`: the simulated engine's state after each of its steps, in
    time order; a checkpoint scrapes the latest one. Yields (time, snapshot) until the end."""
    end = max((r.start_s + r.latency_s for r in records), default=0.0)
    finished = sorted(r.start_s + r.latency_s for r in records if r.success)
    instants = []
    t = every_s
    while t < end:
        instants.append(t)
        t += every_s
    if every_requests:
        instants += [f for f in finished if f < end]
    engine_t = [e.t_s for e in engine]
    schedule, scraped = Checkpoints(every_s, every_requests), []
    for t in sorted(set(instants)):
        if not schedule.due(t, bisect.bisect_right(finished, t)):
            continue
        k = bisect.bisect_right(engine_t, t)
        if k:
            scraped.append(replace(engine[k - 1], t_s=t))
        sent, done = [], []
        for r in records:
            if r.start_s > t:
                continue
            over = r.start_s + r.latency_s <= t
            live = r
            if not over:
                first = r.ttft_s if r.success and r.start_s + r.ttft_s <= t else 0.0
                live = RequestRecord(prompt_len=r.prompt_len, start_s=r.start_s, ttft_s=first)
            sent.append(live)
            done.append(over)
        yield (
            t,
            Snapshot(
                sent,
                done,
                len(records),
                t,
                max_output_tokens=max_output_tokens,
                input_tokens=input_tokens,
                engine=list(scraped),
                arrivals_s=arrivals_s,
            ),
        )
