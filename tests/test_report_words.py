"""The report says what its figures can say (issue 46, item 5): one "What to deploy" row for
the selections that chose the same trial, no importance bars that cannot rank the flags, and
no library warning on stderr."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import optuna
from results_fixtures import write_study_file

from tuner import trial as tr
from tuner.measure.mixes import objective_of
from tuner.results.report.deploy import best_commands
from tuner.results.report.plots import importances
from tuner.spec.study import load_study_spec

SEQS = optuna.distributions.IntDistribution(8, 256)
BLOCK = optuna.distributions.CategoricalDistribution([16, 32])


def _study(scores: list[float]) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    for i, score in enumerate(scores):
        study.add_trial(
            optuna.trial.create_trial(
                params={"max-num-seqs": 8 + 16 * i, "block-size": [16, 32][i % 2]},
                distributions={"max-num-seqs": SEQS, "block-size": BLOCK},
                value=score,
                user_attrs={tr.BASELINE: i == 0, tr.SCORE: score},
            )
        )
    return study


def test_no_bars_when_the_trials_cannot_rank_the_flags() -> None:
    """Twelve trials with one score: Optuna's PED-ANOVA would draw equal bars and warn on
    stderr; the report says why there are none, and nothing reaches stderr."""
    study = _study([0.0] * 12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning that escapes fails the test
        found = importances(study, tr.read_all(study.get_trials()))
    assert isinstance(found, str) and "cannot rank the parameters" in found
    ranked = _study([0.1 * ((i * 7) % 12) for i in range(12)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = importances(ranked, tr.read_all(ranked.get_trials()))
    assert isinstance(values, dict) and len(set(values.values())) == 2


def test_one_row_for_the_selections_that_chose_the_same_trial(tmp_path: Path) -> None:
    """The study's two SLOs give four selections (none, each, both); the best trial meets
    both, so all four chose it: one row, its titles joined, and one card."""
    spec = load_study_spec(write_study_file(tmp_path))
    study = optuna.create_study(direction="minimize")
    for i, (ttft, tpot) in enumerate([(1500.0, 60.0), (1200.0, 50.0)]):
        attrs = {tr.BASELINE: i == 0, tr.SCORE: -0.1 * i}
        figures = {"p99_ttft_ms": ttft, "mean_tpot_ms": tpot, "output_throughput": 900.0}
        study.add_trial(
            optuna.trial.create_trial(
                params={"max-num-seqs": 8 + i},
                distributions={"max-num-seqs": SEQS},
                value=-0.1 * i,
                user_attrs={**attrs, **figures},
            )
        )
    points = tr.read_all(study.get_trials())
    page = str(best_commands(spec, objective_of(spec), points, "demo", simulated=False))
    rows = re.findall(r'<tr><td class="l">([^<]*)</td>', page)
    assert len(rows) == 1 and rows[0].count("; ") == 3, rows
    assert page.count("<summary>") == 1
