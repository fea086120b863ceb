"""benchmarks/published_cv.py's pure parts: sources, regimes, the fit's profiles, the bands."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.fidelity.bands import REGIMES

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
        assert cv.regime_of(case) in REGIMES
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


def test_a_gpu_the_fit_never_saw_gets_its_datasheet_and_the_global_constants(cv, monkeypatch):
    assert cv.Fit(cv.FITTED, ["a6000"]).generations == []  # no --per-generation: no block
    monkeypatch.setattr(cv, "GENERATIONS", True)
    fit = cv.Fit(cv.FITTED, ["a6000"])
    fit.x[: len(cv.FITTED)] = [math.log(0.5), 0.0, math.log(5.0), 2.0, math.log(2.0), 3.0, 4.0]
    fit.x[fit.at(0, 0)] = math.log(2.0)  # the A6000's own compute: twice the global
    fit.x[fit.at(1, 0) + 1] = math.log(1.1)  # Ampere's bandwidth: 1.1x the global
    unseen = fit.profile("h100").constants  # a Hopper GPU: no generation the fit saw
    assert unseen.flops_efficiency == pytest.approx(0.3)  # 0.6 (CUDA default) x 0.5
    assert unseen.request_overhead_s == pytest.approx(0.010)
    assert unseen.frontend_latency_s == pytest.approx(0.020)
    assert unseen.per_seq_overhead_s == pytest.approx(50e-6)  # 25 µs (CUDA default) x 2
    assert unseen.stream_chunk_s == pytest.approx(30e-6)
    assert unseen.layer_floor_s == pytest.approx(40e-6)
    assert unseen.bandwidth_efficiency == pytest.approx(0.88)  # the CUDA default
    assert fit.profile("h100").flops == cv.GPUS["h100"].flops  # the datasheet's peak
    assert fit.profile("a6000").constants.flops_efficiency == pytest.approx(0.6)
    assert fit.profile("a6000").constants.bandwidth_efficiency == pytest.approx(0.968)
    # with --per-generation, an A100 the fit never saw: the global constants and its
    # generation's (the A6000's) deviation, not the A6000's own
    a100 = fit.profile("a100-80g").constants
    assert a100.flops_efficiency == pytest.approx(0.3)
    assert a100.bandwidth_efficiency == pytest.approx(0.968)
    assert fit.generations == ["ampere"]


class _Analytic:
    """A stand-in suite whose figures are smooth functions of the profile's constants."""

    def metrics(self, case: dict, gpu) -> dict:
        c = gpu.constants
        thr = 100.0 * c.flops_efficiency**0.7 * c.bandwidth_efficiency**0.3
        tpot = (
            10.0 / c.bandwidth_efficiency
            + 1e3 * c.frontend_latency_s
            + 1e5 * c.per_seq_overhead_s
            + 1e5 * c.stream_chunk_s
            + 1e5 * c.layer_floor_s
        )
        return {"output_throughput": thr / (1.0 + c.request_overhead_s), "mean_tpot_ms": tpot}


@pytest.mark.parametrize("per_host", [(), ("frontend_latency", "request_overhead")])
def test_the_structured_jacobian_is_the_plain_finite_difference_one(cv, per_host, monkeypatch):
    """One step of every GPU's deviation at once gives the global column, each GPU's and each
    generation's (a case sees them only through their sum; a host's own front-end factor, its
    cases' only): the same matrix as one step per column."""
    published = {
        "output_throughput": {"value": 50.0, "stat": "total"},
        "mean_tpot_ms": {"value": 30.0, "stat": "mean"},
    }
    cases = [
        {"id": f"c{k}", "gpu": gpu, "published": published, "split": "fit", "engine": "V1"}
        | {"source": {"repo": host}}
        for k, (gpu, host) in enumerate(
            [("a6000", "p"), ("h100", "q"), ("a6000", "q"), ("a100-80g", "p")]
        )
    ]
    s = _Analytic()
    monkeypatch.setattr(cv, "GENERATIONS", True)
    fit = cv.Fit(cv.FITTED, ["a100-80g", "a6000", "h100"], ["p", "q"], cv._per_host(list(per_host)))
    x = fit.x + np.linspace(-0.3, 0.2, len(fit.x))
    got = cv.jacobian(s, fit, cases, x)
    base = cv.residuals(s, fit, cases, x)
    steps = {}
    for k, deviations, step, _ in cv._steps(fit, x):
        for j in ([k] if k is not None else []) + [
            j for d in deviations for j in fit.column_of(*d)
        ]:
            steps[j] = step
    assert sorted(steps) == list(range(len(x)))  # every column is stepped
    for j in range(len(x)):
        moved = x.copy()
        moved[j] += steps[j]
        plain = (cv.residuals(s, fit, cases, moved) - base) / steps[j]
        assert got[:, j] == pytest.approx(plain, rel=1e-6, abs=1e-9), j
    n = len(cv.FITTED)
    # rows: case 0 (a6000, p) 0-1, case 1 (h100, q) 2-3, case 2 (a6000, q) 4-5, case 3
    # (a100-80g, p) 6-7. Columns: the GPUs' deviations (a100-80g n, n+1; a6000 n+2, n+3;
    # h100 n+4, n+5), then the generations' (ampere n+6, n+7; hopper n+8, n+9)
    a100, a6000, h100, ampere, hopper = (slice(n + 2 * i, n + 2 * i + 2) for i in range(5))
    assert not got[[0, 1, 2, 3, 4, 5], a100].any() and got[[6], a100].any()
    assert not got[[2, 3, 6, 7], a6000].any() and got[[0, 4], a6000].any(axis=1).all()
    assert not got[[0, 1, 4, 5, 6, 7], h100].any() and got[[2], h100].any()
    # each case moves with its generation's deviations too: Ampere's the A6000 and the A100
    assert not got[[2, 3], ampere].any() and got[[0, 4, 6], ampere].any(axis=1).all()
    assert not got[[0, 1, 4, 5, 6, 7], hopper].any() and got[[2], hopper].any()
    if per_host:  # and with its own host's: p's (cases 0, 3) at n + 10, n + 11; q's after
        p_dev, q_dev = slice(n + 10, n + 12), slice(n + 12, n + 14)
        assert not got[[2, 3, 4, 5], p_dev].any() and not got[[0, 1, 6, 7], q_dev].any()
        assert got[[0, 6], p_dev].any(axis=1).all() and got[[2, 4], q_dev].any(axis=1).all()
        # a Jacobian costs one simulation more than without: the front end's own factor
        assert len(cv._steps(fit, x)) == n + 1
    else:
        assert len(cv._steps(fit, x)) == n  # one simulation per global constant


