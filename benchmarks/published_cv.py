"""The simulator judged on sources it was not fitted to: leave-one-source-out cross-validation
over the published real-GPU suite (benchmarks/published/cases.yaml; docs/simulator.md, "How
close (real GPUs)").

The simulator's fittable constants (`FITTED`, below) are fitted automatically on every source
but one, and that source's cases are predicted; every source in turn. A source is one
publisher's runs (one host, one vLLM version, one load generator: `source_of`). Each fit
starts from priors that no case chose: every GPU's datasheet figures with `StepTimeConstants`'
CUDA defaults, never the built-in profiles' fitted constants. The fit moves

- global constants, shared by every GPU and host: the GEMM and attention efficiency and the
  bandwidth efficiency (log-factors on the defaults), the API server's serial cost per request
  (`request_overhead_s`: the rate a burst reaches the engine) and its latency per request
  (`frontend_latency_s`), and any of `OPTIONAL` named with --also;
- per GPU profile: a log-deviation of its compute and of its bandwidth efficiency from the
  global ones, shrunk towards 0 (`GPU_PRIOR_WEIGHT`). A GPU that only the held-out source ran
  gets no deviation: it is predicted from its datasheet and the global constants.

Residuals are log(SIMULATED / published) per figure under a soft-L1 loss (`fit_problem`'s
scale); `scipy.optimize.least_squares` with grouped finite differences (a GPU's deviation
moves only its cases, so all GPUs' deviations share one evaluation). Prints, per metric
family (throughput, TTFT, TPOT), the median |SIMULATED/published - 1| and the count off by
more than 2x: cross-validated (each figure predicted by the fit that did not see its source),
in-sample (the fit on every source), and the built-in profiles as shipped (fitted by hand on
these cases: in-sample too). The V0 cases are left out (the simulator is V1, reported apart
by published_gpu.py).

    .venv/bin/python benchmarks/published_cv.py [--json OUT] [--also gemm_half_hidden ...]

The cases' workloads are prepared once (as `tuner plan` builds them: published_fit.prepared)
and cached under .cache/published-cv/, keyed by the case's text.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_fit
import published_gpu as suite
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from tuner.sim.fit_problem import ROBUST_SCALE, apply_factors
from tuner.sim.profiles import GPUS, GpuProfile, StepTimeConstants, load_model

CACHE = suite.REPO / ".cache" / "published-cv"
GPU_PRIOR_WEIGHT = 0.3  # per log-deviation: a GPU 2x off the global costs one ~20 % miss
MISSING_RESIDUAL = math.log(10.0)  # a figure the fit's engine would refuse: a 10x miss
MAX_NFEV = 15  # function evaluations per fit (Jacobians apart): the run inside ~10 min on one core
REGIMES = ("light", "closed_loop", "poisson", "burst", "long_context")
LONG_CONTEXT_TOKENS = 16000


@dataclass(frozen=True)
class Param:
    """One fitted number: x in the solver's units; `apply` sets it on a profile."""

    name: str
    low: float
    high: float
    apply: Callable[[GpuProfile, float], GpuProfile]


def _factor(name: str) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, x: apply_factors(gpu, {name: math.exp(x)})


def _absolute(constant: str, unit: float) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, x: gpu.with_constants(**{constant: x * unit})


# the global constants every fit moves (log-factors on the CUDA defaults, or values)
FITTED = (
    Param("compute", -2.5, 1.0, _factor("flops")),  # GEMM and attention efficiency
    Param("bandwidth", -1.5, 0.5, _factor("bandwidth")),
    Param("request_overhead", -3.0, 2.5, _factor("request_overhead")),  # the burst's rate
    Param("frontend_latency_10ms", 0.0, 10.0, _absolute("frontend_latency_s", 0.01)),
)
# issue 45's size effects, fitted with --also NAME once the cases can tell them apart
OPTIONAL = {
    "gemm_half_hidden": Param("gemm_half_hidden_1k", 0.0, 16.0, _absolute("gemm_half_hidden", 1e3)),
    "gemm_half_tokens": Param(
        "gemm_half_tokens_100", 0.0, 20.0, _absolute("gemm_half_tokens", 100)
    ),
    "layer_floor_s": Param("layer_floor_10us", 0.0, 10.0, _absolute("layer_floor_s", 1e-5)),
}
PER_GPU = (
    Param("compute", -2.0, 2.0, _factor("flops")),
    Param("bandwidth", -1.0, 1.0, _factor("bandwidth")),
)


