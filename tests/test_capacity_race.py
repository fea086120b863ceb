"""Capacity mode's race against the incumbent (issue 47, docs/objective.md "The race"): a
config that breaks at the race's rate is a finished trial "below X", one that holds is
searched on within its step budget; and the night's cost counts the first trial apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_capacity_bracket import _capacity_spec

from tuner.measure.capacity import INTERVAL_RUNS, Beat, race_rps
from tuner.run.cost import NightCost, length_only_runner
from tuner.runners.trial_runner import TrialContext
from tuner.trial.words import rate


def _found(spec, params, beat=None):  # type: ignore[no-untyped-def]
    ctx = TrialContext(spec.name, 0, params, phase=lambda _: None, beat=beat)
    m = length_only_runner(spec).measure(ctx)
    assert m.capacity is not None, m.failure_reason
    return m


def test_a_lost_race_is_a_finished_trial_below_the_race_s_rate(tiny_model_dir: Path) -> None:
    # this config's capacity is ~10 req/s (SIMULATED); the incumbent broke only at 15
    spec = _capacity_spec(tiny_model_dir, max_runs=8, max_repeats=2)
    beat = Beat(5.0, 5.0, best_high_rps=15.0)
    assert race_rps(beat, spec.objective.search.resolution) == 15.0
    m = _found(spec, {"max-num-seqs": 256}, beat)
    found = m.capacity
    assert found is not None and not m.pruned_reason  # finished, not PRUNED
    assert [s.rate_rps for s in m.rate_steps] == [15.0] and found.runs == 1
    assert found.capacity_rps == 0 and found.interval == (0.0, 15.0)  # "below X", no point
    assert rate(found.capacity_rps, False, found.interval) == "below 15 req/s (0-15)"


def test_a_held_race_gets_its_own_search_within_the_step_budget(tiny_model_dir: Path) -> None:
    """Held at the race's rate, the config is searched as if unraced (issue 50 item 1's
    invariant): its capacity at least the rate it held, its runs within `max_steps`, the
    race's run counted in it, and the interval's runs of a capacity found (`interval_runs`)."""
    spec = _capacity_spec(tiny_model_dir, max_runs=8, max_repeats=2, max_steps=3)
    beat = Beat(2.0, 1.0)  # an incumbent far below it: it holds the race at 2.1
    m = _found(spec, {"max-num-seqs": 256}, beat)
    found = m.capacity
    assert found is not None and m.rate_steps[0].rate_rps == pytest.approx(2.1)
    assert m.rate_steps[0].feasible and found.capacity_rps >= 2.1
    # the race and its own search within the budget, the interval's runs past it
    assert 2 + INTERVAL_RUNS <= found.runs <= 3 + INTERVAL_RUNS


def test_the_night_counts_the_first_trial_apart_and_the_plan_s_start_ups() -> None:
    # the baseline searched whole (2 h), each later config racing it (10 min + 3 s start)
    cost = NightCost(30, 603.0, "s", 8 * 3600.0, True, 3.0, first_s=7200.0,
                     planned_startup_s=88.0)  # fmt: skip
    assert cost.total_s == pytest.approx(7200 + 29 * 603)
    assert cost.trials_in(8 * 3600.0) == 1 + ((8 * 3600 - 7200) // 603)
    # as `tuner plan` counts the night: a real engine's start-up each
    assert cost.trials_in(8 * 3600.0, as_planned=True) == 1 + ((8 * 3600 - 7285) // 688)
    assert "30 trial(s): ~2.0 h (the first, searched whole) + 29 × ~10 min" in cost.line()
    assert cost.trials_in(3600.0) == 0  # the first trial alone is longer
    done = NightCost(30, 603.0, "s", None, first_s=7200.0, done=3)  # the first is done
    assert done.total_s == pytest.approx(30 * 603)


def test_init_gives_long_documents_a_step_budget() -> None:
    """A longdoc step sends for minutes: `tuner init` writes `capacity.max_steps` for it."""
    from tuner.scaffold.options import InitOptions
    from tuner.scaffold.study import LONGDOC_STEPS, _objective
    from tuner.scaffold.traffic import traffic

    longdoc = _objective(InitOptions(traffic="longdoc"), traffic("longdoc", 35584, None))
    assert longdoc["capacity"] == {"max_steps": LONGDOC_STEPS} and LONGDOC_STEPS == 4
    chat = _objective(InitOptions(objective="capacity"), traffic("chat", 4096, None))
    assert "capacity" not in chat  # steps of seconds: the default budget
