"""Early stopping's rule on hand-made records, on planner traces, and what TPE makes of it."""

from __future__ import annotations

import optuna
import pytest

from tuner.measure.objective import score
from tuner.measure.pruning import (
    Checkpoints,
    EngineSample,
    Rule,
    Snapshot,
    decide,
    expected_workload_s,
    lower_bounds,
    metric_bound,
    overloaded,
    replay,
)
from tuner.measure.records import RequestRecord
from tuner.spec.slo import parse_slo


def _done(start: float, ttft: float, e2el: float, out: int = 10) -> RequestRecord:
    return RequestRecord(
        prompt_len=8, success=True, output_tokens=out, ttft_s=ttft, latency_s=e2el, start_s=start
    )


def _waiting(start: float, ttft: float = 0.0) -> RequestRecord:
    return RequestRecord(prompt_len=8, start_s=start, ttft_s=ttft)


def test_censored_ttft_lower_bound_counts_waiting_requests() -> None:
    sent = [_done(0, 0.1, 1.0), _waiting(1.0), _waiting(2.0, ttft=0.5), _waiting(9.5)]
    snap = Snapshot(sent, [True, False, False, False], total=6, elapsed_s=10.0)
    lb = lower_bounds(snap, "ttft")
    # finished: its TTFT; streaming: its TTFT; no first token: the wait so far; unsent: 0
    assert lb.tolist() == pytest.approx([0.1, 9.0, 0.5, 0.5, 0.0, 0.0])
    assert lower_bounds(snap, "e2el").tolist() == pytest.approx([1.0, 9.0, 8.0, 0.5, 0, 0])


def test_p99_ttft_slo_broken_for_sure_only_when_enough_requests_violate() -> None:
    # 100 requests, P99 with linear interpolation: the value is > L as soon as 2 are > L
    # (np.percentile over 100 values at 99 interpolates x[98] and x[99]).
    slo = parse_slo("p99_ttft_ms<=2000")
    ok = [_done(0.1 * i, 0.1, 0.5) for i in range(10)]
    one = Snapshot([*ok, _waiting(1.0)], [True] * 10 + [False], total=100, elapsed_s=4.0)
    assert metric_bound(one, "p99_ttft_ms") < 2000
    assert not decide(one, Rule(slos=slo)).stop
    two = Snapshot([*ok, _waiting(1.0), _waiting(1.5)], [True] * 10 + [False] * 2, 100, 4.0)
    d = decide(two, Rule(slos=slo))
    assert d.stop and "p99_ttft_ms<=2000" in d.reason and "wait for a first token" in d.reason
    # The same two waits, but not yet past the limit: go on.
    early = Snapshot(two.sent, two.done, 100, elapsed_s=3.0)
    assert not decide(early, Rule(slos=slo)).stop


def test_bound_is_never_above_the_final_value() -> None:
    """Monotonicity: the statistic of the lower bounds never exceeds the final statistic."""
    import numpy as np

    final = [_done(0.2 * i, 0.05 + 0.03 * i, 0.5 + 0.05 * i) for i in range(50)]
    for t in (1.0, 3.0, 6.0, 9.0):
        for _, snap in replay(final, t):
            for name, kind in (("p99_ttft_ms", "ttft"), ("mean_e2el_ms", "e2el")):
                values = [r.ttft_s if kind == "ttft" else r.latency_s for r in final]
                truth = (np.percentile(values, 99) if "p99" in name else np.mean(values)) * 1000
                assert metric_bound(snap, name) <= truth + 1e-9


def test_behind_early_is_not_stopped_and_min_completed_holds() -> None:
    ref = {"p99_ttft_ms": 100.0, "mean_tpot_ms": 10.0, "output_throughput": 100.0}
    w = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    hopeless = [_done(0.1 * i, 5.0, 6.0) for i in range(5)]  # 5 of 100 done, TTFT 5 s
    snap = Snapshot(hopeless, [True] * 5, 100, 6.5, max_output_tokens=1000)
    rule = Rule(weights=w, reference=ref, incumbent=-0.5, min_completed=20, min_fraction=0.2)
    assert not decide(snap, rule).stop  # too few done: the incumbent rule waits
    rule_now = Rule(weights=w, reference=ref, incumbent=-0.5, min_completed=1, min_fraction=0)
    assert decide(snap, rule_now).stop  # 5 TTFTs of 5 s: P99 ≥ 5 s whatever follows
    # Behind on every point estimate (TTFT 150 ms against 100, TPOT 15 ms against 10), but
    # the bounds (unsent requests count 0) still allow a better score: go on.
    behind = [_done(0.1 * i, 0.15, 0.285) for i in range(5)]
    snap = Snapshot(behind, [True] * 5, 100, 6.5, max_output_tokens=1000)
    assert not decide(snap, rule_now).stop
    many = [_done(0.01 * i, 5.0, 6.0) for i in range(60)]
    snap = Snapshot(many, [True] * 60, 100, 10.0, max_output_tokens=1000)
    d = decide(snap, rule_now)
    assert d.stop and "cannot beat" in d.reason
    assert d.score_bound is not None and d.score_bound > -0.5  # what the sampler is told