def source_of(case: dict) -> str:
    """Who published the case: its repository, else its source's path (a seed file)."""
    source = case["source"]
    return source.get("repo") or source.get("path") or source["url"]


def regime_of(case: dict) -> str:
    """The load regime a case's figures belong to (for the bands)."""
    work = case["workload"]
    if work["dataset"] == "random" and work["input_len"] >= LONG_CONTEXT_TOKENS:
        return "long_context"
    concurrency = work.get("max_concurrency")
    if concurrency == 1:
        return "light"
    if concurrency:
        return "closed_loop"
    if math.isfinite(float(work.get("request_rate", math.inf))):
        return "poisson"
    return "burst"


def prior_profile(gpu: str) -> GpuProfile:
    """A GPU as no case chose it: its datasheet figures, the CUDA default constants."""
    return replace(GPUS[gpu], constants=StepTimeConstants())


class Suite:
    """The V1 cases, prepared once, and their simulations, remembered per profile."""

    def __init__(self, cases: list[dict], models: dict) -> None:
        self.cases = cases
        self.prepared = {}
        self._memo: dict[tuple[str, GpuProfile], dict] = {}
        self.simulations = 0
        with tempfile.TemporaryDirectory(prefix="published-cv-") as tmp:
            tokenizer = None
            for case in cases:
                key = hashlib.sha256(
                    json.dumps([case, models.get(case["model"])], sort_keys=True).encode()
                ).hexdigest()[:20]
                path = CACHE / f"{case['id']}-{key}.pkl"
                if not path.is_file():
                    tokenizer = tokenizer or suite._tokenizer(Path(tmp))
                    model_dir, flags, work = published_fit.prepared(
                        case, models, tokenizer, Path(tmp)
                    )
                    CACHE.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(pickle.dumps((load_model(model_dir), flags, work)))
                self.prepared[case["id"]] = pickle.loads(path.read_bytes())

    def metrics(self, case: dict, gpu: GpuProfile) -> dict:
        key = (case["id"], gpu)
        if key not in self._memo:
            model, flags, work = self.prepared[case["id"]]
            self._memo[key] = published_fit.simulated(model, gpu, flags, work)
            self.simulations += 1
        return self._memo[key]


class Fit:
    """The constants fitted on some cases: globals, and a deviation per GPU they ran on."""

    def __init__(self, params: tuple[Param, ...], gpus: list[str]) -> None:
        self.params, self.gpus = params, gpus
        self.x = np.zeros(len(params) + len(PER_GPU) * len(gpus))
        # the front end's latency starts at 10 ms, not at its bound: scipy's trust region
        # starts as wide as |x0|, and a start at 0 never leaves it
        self.x[[k for k, p in enumerate(params) if p.name.startswith("frontend_latency")]] = 1.0

    def profile(self, gpu: str, x: np.ndarray | None = None) -> GpuProfile:
        x = self.x if x is None else x
        profile = prior_profile(gpu)
        n = len(self.params)
        offsets = [0.0] * len(PER_GPU)
        if gpu in self.gpus:
            at = n + len(PER_GPU) * self.gpus.index(gpu)
            offsets = list(x[at : at + len(PER_GPU)])
        for k, p in enumerate(self.params):
            shared = next((j for j, q in enumerate(PER_GPU) if q.name == p.name), None)
            profile = p.apply(profile, x[k] + (offsets[shared] if shared is not None else 0.0))
        return profile

    def bounds(self) -> tuple[list[float], list[float]]:
        each = list(self.params) + list(PER_GPU) * len(self.gpus)
        return [p.low for p in each], [p.high for p in each]

    def named(self) -> dict:
        out = {p.name: round(float(v), 4) for p, v in zip(self.params, self.x, strict=False)}
        for g in self.gpus:
            c = self.profile(g).constants
            out[g] = {
                "flops_efficiency": round(c.flops_efficiency, 3),
                "attention_efficiency": round(c.attention_efficiency, 3),
                "bandwidth_efficiency": round(c.bandwidth_efficiency, 3),
            }
        return out