def test_a_host_deviation_moves_its_own_cases_and_a_new_host_gets_the_global_front_end(cv):
    """--per-host: each training source's front end is a log-factor on the global latency and
    its burst rate a log-deviation summed with the global one; a held-out source (a host the
    fit never saw) is predicted with the global constants, as an unseen GPU is."""
    fit = cv.Fit(cv.FITTED, ["a6000"], ["simon-mo"], cv._per_host(["frontend_latency"]))
    fit.x[: len(cv.FITTED)] = [0.0, 0.0, math.log(5.0), 5.0, 0.0, 0.0, 0.0]  # 50 ms front end
    fit.x[fit.at(2, 0)] = math.log(3.5)  # simon-mo's host: 3.5x the global front end
    assert fit.profile("a6000", host="simon-mo").constants.frontend_latency_s == pytest.approx(
        0.175
    )
    assert fit.profile("a6000", host="gpustack").constants.frontend_latency_s == pytest.approx(0.05)
    assert fit.profile("a6000").constants.request_overhead_s == pytest.approx(0.010)
    both = cv.Fit(cv.FITTED, ["a6000"], ["p"], cv._per_host(["request_overhead"]))
    both.x[2], both.x[both.at(2, 0)] = math.log(5.0), math.log(2.0)
    assert both.profile("h100", host="p").constants.request_overhead_s == pytest.approx(0.020)
    assert both.profile("h100", host="q").constants.request_overhead_s == pytest.approx(0.010)
    assert len(both.x) == len(cv.FITTED) + len(cv.PER_GPU) + 1  # no generation block
    assert cv.Fit(cv.FITTED, ["a6000"], ["p"]).hosts == []  # no --per-host: no host block


def test_bands_are_conformal_over_sources_and_their_coverage_is_nested_leave_one_out(cv):
    """The source is the exchangeable unit (benchmarks/sim_bands.py): each source's score holds
    90 % of its figures, the band is the k-th smallest of n scores, k = ceil((n + 1) × 0.8)
    (n = 4 or 5: the widest), a regime with fewer than 4 sources takes the family's band, a
    family with fewer than 4 sources the wider of its own and every family's."""
    sb = cv.sim_bands
    assert [sb.rank(n) for n in (1, 3, 4, 5, 9, 10)] == [1, 3, 4, 5, 8, 9]

    def source(name: str, ratios: list[float], reg: str = "burst", fam: str = "ttft") -> list:
        return [sb.Figure(name, reg, fam, r) for r in ratios]

    # a: one odd figure in eleven, outside its 90 %; e: the widest lean, 1.905 either way
    a = source("a", [1.1] * 10 + [9.0])
    b, c, d = source("b", [1.2] * 3), source("c", [0.8] * 3), source("d", [1.305, 1 / 1.305])
    e = source("e", [1.905, 1 / 1.905], "closed_loop")
    figs = a + b + c + d + e
    table = sb.table(figs)
    # burst has 4 sources: its own band, the 4th smallest score (d's; a's 9.0 is odd); the
    # other regimes the family's over every regime: 5 sources, the 5th smallest (e's)
    assert table["burst"]["ttft"] == (0.76, 1.31)
    assert table["closed_loop"]["ttft"] == table["poisson"]["ttft"] == (0.52, 1.91)
    # a family of 3 sources: as wide as every family's
    tpot = source("x", [1.05], fam="tpot") + source("y", [0.95], fam="tpot")
    tpot += source("z", [1.105], fam="tpot")
    assert sb.table(figs + tpot)["light"]["tpot"] == (0.52, 1.91)
    assert sb.table(tpot)["light"]["tpot"] == (0.9, 1.11)  # nothing wider to take: z's
    # nested: each source against the table made without it (e against a..d's: 0.76-1.31;
    # a against b..e's burst, the family's: 0.52-1.91)
    covered = sb.coverage(figs)
    assert covered["e"] == [0, 2] and covered["a"] == [10, 11] and covered["b"] == [3, 3]
    assert covered["all"] == [sum(v[0] for k, v in covered.items() if k != "all"), len(figs)]
    by_family = sb.tally(sb.held_out(figs + tpot), "family")
    assert by_family["tpot"][1] == 3 and by_family["all"][1] == len(figs) + 3


def test_the_printed_bands_are_the_cross_validated_run_on_file(cv):
    """tuner.fidelity.bands' table is benchmarks/sim_bands.py's output for the committed
    cross-validated run (re-run the script and paste its literal after a new run)."""
    from tuner.fidelity.bands import PUBLISHED_BANDS

    assert cv.sim_bands.table(cv.sim_bands.figures()) == PUBLISHED_BANDS
