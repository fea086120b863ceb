"""Early stopping's rule (c), queue growth (tuner.measure.backlog): a sound lower bound on
the final percentile, on planner traces; never a stop on the gauges or the projection alone;
and end to end on `tuner sim serve`, an overloaded config stopped in the first quarter of its
workload while configs that meet the SLO run to the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner.measure import backlog
from tuner.measure.pruning import EngineSample, Rule, Snapshot, decide, replay
from tuner.measure.records import RequestRecord
from tuner.spec.slo import parse_slo
from tuner.trial import read_all
from tuner_testing import sim_study, tuner

MODEL, GPU = "deepseek-r1-distill-qwen-32b", "a6000"
BASE = {"tensor-parallel-size": 4, "max-model-len": 8192, "gpu-memory-utilization": 0.9}


def _traces():
    """Planner runs over a grid (rates from light to overloaded, fixed and varied lengths)."""
    from tuner.sim.planner import simulate
    from tuner.workload.schedule import arrival_times

    rng = np.random.default_rng(0)
    n = 48
    shapes = [
        ([512] * n, [128] * n),
        (list(rng.integers(64, 4000, n)), list(rng.integers(8, 400, n))),
    ]
    for rate, burstiness in ((3.0, 1.0), (12.0, 1.0), (30.0, 0.5), (float("inf"), 1.0)):
        arrivals = [float(t) for t in arrival_times(n, rate, burstiness, 0)]
        for prompts, outs in shapes:
            for seqs in (1, 4, 64, 256):
                flags = {**BASE, "max-num-seqs": seqs, "max-num-batched-tokens": 8192}
                sim = simulate(MODEL, GPU, flags, prompts, outs, arrivals)
                yield sim.records, [EngineSample(*row) for row in sim.engine_trace]


def _checkpoints(records, engine, every_s=1.0):
    arrivals = sorted(r.start_s for r in records)
    return replay(records, every_s, None, engine, arrivals_s=arrivals)


@pytest.mark.slow  # a whole study or workload run: `make test`, not `make test-fast`
def test_the_queue_growth_bound_never_exceeds_the_final_percentile() -> None:
    """At every checkpoint of every trace: bound ≤ the run's final P50/P90/P99 TTFT and E2EL;
    and it is worth having: far above rule (a)'s bound on the overloaded traces."""
    from tuner.measure.pruning import metric_bound

    checked = above = 0
    for records, engine in _traces():
        ok = [r for r in records if r.success]
        for _, snap in _checkpoints(records, engine, every_s=2.0):
            for kind, values in (
                ("ttft", [r.ttft_s for r in ok]),
                ("e2el", [r.latency_s for r in ok]),
            ):
                for q in (50, 99):
                    bound = backlog.percentile_bound_ms(snap, kind, q)
                    if bound is None:
                        continue
                    checked += 1
                    assert bound <= np.percentile(values, q) * 1000 + 1e-6, (
                        kind,
                        q,
                        snap.elapsed_s,
                    )
                    observed = metric_bound(snap, f"p{q}_{kind}_ms")
                    above += bound > 2 * observed + 100
    assert checked > 1000 and above > 100  # the test can fail both ways


def test_a_trace_that_meets_its_slo_is_never_stopped_and_overloaded_ones_are_earlier() -> None:
    """0 false stops over the grid, for SLOs at several limits; rule (c) stops some run
    earlier than rule (a) alone does."""
    earlier = 0
    for records, engine in _traces():
        ttfts = [r.ttft_s * 1000 for r in records if r.success]
        for limit_ms in (500, 2000, 8000):
            for q in (50, 99):
                slo = parse_slo(f"p{q}_ttft_ms<={limit_ms}")
                met = np.percentile(ttfts, q) <= limit_ms
                stops = {}
                for on in (True, False):
                    rule = Rule(slos=slo, backlog=on)
                    stops[on] = next(
                        (t for t, s in _checkpoints(records, engine) if decide(s, rule).stop), None
                    )
                if met:
                    assert stops[True] is None, (limit_ms, q)
                if stops[True] is not None and (stops[False] is None or stops[True] < stops[False]):
                    earlier += 1
    assert earlier > 10


def _record(start: float, ttft: float = 0.0) -> RequestRecord:
    return RequestRecord(prompt_len=8, start_s=start, ttft_s=ttft)


