"""Queue growth: a lower bound on the latency percentile a run will end with (pure).

Rule (c) of early stopping. Rule (a) of `tuner.measure.pruning` bounds an unsent request by 0,
so it breaks a P99 or median SLO for sure only late in an overloaded run; this bound also weighs
the requests yet to get a first token, or yet to be sent, against the engine's highest admission
pace. The count, its one assumption and why it holds under any order of service:
docs/early-stopping.md, "The stop rule", (c).

What callers may assume: the bound is sound whenever no later window of `window_s` admits more
than `ADMIT_SAFETY` × `peak` first tokens (a warming engine, or a very different request mix
later, could break that), so a stop on it also needs the engine's gauges to show pressure
(`pressure`); it bounds TTFT and E2EL percentiles, and leaves means and TPOT to rule (a).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tuner.measure.snapshot import EngineSample, Snapshot

ADMIT_SAFETY = 2.0  # later windows may admit up to this many times the busiest one so far
MIN_ADMITTED = 3  # first tokens seen before the engine's pace counts as evidence
WINDOWS = 4  # the window is this fraction of the elapsed time (at least this many seen)
KV_NEAR_FULL = 0.9


def admission_cap(snap: Snapshot) -> tuple[float, float] | None:
    """(most admissions per window assumed possible, window_s), from the first tokens so far;
    None before `MIN_ADMITTED` of them."""
    firsts = np.sort([r.start_s + r.ttft_s for r in snap.sent if r.ttft_s])
    if len(firsts) < MIN_ADMITTED or snap.elapsed_s <= 0:
        return None
    window_s = snap.elapsed_s / WINDOWS
    peak = np.searchsorted(firsts, firsts + window_s, side="right") - np.arange(len(firsts))
    return ADMIT_SAFETY * float(peak.max()), window_s


def _split(snap: Snapshot, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(lower bounds of the admitted requests, arrival times of the pending ones): pending
    are those sent with no first token yet, and those the schedule (`arrivals_s`) will still
    send; without a schedule, unsent requests count 0 (as in rule (a))."""
    t = snap.elapsed_s
    known, pending = [], []
    for r, done in zip(snap.sent, snap.done, strict=True):
        if done and not r.success:
            known.append(0.0)
        elif not r.ttft_s and not done:
            pending.append(r.start_s)
        elif kind == "ttft":
            known.append(r.ttft_s)
        else:
            known.append(r.latency_s if done else max(t - r.start_s, r.ttft_s))
    if snap.arrivals_s is not None:
        pending += list(snap.arrivals_s[len(snap.sent) :])
    return np.array(known), np.sort(np.array(pending, dtype=float))


def count_at_least(
    known: np.ndarray, pending: np.ndarray, t: float, x: float, cap: float, window_s: float
) -> int:
    """A lower bound on how many requests end with a latency ≥ x (seconds, x > 0)."""
    n = int((known >= x).sum())
    if not len(pending):
        return n
    s = np.maximum(t, pending + x)  # the earliest instant each one has waited x
    late = np.arange(1, len(pending) + 1) - cap * np.ceil((s - t) / window_s)
    return n + max(0, math.ceil(float(late.max()) - 1e-9))


def percentile_bound_ms(snap: Snapshot, kind: str, q: float) -> float | None:
    """A lower bound (ms) on the final q-th percentile of TTFT or E2EL over the whole
    workload, from the queue's growth; None when the engine's pace is not known yet."""
    found = admission_cap(snap)
    if found is None:
        return None
    cap, window_s = found
    known, pending = _split(snap, kind)
    need = snap.total - math.floor((snap.total - 1) * q / 100)
    t = snap.elapsed_s

    def holds(x: float) -> bool:
        return count_at_least(known, pending, t, x, cap, window_s) >= need

    last = float(pending.max()) if len(pending) else t
    hi = max(t, last) + window_s * (len(pending) / cap + 2) + float(known.max(initial=0.0))
    lo = 1e-6
    if not holds(lo):
        return 0.0
    for _ in range(40):  # bisection: the count only falls as x grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo * 1000


def pressure(samples: Sequence[EngineSample]) -> str | None:
    """What the engine's own gauges show, in words, when they show pressure: requests wait
    in its queue, and that queue grew since the last scrape, or its KV cache is near full,
    or it preempted since; None otherwise (or with fewer than two scrapes). Never a reason
    to stop on its own."""
    if len(samples) < 2 or samples[-1].waiting < 1:
        return None
    prev, last = samples[-2], samples[-1]
    words = []
    if last.waiting > prev.waiting:
        words.append(f"its queue grew from {prev.waiting} to {last.waiting} since the last scrape")
    if last.kv_cache_usage is not None and last.kv_cache_usage >= KV_NEAR_FULL:
        words.append(f"KV cache {last.kv_cache_usage:.0%} used")
    before, now = prev.preemptions, last.preemptions
    if before is not None and now is not None and now > before:
        words.append(f"preemptions rose from {before} to {now}")
    return "the engine is saturated: " + ", ".join(words) if words else None
