"""The night's cost counts the start-up of the engine the study runs, and says whose (issue 32
§6, docs/preflight.md); a multi-fidelity study's line names the screen's time too."""

from __future__ import annotations

from results_fixtures import frozen

from tuner.run.cost import NightCost, night_cost
from tuner.spec.study import load_study_spec
from tuner.trial import read
from tuner.trial.uptime import SIM_STARTUP_S, simulated_engine_startup_s
from tuner_testing.cli import REPO

# `make demo` measured here (docs/preflight.md, 5 Dec 2026): 6 trials of 33-34 s each on the
# simulated engine, 2-4 s of it the engine's start-up.
DEMO_TRIAL_S = 34.0


def test_make_demo_announces_its_own_trials_within_30_percent() -> None:
    """It announced `6 trial(s) × ~115 s = 11 min` (a real engine's 88 s start-up each) for
    trials that took 34 s."""
    cost = night_cost(load_study_spec(REPO / "studies" / "demo-sim.yaml"))
    assert cost.simulated and cost.trial_s is not None
    assert abs(cost.trial_s / DEMO_TRIAL_S - 1) <= 0.30, cost.line()
    assert cost.startup_s == SIM_STARTUP_S + 1  # the demo's `load-delay-s: 1`
    line = cost.line()
    assert "start-up ~3 s per trial: the simulated engine's, measured" in line, line
    assert "the multi-fidelity screen's time choosing each trial (not yet measured)" in line


def test_the_simulated_engine_s_start_up_is_its_own_plus_its_load_delay() -> None:
    assert simulated_engine_startup_s({}) == SIM_STARTUP_S
    assert simulated_engine_startup_s({"load-delay-s": 5}) == SIM_STARTUP_S + 5
    assert simulated_engine_startup_s({"load-delay-s": "x"}) == SIM_STARTUP_S


def test_a_measured_screen_time_counts_in_the_night() -> None:
    cost = NightCost(6, 30.0, "trials", 240.0, startup_s=3.0, startup_source="measured",
                     screen_s=20.0, screened=True)  # fmt: skip
    assert cost.total_s == 300.0 and not cost.fits and cost.trials_in_timeout == 4
    line = cost.line()
    assert "6 trial(s) × ~30 s = 3 min of engine time (trials; start-up ~3 s per trial" in line
    assert "and ~20 s a trial choosing it (the multi-fidelity screen, measured on them)" in line
    assert "5 min in all; timeout 4 min allows about 4 trial(s)" in line
    single = NightCost(6, 30.0, "trials")
    assert "screen" not in single.line() and single.total_s == 180.0


def test_an_interrupted_trial_is_no_estimate_of_a_trial() -> None:
    """Resumed after a Ctrl-C 9 s into the baseline, the run announced "~9 s a trial (the mean
    of 1 launched trial(s))": the engine time of a trial cut short by the user."""
    spec = load_study_spec(REPO / "studies" / "demo-sim.yaml")
    cut = read(frozen(0, "FAIL", engine_s=9.0, failure_kind="interrupted", baseline=True))
    whole = read(frozen(1, engine_s=30.0, startup_s=3.0, score=0.0, baseline=True))
    assert cut.interrupted and not whole.interrupted
    assert night_cost(spec, real_trials=[cut, whole]).trial_s == 30.0
    alone = night_cost(spec, real_trials=[cut])
    assert alone.trial_s != 9.0 and "launched trial" not in alone.line(), alone.line()


def test_a_timeout_shorter_than_one_trial_says_what_the_run_will_do() -> None:
    """`timeout: 1s`: it said "allows about 0 trial(s): lower budget.n_trials to 1"."""
    line = NightCost(2, 10.0, "trials", 1.0).line()
    assert line.endswith(
        "timeout 1 s is shorter than one trial: the run stops after its first (the baseline); "
        "raise budget.timeout"
    ), line
    fits_three = NightCost(6, 30.0, "trials", 100.0).line()
    assert fits_three.endswith(
        "timeout 100 s allows about 3 trial(s): lower budget.n_trials to 3 or raise budget.timeout"
    ), fits_three


def test_the_first_start_s_cold_compile_is_counted_once() -> None:
    """The first engine start of a study compiles cold (docs/engine.md, "Start-up phases"):
    paid once, not by each trial ahead; a later trial's compile counts as its log told it."""
    spec = load_study_spec(REPO / "studies" / "demo-sim.yaml")
    cold = {"compile_s": 40.0, "compile_cached": False, "loading_s": 8.0}
    first = read(frozen(0, engine_s=100.0, startup_s=60.0, score=0.0, startup_phases=cold))
    cached = {**cold, "compile_s": 5.0, "compile_cached": True}
    later = read(frozen(1, engine_s=70.0, startup_s=25.0, score=0.0, startup_phases=cached))
    again = read(frozen(2, engine_s=110.0, startup_s=60.0, score=0.0, startup_phases=cold))
    cost = night_cost(spec, real_trials=[later, first])
    assert cost.trial_s == (100.0 - 40.0 + 70.0) / 2
    assert "the first start's cold compile (40 s) once" in cost.line(), cost.line()
    assert night_cost(spec, real_trials=[first, again]).trial_s == (60.0 + 110.0) / 2
    old = read(frozen(0, engine_s=100.0, startup_s=60.0, score=0.0))  # stored before phases
    assert night_cost(spec, real_trials=[old]).trial_s == 100.0


def test_a_modelled_compile_is_left_out_only_as_far_as_the_start_took() -> None:
    """`tuner sim serve` logs vLLM's phases as modelled (a 40 s cold compile) in a start of
    3 s: its one trial of 11 s read "~0 s", and `check --timeout 1s` of the continued study
    said "fits in the timeout of 1 s" (the fourth round's 1-second timeout, once a trial ran)."""
    spec = load_study_spec(REPO / "studies" / "demo-sim.yaml")
    cold = {"compile_s": 40.0, "compile_cached": False}
    sim = read(frozen(0, engine_s=11.0, startup_s=3.0, score=0.0, startup_phases=cold))
    cost = night_cost(spec, real_trials=[sim], timeout_s=1.0, done=1)
    assert cost.trial_s == 8.0 and "the first start's cold compile (3 s) once" in cost.line()
    assert cost.line().endswith(
        "timeout 1 s is shorter than one trial: the run stops after its first trial; "
        "raise budget.timeout"
    ), cost.line()