def _backlogged(engine: list[EngineSample]) -> Snapshot:
    """10 s into a 100-request run at 10 req/s: 3 served, 97 to come or waiting."""
    sent = [_record(0.1 * i, ttft=3.0 * i + 0.5 if i < 3 else 0.0) for i in range(100)]
    arrivals = [0.1 * i for i in range(100)]
    return Snapshot(sent, [False] * 100, 100, 10.0, engine=engine, arrivals_s=arrivals)


def test_neither_the_gauges_nor_the_projection_stop_alone() -> None:
    slo = parse_slo("median_ttft_ms<=5000")
    hot = [EngineSample(9.0, 80, 0.97, 2), EngineSample(10.0, 90, 0.99, 5)]
    snap = _backlogged(hot)
    assert backlog.percentile_bound_ms(snap, "ttft", 50) > 5000  # the projection says broken
    d = decide(snap, Rule(slos=slo))
    assert d.stop and "queue growth" in d.reason and "preemptions rose from 2 to 5" in d.reason
    assert d.backlog_bound_ms > 5000 and d.sent_fraction == 1.0
    assert not decide(_backlogged([]), Rule(slos=slo)).stop  # no /metrics: no rule (c)
    calm = [EngineSample(9.0, 90, 0.5, 0), EngineSample(10.0, 80, 0.5, 0)]  # queue shrinking
    assert not decide(_backlogged(calm), Rule(slos=slo)).stop
    # Gauges as hot, but a queue that the engine's pace clears in time: no stop.
    quick = [_record(0.1 * i, ttft=0.05) for i in range(100)]
    light = Snapshot(
        quick, [False] * 100, 100, 10.0, engine=hot, arrivals_s=[0.1 * i for i in range(100)]
    )
    assert not decide(light, Rule(slos=slo)).stop


OVERLOADED = {"parameters": {"max-num-seqs": {"type": "categorical", "choices": [1]}}}
LIMIT_MS = 4000
SLO = f"median_ttft_ms<={LIMIT_MS}"  # rule (a) alone waits for half the requests to wait 4 s
WORKLOAD = {"num_prompts": 64, "request_rate": 16, "random_input_len": 256, "random_output_len": 16}


def _trials(tmp_path: Path):
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path}/tuner.db")
    return [p for p in read_all(study.trials) if "reused_from" not in p.attrs]


@pytest.mark.slow
def test_overload_is_stopped_in_the_first_quarter_on_the_simulated_engine(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload=WORKLOAD,
        search_space=OVERLOADED,
        objective={"slo": [SLO]},
        pruning={"check_every_s": 0.5},
    )
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    stopped = [p for p in _trials(tmp_path) if p.params.get("max-num-seqs") == 1]
    assert stopped and all(p.status == "pruned" for p in stopped)
    full = tuner("run", str(study), "--n-trials", "1", "--no-pruning", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    whole = [
        p for p in _trials(tmp_path) if p.state == "COMPLETE" and p.params.get("max-num-seqs") == 1
    ]
    full_s = whole[-1].attrs["workload_s"]
    for p in stopped:
        attrs = p.attrs
        assert "broken by queue growth" in attrs["pruned_reason"]
        assert "the engine is saturated: its queue grew" in attrs["pruned_reason"]
        assert (
            attrs["pruned_backlog_bound_ms"] > LIMIT_MS and 0 < attrs["pruned_sent_fraction"] <= 1
        )
        assert attrs["pruned_queue_waiting"] >= 1 and attrs["partial"] is True
        # simulated seconds against the full run's (wall s × the suite's time scale)
        assert attrs["pruned_at_s"] < 0.25 * full_s * 4, (attrs["pruned_at_s"], full_s)


@pytest.mark.slow
def test_configs_that_meet_the_slo_are_never_stopped(tmp_path: Path, tiny_model_dir: Path) -> None:
    space = {"parameters": {"max-num-seqs": {"type": "categorical", "choices": [16, 64, 256]}}}
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        workload={**WORKLOAD, "num_prompts": 24, "request_rate": 4},
        search_space=space,
        objective={"slo": ["p99_ttft_ms<=2000", "median_ttft_ms<=1000"]},
        pruning={"check_every_s": 0.5},
    )
    run = tuner("run", str(study), "--n-trials", "3", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    trials = _trials(tmp_path)
    assert len(trials) >= 3
    assert all(p.status != "pruned" and p.state == "COMPLETE" for p in trials), [
        (p.params, p.attrs.get("pruned_reason")) for p in trials
    ]
    assert all(p.metrics["p99_ttft_ms"] <= 2000 for p in trials)  # they do meet it