def residuals(s: Suite, fit: Fit, cases: list[dict], x: np.ndarray) -> np.ndarray:
    out = []
    for case in cases:
        got = s.metrics(case, fit.profile(case["gpu"], x))
        for row in suite.compare(case, {} if "failure" in got else got):
            ratio = row["ratio"]
            out.append(math.log(ratio) if ratio else MISSING_RESIDUAL)
    prior = GPU_PRIOR_WEIGHT * x[len(fit.params) :]
    return np.concatenate([np.array(out), prior])


def fit_on(s: Suite, cases: list[dict], params: tuple[Param, ...]) -> Fit:
    """The constants fitted on `cases` (from the priors; unchanged when there are none)."""
    fit = Fit(params, sorted({c["gpu"] for c in cases}))
    if not cases:
        return fit
    rows = [(c["gpu"], len(c["published"])) for c in cases]
    n_fig = sum(n for _, n in rows)
    sparsity = lil_matrix((n_fig + len(fit.x) - len(params), len(fit.x)), dtype=int)
    at = 0
    for gpu, n in rows:
        sparsity[at : at + n, : len(params)] = 1
        first = len(params) + len(PER_GPU) * fit.gpus.index(gpu)
        sparsity[at : at + n, first : first + len(PER_GPU)] = 1
        at += n
    for k in range(len(fit.x) - len(params)):
        sparsity[n_fig + k, len(params) + k] = 1
    low, high = fit.bounds()
    result = least_squares(
        lambda x: residuals(s, fit, cases, x),
        fit.x,
        bounds=(low, high),
        method="trf",
        loss="soft_l1",
        f_scale=ROBUST_SCALE,
        diff_step=0.05,
        jac_sparsity=sparsity,
        max_nfev=MAX_NFEV,
        ftol=1e-4,
    )
    fit.x = result.x
    return fit


def predictions(s: Suite, cases: list[dict], profile: Callable[[str], GpuProfile]) -> list[dict]:
    rows = []
    for case in cases:
        got = s.metrics(case, profile(case["gpu"]))
        for row in suite.compare(case, {} if "failure" in got else got):
            rows.append(row | {"source": source_of(case), "regime": regime_of(case)})
    return rows


def family_errors(rows: list[dict]) -> dict:
    """Per family: median |SIMULATED/published - 1|, figures, off by over 2x (or unsimulated)."""
    out = {}
    for family, keys in suite.FAMILIES.items():
        chosen = [r for r in rows if r["metric"] in keys]
        errors = [abs(r["ratio"] - 1.0) for r in chosen if r["ratio"]]
        out[family] = {
            "median_abs_error": statistics.median(errors) if errors else None,
            "figures": len(chosen),
            "over_2x": sum(1 for r in chosen if not r["ratio"] or suite._off_2x(r)),
        }
    return out


def bands(rows: list[dict]) -> dict:
    """Per regime and family, the held-out published/SIMULATED ratios: their 10th and 90th
    percentiles (the interval that covers 80 % of them) and median."""
    out: dict = {}
    for regime in REGIMES:
        for family, keys in suite.FAMILIES.items():
            ratios = [
                1.0 / r["ratio"]
                for r in rows
                if r["regime"] == regime and r["metric"] in keys and r["ratio"]
            ]
            if ratios:
                p10, p50, p90 = np.percentile(ratios, [10, 50, 90])
                out.setdefault(regime, {})[family] = {
                    "published_over_simulated_p10": round(float(p10), 3),
                    "median": round(float(p50), 3),
                    "p90": round(float(p90), 3),
                    "figures": len(ratios),
                }
    return out