def test_never_stops_in_the_last_fifth_of_the_expected_run() -> None:
    """A stop must save at least `min_saving` (20 %) of the run's expected workload time.
    90 of 100 done after 10 s: about 0.6 s of 10.6 left (5 %), so the trial runs to the end
    and is scored, though its SLO is broken for sure."""
    slos = parse_slo("p99_ttft_ms<=1000")
    late = Snapshot([_done(0.01 * i, 5.0, 6.0) for i in range(90)], [True] * 90, 100, 10.0)
    # the pace of its second half (all 90 finished after 5 s): 10 s + 10 × 5 s / 90
    assert expected_workload_s(late) == pytest.approx(10 + 10 * 5 / 90)
    assert not decide(late, Rule(slos=slos)).stop
    assert decide(late, Rule(slos=slos, min_saving=0.0)).stop  # the rule, not the bound
    # 50 of 100 after 10 s: 5 s of 15 left (33 %), the stop pays, and says what it learnt
    early = Snapshot([_done(0.01 * i, 5.0, 6.0) for i in range(50)], [True] * 50, 100, 10.0)
    d = decide(early, Rule(slos=slos))
    assert d.stop and d.censored == {"p99_ttft_ms<=1000": pytest.approx(4.0)}


def test_never_stops_a_trace_whose_full_run_beats_the_incumbent(tiny_model_dir) -> None:
    """Planner traces over a grid of configs: every trial that would finish better than the
    incumbent (at every incumbent the grid has) runs to the end."""
    from tuner.measure.metrics import compute_metrics
    from tuner.sim.planner import simulate
    from tuner.workload.schedule import arrival_times

    n = 60
    prompts, outs = [512] * n, [128] * n
    arrivals = [float(t) for t in arrival_times(n, 12.0, 1.0, 0)]
    base = {"tensor-parallel-size": 4, "max-model-len": 4096, "gpu-memory-utilization": 0.9}
    traces = []
    for seqs in (1, 2, 4, 16, 64, 256):
        for mbt in (512, 2048, 8192):
            flags = {**base, "max-num-seqs": seqs, "max-num-batched-tokens": max(mbt, seqs)}
            sim = simulate("deepseek-r1-distill-qwen-32b", "a6000", flags, prompts, outs, arrivals)
            m = compute_metrics(
                sim.records, sim.duration_s, selected_metrics=["ttft", "tpot"], percentiles=[99]
            )
            engine = [EngineSample(*row) for row in sim.engine_trace]
            traces.append((sim.records, m, engine))
    w = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    ref = traces[-1][1]
    scores = [score(m, ref, w) for _, m, _ in traces]
    stopped = 0
    for incumbent in sorted(scores):
        rule = Rule(weights=w, reference=ref, incumbent=incumbent, min_completed=10)
        for (records, _, engine), final in zip(traces, scores, strict=True):
            # Time checkpoints alone; and with request-count ones and the engine's queue
            # (overload ends the min_completed wait: still never a stop of a winner).
            stops = [
                t
                for every_n, gauges in ((None, ()), (5, engine))
                for t, snap in replay(records, 2.0, every_n, gauges, max_output_tokens=sum(outs))
                if decide(snap, rule).stop
            ]
            if final < incumbent:
                assert not stops, (
                    f"stopped a trial that beats the incumbent ({final} < {incumbent})"
                )
            stopped += bool(stops)
    assert stopped > 0  # the rule does stop hopeless ones: this test can fail both ways
    overloads = sum(
        any(overloaded(snap, 8) for _, snap in replay(records, 1.0, engine=engine))
        for records, _, engine in traces
    )
    assert overloads > 0  # the queue evidence was there (12 req/s overloads 4×A6000 here)
    light = [float(t) for t in arrival_times(n, 1.0, 1.0, 0)]
    flags = {**base, "max-num-seqs": 256, "max-num-batched-tokens": 8192}
    sim = simulate("deepseek-r1-distill-qwen-32b", "a6000", flags, prompts, outs, light)
    engine = [EngineSample(*row) for row in sim.engine_trace]
    assert not any(overloaded(snap, 8) for _, snap in replay(sim.records, 1.0, engine=engine))


