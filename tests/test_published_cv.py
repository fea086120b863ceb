"""benchmarks/published_cv.py's pure parts: sources, regimes, the fit's profiles, the bands."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cv():
    """benchmarks/published_cv.py as a module (it finds its sibling scripts itself)."""
    benchmarks = str(REPO / "benchmarks")
    sys.path.insert(0, benchmarks)
    try:
        return importlib.import_module("published_cv")
    finally:
        while benchmarks in sys.path:
            sys.path.remove(benchmarks)


def test_every_v1_case_has_a_source_and_a_regime_and_a_fold_leaves_gpus_to_priors(cv):
    cases = [c for c in cv.suite.load_cases()["cases"] if c["engine"] == "V1"]
    by_source: dict[str, set] = {}
    for case in cases:
        assert cv.regime_of(case) in cv.REGIMES
        by_source.setdefault(cv.source_of(case), set()).add(case["gpu"])
    assert len(by_source) >= 3
    # GPUStack's H100 PCIe runs are the only ones on that GPU: held out, it is from priors
    # (its A100 runs share the GPU with dennislee22's since the suite widened)
    others = set().union(*(g for s, g in by_source.items() if s != "gpustack/gpustack"))
    assert "h100-pcie" in by_source["gpustack/gpustack"] - others


def test_regimes(cv):
    work = {"dataset": "random", "input_len": 200, "output_len": 100}
    assert cv.regime_of({"workload": work | {"max_concurrency": 1}}) == "light"
    assert cv.regime_of({"workload": work | {"max_concurrency": 8}}) == "closed_loop"
    assert cv.regime_of({"workload": work | {"request_rate": 4.0}}) == "poisson"
    assert cv.regime_of({"workload": work | {"request_rate": math.inf}}) == "burst"
    assert cv.regime_of({"workload": work | {"input_len": 32000}}) == "long_context"


def test_a_gpu_the_fit_never_saw_gets_its_datasheet_and_the_global_constants(cv):
    fit = cv.Fit(cv.FITTED, ["a6000"])
    fit.x[: len(cv.FITTED)] = [math.log(0.5), 0.0, math.log(5.0), 2.0]
    fit.x[len(cv.FITTED)] = math.log(2.0)  # the A6000's own compute: twice the global
    unseen = fit.profile("h100").constants
    assert unseen.flops_efficiency == pytest.approx(0.3)  # 0.6 (CUDA default) x 0.5
    assert unseen.request_overhead_s == pytest.approx(0.010)
    assert unseen.frontend_latency_s == pytest.approx(0.020)
    assert fit.profile("h100").flops == cv.GPUS["h100"].flops  # the datasheet's peak
    assert fit.profile("a6000").constants.flops_efficiency == pytest.approx(0.6)


def test_bands_are_the_held_out_ratios_10th_to_90th_percentile(cv):
    ratios = [0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2.0]  # SIMULATED / published
    rows = [{"regime": "burst", "metric": "mean_ttft_ms", "ratio": r} for r in ratios]
    band = cv.bands(rows)["burst"]["ttft"]
    inverse = [1 / r for r in ratios]
    assert band["published_over_simulated_p10"] == pytest.approx(np.percentile(inverse, 10), 1e-3)
    assert band["p90"] == pytest.approx(np.percentile(inverse, 90), abs=1e-3)
    assert band["median"] == 1.0 and band["figures"] == 7
