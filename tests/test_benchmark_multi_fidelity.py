"""The hidden-truth benchmarks (benchmarks/multi_fidelity*.py) measure the screen, not TPE.

Until this test, `TruthRunner` set a runner attribute that no longer existed (`simulated`,
renamed `planned`): the loop took the truth runner for a plan and never screened, so the
benchmark's "multi-fidelity" row was TPE (docs/multi-fidelity.md, "Why the screen stopped
helping")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tuner.sim.profile_file import read_profile
from tuner.sim.profiles import get_gpu
from tuner_testing import REPO


def _load(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@pytest.mark.slow  # a two-trial study with its calibration and screen (~10 s, 45 s loaded)
def test_the_truth_runner_is_screened_and_each_truth_is_the_stock_profile_scaled(
    tmp_path: Path,
) -> None:
    truths = _load("multi_fidelity_truths")
    path = truths.truth_file("compute-2x+bw-0.64", tmp_path)
    truth, stock = read_profile(path), get_gpu("a6000")
    speed = truth.flops * truth.constants.flops_efficiency
    assert speed == pytest.approx(0.5 * stock.flops * stock.constants.flops_efficiency)
    assert truth.constants.step_overhead_s == stock.constants.step_overhead_s

    bench = _load("multi_fidelity")
    assert bench.TruthRunner.planned is False
    result, _ = bench.study("multi", 0, 2, tmp_path, path, candidates=8)
    screened = [p for p in result.points if p.record.screen is not None]
    assert len(result.points) == 2 and len(screened) == 1  # the baseline, then the screen's