def test_tpe_puts_a_pruned_trial_with_a_constraint_in_the_bad_group() -> None:
    """How the sampler learns: PRUNED plus constraint `pruned`=1 is infeasible to TPE, so it
    lands in the "above" (bad) group even when its partial value would look good."""
    from optuna.samplers._tpe.sampler import _split_trials  # what TPESampler uses to split

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for i in range(6):
        study.add_trial(
            optuna.trial.create_trial(params={"x": i / 10}, distributions=dist, value=float(i))
        )
    t = study.ask(dist)
    study._storage.set_trial_system_attr(t._trial_id, "constraints:pruned", 1.0)
    t.report(-100.0, 0)  # even a tempting intermediate value
    study.tell(t, state=optuna.trial.TrialState.PRUNED)
    trials = study.get_trials(deepcopy=False)
    pruned = trials[-1]
    assert pruned.state == optuna.trial.TrialState.PRUNED
    below, above = _split_trials(study, trials, n_below=3)
    assert pruned in above and pruned not in below
    # Without the constraint the same trial would count as promising: the constraint matters.
    study2 = optuna.create_study()
    for tr_ in trials[:-1]:
        study2.add_trial(tr_)
    t2 = study2.ask(dist)
    t2.report(-100.0, 0)
    study2.tell(t2, state=optuna.trial.TrialState.PRUNED)
    below2, _ = _split_trials(study2, study2.get_trials(deepcopy=False), n_below=7)
    assert study2.get_trials(deepcopy=False)[-1] in below2


def test_a_pruned_trial_is_never_a_candidate() -> None:
    """`best`, `export`, the report and `--confirm` share `ranked`: a pruned trial with a
    tempting partial score never enters it."""
    from types import SimpleNamespace

    from tuner.trial import best, ranked, read

    def trial(n: int, state: str, score: float) -> SimpleNamespace:
        return SimpleNamespace(
            number=n,
            state=SimpleNamespace(name=state),
            params={"x": n},
            user_attrs={"score": score, "p99_ttft_ms": 10.0, "partial": state == "PRUNED"},
            system_attrs={"constraints:pruned": 1.0} if state == "PRUNED" else {},
            values=[score] if state == "COMPLETE" else None,
        )

    points = [read(trial(0, "COMPLETE", 0.0)), read(trial(1, "PRUNED", -5.0))]
    assert points[1].status == "pruned"
    assert [p.number for p in ranked(points)] == [0]
    assert best(points).number == 0


def test_checkpoints_every_n_completed_requests_as_well_as_every_few_seconds() -> None:
    every = Checkpoints(10.0, every_requests=5)
    assert not every.due(1.0, 4)
    assert every.due(1.5, 5)  # the 5th completion
    assert not every.due(2.0, 7)
    assert every.due(2.5, 12)  # past 10: the next is at 15, not 11
    assert not every.due(3.0, 14)
    assert every.due(10.0, 14)  # and the clock still ticks
    assert not Checkpoints(10.0).due(9.9, 1000)  # no request count: time only


def test_replay_checks_at_each_nth_completion_in_virtual_time() -> None:
    records = [_done(0.5 * i, 0.1, 0.3) for i in range(20)]  # request i done at 0.5 i + 0.3
    times = [t for t, _ in replay(records, 100.0, every_requests=4)]
    assert times == pytest.approx([0.5 * i + 0.3 for i in (3, 7, 11, 15)])  # the 4th, 8th, ...
    for t, snap in replay(records, 100.0, every_requests=4):
        assert snap.completed % 4 == 0 and snap.elapsed_s == t
    both = [t for t, _ in replay(records, 2.0, every_requests=4)]
    assert sorted(both) == both and {2.0, 4.0, 6.0, 8.0} <= set(both) and 1.8 in both


def test_replay_scrapes_the_latest_engine_state_at_each_checkpoint() -> None:
    records = [_done(0.5 * i, 0.1, 0.3) for i in range(20)]
    trace = [EngineSample(0.0, 0, 0.0, 0), EngineSample(1.9, 3, 0.5, 1), EngineSample(4.5, 9)]
    snaps = [snap for _, snap in replay(records, 2.0, engine=trace)]
    assert [(e.t_s, e.waiting) for e in snaps[0].engine] == [(2.0, 3)]
    assert [(e.t_s, e.waiting) for e in snaps[2].engine] == [(2.0, 3), (4.0, 3), (6.0, 9)]


def _queue(waits: list[int], every_s: float = 2.0) -> list[EngineSample]:
    return [EngineSample(every_s * (k + 1), q, 0.9, 0) for k, q in enumerate(waits)]