def run(cases_path: Path, also: list[str]) -> dict:
    data = suite.load_cases(cases_path)
    problems = suite.case_problems(data)
    if problems:
        raise SystemExit("cases file malformed: " + "; ".join(problems))
    cases = [c for c in data["cases"] if c["engine"] == "V1"]
    params = FITTED + tuple(OPTIONAL[name] for name in also)
    started = time.process_time()
    s = Suite(cases, data.get("models") or {})
    prepared_s = time.process_time() - started
    sources = sorted({source_of(c) for c in cases})
    full = fit_on(s, cases, params)
    in_sample = predictions(s, cases, full.profile)
    shipped = predictions(s, cases, lambda g: GPUS[g])
    held_out, folds = [], {}
    for source in sources:
        train = [c for c in cases if source_of(c) != source]
        test = [c for c in cases if source_of(c) == source]
        fold = fit_on(s, train, params)
        unseen = sorted({c["gpu"] for c in test} - set(fold.gpus))
        folds[source] = {"constants": fold.named(), "gpus_from_priors": unseen}
        rows = predictions(s, test, fold.profile)
        held_out += rows
        _print_fold(source, unseen, rows)
    return {
        "sources": sources,
        "fitted": [p.name for p in params] + [f"per GPU: {p.name}" for p in PER_GPU],
        "full_fit": full.named(),
        "folds": folds,
        "summary": {
            "cross_validated": family_errors(held_out),
            "in_sample": family_errors(in_sample),
            "shipped_profiles": family_errors(shipped),
        },
        "bands": bands(held_out),
        "rows": {"cross_validated": held_out, "in_sample": in_sample, "shipped": shipped},
        "cpu_s": {
            "prepare": round(prepared_s, 1),
            "total": round(time.process_time() - started, 1),
        },
        "simulations": s.simulations,
    }


def _print_fold(source: str, unseen: list[str], rows: list[dict]) -> None:
    priors = f" ({', '.join(unseen)} from priors)" if unseen else ""
    print(f"\nheld out: {source}{priors}", flush=True)
    for r in rows:
        shown = f"x{r['ratio']:.2f}" if r["ratio"] else "not simulated"
        print(f"  {r['case']:<46} {r['metric']:<22} SIMULATED/published {shown}")


def print_result(result: dict) -> None:
    s = result["summary"]
    print(f"\n{len(result['sources'])} sources; fitted: {', '.join(result['fitted'])}")
    print("median |SIMULATED/published - 1| (figures; off by more than 2x), V1 cases:")
    print(f"  {'family':<11} {'cross-validated':>24} {'in-sample':>24} {'shipped profiles':>24}")
    for family in suite.FAMILIES:
        cells = []
        for kind in ("cross_validated", "in_sample", "shipped_profiles"):
            e = s[kind][family]
            pct = "-" if e["median_abs_error"] is None else f"{e['median_abs_error'] * 100:.1f} %"
            cells.append(f"{pct} ({e['figures']}; {e['over_2x']} >2x)")
        print(f"  {family:<11} " + " ".join(f"{c:>24}" for c in cells))
    print("bands, held out: published/SIMULATED p10 / median / p90 (figures)")
    for regime, fams in result["bands"].items():
        for family, b in fams.items():
            print(
                f"  {regime:<13} {family:<11} {b['published_over_simulated_p10']:.2f} / "
                f"{b['median']:.2f} / {b['p90']:.2f} ({b['figures']})"
            )
    print(
        f"CPU {result['cpu_s']['total']} s ({result['cpu_s']['prepare']} s preparing), "
        f"{result['simulations']} simulations"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=suite.CASES, help="the cases file")
    parser.add_argument("--json", type=Path, help="write the errors, bands and rows here")
    parser.add_argument(
        "--also", action="append", default=[], choices=sorted(OPTIONAL), help="fit this too"
    )
    args = parser.parse_args(argv)
    result = run(args.cases, args.also)
    print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