def test_overload_needs_a_queue_that_keeps_growing_while_requests_still_arrive() -> None:
    sent = [_waiting(0.1 * i) for i in range(40)]
    snap = Snapshot(sent, [False] * 40, total=100, elapsed_s=8.0, engine=_queue([2, 6, 11, 17]))
    assert "grew from 2 to 17" in overloaded(snap, growth=8)
    assert overloaded(snap, growth=20) is None  # not enough growth
    for waits in ([2, 3], [17, 11, 6, 2], [2, 17, 11, 9], [5, 5, 5, 5]):
        flat = Snapshot(sent, [False] * 40, 100, 8.0, engine=_queue(waits))
        assert overloaded(flat, growth=2) is None, waits  # too short, shrinking, past its top
    # Every request sent by 3.9 s: the samples after that are no arrival-rate evidence.
    all_sent = Snapshot(sent, [False] * 40, 40, 8.0, engine=_queue([2, 6, 11, 17]))
    assert overloaded(all_sent, growth=8) is None


def test_overload_ends_the_wait_but_never_stops_a_trial_that_can_still_win() -> None:
    ref = {"p99_ttft_ms": 100.0, "mean_tpot_ms": 10.0, "output_throughput": 100.0}
    w = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    slow = [_done(0.1 * i, 5.0, 6.0) for i in range(5)] + [
        _waiting(1.0 + 0.1 * i) for i in range(30)
    ]
    growing = _queue([3, 9, 16, 24])
    rule = Rule(weights=w, reference=ref, incumbent=-0.5, min_completed=20, min_fraction=0.2)
    done = [True] * 5 + [False] * 30
    assert not decide(Snapshot(slow, done, 100, 8.0, max_output_tokens=1000), rule).stop
    d = decide(Snapshot(slow, done, 100, 8.0, max_output_tokens=1000, engine=growing), rule)
    assert d.stop and "cannot beat" in d.reason and "overloaded at this rate" in d.reason
    assert "24 waiting in the engine's queue" in d.reason and d.engine == growing[-1]
    # The same overload, but the bound still allows a better score: it runs on.
    hopeful = Rule(weights=w, reference=ref, incumbent=50.0, min_completed=20)
    snap = Snapshot(slow, done, 100, 8.0, max_output_tokens=1000, engine=growing)
    assert not decide(snap, hopeful).stop
    # An SLO stop names the engine's figures too (the bound decided, not the queue).
    d = decide(snap, Rule(slos=parse_slo("p99_ttft_ms<=2000")))
    assert d.stop and "engine: 24 waiting" in d.reason and "KV cache 90% used" in d.reason


def test_the_study_samplers_tpe_steers_away_from_pruned_regions() -> None:
    """Behaviour, not internals: trials told the way the study loop tells a stopped one
    (StudyLoop._tell: constraint pruned=1, state PRUNED) make the study's own TPE sampler
    (tuner.run.sampling.make_sampler) propose less in their region than if it had never heard
    of them (told FAIL, which TPE ignores): they count as bad, not as missing."""
    from types import SimpleNamespace

    from tuner.run.loop import StudyLoop
    from tuner.run.pipeline import Outcome
    from tuner.run.reading import StudyReading
    from tuner.run.sampling import make_sampler
    from tuner.spec.study import StudySpec
    from tuner.trial import TrialRecord

    def share_in_pruned_region(seed: int, told_pruned: bool) -> float:
        spec = StudySpec.model_validate(
            {
                "name": "s",
                "engine": {"model": "m"},
                "search_space": {"parameters": {"x": {"type": "float", "low": 0, "high": 1}}},
                "workload": {},
                "sampler": {"name": "tpe", "seed": seed},
            }
        )
        study = optuna.create_study(sampler=make_sampler(spec))
        late = []
        for k in range(60):
            trial = study.ask()
            x = trial.suggest_float("x", 0, 1)
            if x >= 0.4:  # feasible, the score best next to the stopped region
                record = TrialRecord(score=x - 0.4)
                outcome = Outcome("measured", [x - 0.4], {"pruned": 0.0}, record)
            elif told_pruned:
                record = TrialRecord(pruned_reason="SLO broken for sure", partial=True)
                outcome = Outcome("pruned", None, {"pruned": 1.0}, record)
            else:
                outcome = Outcome("failed", None, {}, TrialRecord())
            loop = SimpleNamespace(study=study, reading=StudyReading(study), judging=None)
            StudyLoop._tell(loop, trial, outcome)  # type: ignore[arg-type]
            if k >= 20:
                late.append(x < 0.4)
        return sum(late) / len(late)

    avoided = [share_in_pruned_region(s, True) for s in range(3)]
    unknown = [share_in_pruned_region(s, False) for s in range(3)]
    assert sum(avoided) < sum(unknown) - 1.0, (avoided, unknown)  # about 0.43 against 0.99
