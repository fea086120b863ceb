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
  (`frontend_latency_s`), the engine's CPU work per request in a step (`per_seq_overhead_s`),
  the API server's work per streamed chunk (`stream_chunk_s`, on the thread that admits
  requests: `tuner.sim.frontend`), the least time of a layer in a step (`layer_floor_s`),
  and any of `OPTIONAL` named with --also;
- per GPU profile: a log-deviation of its compute and of its bandwidth efficiency from the
  global ones, shrunk towards 0 (`GPU_PRIOR_WEIGHT`). A GPU that only the held-out source ran
  gets no deviation: it is predicted from its datasheet and the global constants;
- with --per-generation, per GPU generation (`GENERATION`: Ampere, Hopper) too: the same
  deviations, the GPU's on top of its generation's, so an unseen GPU is predicted with its
  generation's (tried on 7 Dec and worse held out: docs/simulator.md, "How close");
- with --per-host NAME,...: per training source (one host), a log-deviation of the API
  server's constants (`PER_HOST`: the front end's latency per request, the burst's rate) from
  the global ones, shrunk the same way. The held-out source is a host no fit saw: it is
  predicted with the global constants, as an unseen GPU is.

Residuals are log(SIMULATED / published) per figure under a soft-L1 loss (`fit_problem`'s
scale); `scipy.optimize.least_squares` (trust region, 15 residual evaluations a fit) with a
forward-difference Jacobian that uses the model's structure (`jacobian`): a case sees its
GPU's deviation and the global constant of the same name only through their sum, so one
simulation of the cases with every GPU's deviation stepped gives the global column and every
GPU's; a Jacobian costs one simulation of the cases per global constant, not one per global
plus one per deviation. The fits (on every source, and one per held-out source) run in
`--jobs` worker processes, as does the workloads' preparation. Prints, per metric
family (throughput, TTFT, TPOT), the median |SIMULATED/published - 1| and the count off by
more than 2x: cross-validated (each figure predicted by the fit that did not see its source),
in-sample (the fit on every source), and the built-in profiles as shipped (fitted by hand on
these cases: in-sample too); then per held-out source, and the bands (benchmarks/sim_bands.py:
the table `tuner.fidelity.bands` prints, from these held-out figures) with their coverage, leave
one source out. The V0 cases are left out (the simulator is V1, reported apart by
published_gpu.py).

    .venv/bin/python benchmarks/published_cv.py [--json OUT] [--jobs N] [--fold SOURCE ...]
        [--per-generation]
        [--also attention|allreduce|gemm_half_hidden|gemm_half_tokens|step_overhead ...]
        [--per-host frontend_latency[,request_overhead]]

The cases' workloads are prepared once (as `tuner plan` builds them: published_fit.prepared)
and cached under .cache/published-cv/, keyed by the case's text. CPU seconds (this process
and its workers) and wall seconds are printed and kept in the JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_fit
import published_gpu as suite
import sim_bands
from scipy.optimize import least_squares

from tuner.sim.fit_problem import ROBUST_SCALE, apply_factors
from tuner.sim.profiles import GPUS, GpuProfile, StepTimeConstants, load_model

CACHE = suite.REPO / ".cache" / "published-cv"
GPU_PRIOR_WEIGHT = 0.3  # per log-deviation: a GPU 2x off the global costs one ~20 % miss
MISSING_RESIDUAL = math.log(10.0)  # a figure the fit's engine would refuse: a 10x miss
MAX_NFEV = 15  # function evaluations per fit (Jacobians apart): the run inside ~10 min on one core
DIFF_STEP = 0.05  # the finite-difference step, relative (log-factors: 5 %)


@dataclass(frozen=True)
class Param:
    """One fitted number: x in the solver's units; `apply` sets it on a profile. `start`: where
    the solver starts (scipy's trust region starts as wide as |x0|: a value whose bound is 0
    and whose start is 0 never leaves it)."""

    name: str
    low: float
    high: float
    apply: Callable[[GpuProfile, float], GpuProfile]
    start: float = 0.0


def _factor(name: str) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, x: apply_factors(gpu, {name: math.exp(x)})


def _scaled(constant: str) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, x: gpu.with_constants(
        **{constant: getattr(gpu.constants, constant) * math.exp(x)}
    )


def _absolute(constant: str, unit: float) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, x: gpu.with_constants(**{constant: x * unit})


# the global constants every fit moves (log-factors on the CUDA defaults, or values)
FITTED = (
    Param("compute", -2.5, 1.0, _factor("flops")),  # GEMM and attention efficiency
    Param("bandwidth", -1.5, 0.5, _factor("bandwidth")),
    Param("request_overhead", -3.0, 2.5, _factor("request_overhead")),  # the burst's rate
    Param("frontend_latency_10ms", 0.0, 10.0, _absolute("frontend_latency_s", 0.01), 1.0),
    # the engine's CPU work per request in a step (the scheduler's bookkeeping, sampling, the
    # output processing and detokenising): a cost no model size scales, so a step of hundreds
    # of requests is slower than its roofline, and a request that arrives under load waits
    # longer for its first token (docs/simulator.md, "How close (real GPUs)")
    Param("per_seq_overhead", -2.0, 2.5, _factor("per_seq_overhead")),
    # the API server's work per streamed chunk, on the thread that admits requests
    # (`tuner.sim.frontend`): a burst of streams slows its own admission, and past the
    # thread's pace the client reads tokens slower than the engine makes them
    Param("stream_chunk_10us", 0.0, 30.0, _absolute("stream_chunk_s", 1e-5), 5.0),
    # the least time a layer's kernels take in a step (launch and synchronisation inside a
    # CUDA graph, `steptime.layer_floor`): it binds only on small models' decode steps (a
    # 0.6B model's on a Hopper GPU is its layers', not its weights' read); from 50 us, since
    # from 0 the solver's trust region starts at one unit and stays there
    Param("layer_floor_10us", 0.0, 10.0, _absolute("layer_floor_s", 1e-5), 5.0),
)
# issue 45's size effects, fitted with --also NAME once the cases can tell them apart
OPTIONAL = {
    "gemm_half_hidden": Param("gemm_half_hidden_1k", 0.0, 16.0, _absolute("gemm_half_hidden", 1e3)),
    "gemm_half_tokens": Param(
        "gemm_half_tokens_100", 0.0, 20.0, _absolute("gemm_half_tokens", 100)
    ),
    # attention's share of the peak apart from the GEMMs' (as the built-in profiles have it)
    "attention": Param("attention", -1.5, 0.5, _scaled("attention_efficiency")),
    # the all-reduce's cost against the profile's interconnect (slower: PCIe without P2P)
    "allreduce": Param("allreduce", -1.0, 4.0, _factor("allreduce")),
    # the engine's fixed cost per step: no model size scales it, so a small model's steps are
    # relatively slower
    "step_overhead": Param("step_overhead", -2.0, 2.0, _factor("step_overhead")),
}
PER_GPU = (
    Param("compute", -2.0, 2.0, _factor("flops")),
    Param("bandwidth", -1.0, 1.0, _factor("bandwidth")),
)
# with --per-generation, per GPU generation (`GENERATION`), the same deviations, shrunk the
# same way: a GPU no training case ran is predicted with its generation's, which the fit sets
# from the GPUs of that generation it saw (an A100 SXM from the A100 PCIe and the A6000; an
# H100 PCIe from the H100 SXM, NVL and H200). Off by default: held out, the GPUs of one
# generation differ more than the generations do (docs/simulator.md, "How close")
PER_GENERATION = PER_GPU
GENERATIONS = False
GENERATION = {
    "a6000": "ampere",
    "a100-80g": "ampere",
    "a100-pcie": "ampere",
    "a100-pcie-nop2p": "ampere",
    "h100": "hopper",
    "h100-pcie": "hopper",
    "h100-nvl": "hopper",
    "h200": "hopper",
    "l40s": "ada",
    "t4": "turing",
}
# the host's constants (the API server's: its latency per request and the burst's rate), a
# log-deviation per training source with --per-host NAME: a source is one host. One named as a
# global constant moves with it (the Jacobian's sum); the front end's latency is a value
# globally (10 ms units), so its deviation is a log-factor on it, stepped apart
PER_HOST = {
    "frontend_latency": Param("host_frontend_latency", -2.0, 2.0, _scaled("frontend_latency_s")),
    "request_overhead": Param("request_overhead", -2.0, 2.0, _factor("request_overhead")),
}


def generation_of(gpu: str) -> str:
    """The GPU's generation (`GENERATION`; a GPU not listed is its own)."""
    return GENERATION.get(gpu, gpu)


def source_of(case: dict) -> str:
    """Who published the case: its repository, else its source's path (a seed file)."""
    source = case["source"]
    return source.get("repo") or source.get("path") or source["url"]


def regime_of(case: dict) -> str:
    """The load regime a case's figures belong to (`tuner.fidelity.bands.regime`: the bands')."""
    return sim_bands.case_regime(case["workload"])


def prior_profile(gpu: str) -> GpuProfile:
    """A GPU as no case chose it: its datasheet figures, the CUDA default constants."""
    return replace(GPUS[gpu], constants=StepTimeConstants())


def _cache_path(case: dict, models: dict) -> Path:
    key = hashlib.sha256(
        json.dumps([case, models.get(case["model"])], sort_keys=True).encode()
    ).hexdigest()[:20]
    return CACHE / f"{case['id']}-{key}.pkl"


def _prepare(job: tuple[dict, dict, Path]) -> None:
    """Build one case's workload as `tuner plan` does, into its cache file (a worker's job)."""
    case, models, tokenizer = job
    with tempfile.TemporaryDirectory(prefix="published-cv-") as tmp:
        model_dir, flags, work = published_fit.prepared(case, models, tokenizer, Path(tmp))
        CACHE.mkdir(parents=True, exist_ok=True)
        _cache_path(case, models).write_bytes(pickle.dumps((load_model(model_dir), flags, work)))


class Suite:
    """The V1 cases, prepared once, and their simulations, remembered per profile."""

    def __init__(self, cases: list[dict], models: dict, jobs: int) -> None:
        self.cases = cases
        self._memo: dict[tuple[str, GpuProfile], dict] = {}
        self.simulations = 0
        missing = [c for c in cases if not _cache_path(c, models).is_file()]
        if missing:
            with tempfile.TemporaryDirectory(prefix="published-cv-") as tmp:
                tokenizer = suite._tokenizer(Path(tmp))
                # the long prompts first: they take longest to build
                missing.sort(key=lambda c: -c["workload"].get("input_len", 0))
                with _pool(jobs) as pool:
                    list(pool.map(_prepare, [(c, models, tokenizer) for c in missing]))
        self.prepared = {c["id"]: pickle.loads(_cache_path(c, models).read_bytes()) for c in cases}

    def remember(self, case: dict, gpu: GpuProfile, metrics: dict) -> None:
        self._memo[(case["id"], gpu)] = metrics
        self.simulations += 1

    def metrics(self, case: dict, gpu: GpuProfile) -> dict:
        key = (case["id"], gpu)
        if key not in self._memo:
            model, flags, work = self.prepared[case["id"]]
            self._memo[key] = published_fit.simulated(model, gpu, flags, work)
            self.simulations += 1
        return self._memo[key]


def _pool(jobs: int) -> ProcessPoolExecutor:
    """Worker processes forked from this one (they inherit the prepared suite)."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"))


class Fit:
    """The constants fitted on some cases: globals, and blocks of log-deviations, one per GPU
    the cases ran on (`PER_GPU`), one per generation of those GPUs (`PER_GENERATION`, with
    --per-generation), and one per source they came from (`PER_HOST`, with --per-host)."""

    def __init__(
        self,
        params: tuple[Param, ...],
        gpus: list[str],
        hosts: list[str] | None = None,
        per_host: tuple[Param, ...] = (),
    ) -> None:
        self.params, self.gpus = params, gpus
        self.generations = sorted({generation_of(g) for g in gpus}) if GENERATIONS else []
        self.hosts = list(hosts or []) if per_host else []
        # (the deviations' parameters, the groups that have them), GPUs first
        self.blocks = (
            (PER_GPU, self.gpus),
            (PER_GENERATION, self.generations),
            (per_host, self.hosts),
        )
        self.x = np.zeros(len(params) + sum(len(ps) * len(keys) for ps, keys in self.blocks))
        self.evaluations = (0, 0)  # the solver's (residual evaluations, Jacobians)
        self.x[: len(params)] = [p.start for p in params]

    def at(self, block: int, group: int) -> int:
        """Where the deviations of a block's group start in x."""
        before = sum(len(ps) * len(keys) for ps, keys in self.blocks[:block])
        return len(self.params) + before + len(self.blocks[block][0]) * group

    def column_of(self, block: int, j: int) -> list[int]:
        """The block's deviation `j`, of every group."""
        return [self.at(block, g) + j for g in range(len(self.blocks[block][1]))]

    def shared(self, name: str) -> list[tuple[int, int]]:
        """The blocks' deviations named as a global constant (the sum's partners)."""
        return [
            (b, j)
            for b, (ps, keys) in enumerate(self.blocks)
            for j, p in enumerate(ps)
            if p.name == name and keys
        ]

    def profile(self, gpu: str, x: np.ndarray | None = None, host: str | None = None) -> GpuProfile:
        x = self.x if x is None else x
        profile = prior_profile(gpu)
        names = {p.name for p in self.params}
        summed: dict[str, float] = {}
        own: list[tuple[Param, float]] = []  # deviations with no global of their name
        for b, (ps, keys) in enumerate(self.blocks):
            group = (gpu, generation_of(gpu), host)[b]
            if group in keys:
                at = self.at(b, keys.index(group))
                for j, p in enumerate(ps):
                    if p.name in names:
                        summed[p.name] = summed.get(p.name, 0.0) + float(x[at + j])
                    else:
                        own.append((p, float(x[at + j])))
        for k, p in enumerate(self.params):
            profile = p.apply(profile, x[k] + summed.get(p.name, 0.0))
        for p, value in own:
            profile = p.apply(profile, value)
        return profile

    def case_profile(self, case: dict, x: np.ndarray | None = None) -> GpuProfile:
        """The profile a case is simulated on: its GPU's, on its source's host."""
        return self.profile(case["gpu"], x, source_of(case) if self.hosts else None)

    def groups_of(self, cases: list[dict]) -> list[np.ndarray]:
        """Per block, each figure's group (its case's GPU, that GPU's generation, its case's
        source)."""
        counts = [len(c["published"]) for c in cases]
        gpu = np.repeat([c["gpu"] for c in cases], counts)
        generation = np.repeat([generation_of(c["gpu"]) for c in cases], counts)
        hosts = [source_of(c) for c in cases] if self.hosts else [""] * len(cases)
        return [gpu, generation, np.repeat(hosts, counts)]

    def bounds(self) -> tuple[list[float], list[float]]:
        each = list(self.params)
        for ps, keys in self.blocks:
            each += list(ps) * len(keys)
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
        for h in self.hosts:
            c = self.profile(next(iter(GPUS)), host=h).constants
            out[f"host {h}"] = {
                "frontend_latency_ms": round(c.frontend_latency_s * 1e3, 1),
                "request_overhead_ms": round(c.request_overhead_s * 1e3, 2),
            }
        return out


def residuals(s: Suite, fit: Fit, cases: list[dict], x: np.ndarray) -> np.ndarray:
    out = []
    for case in cases:
        got = s.metrics(case, fit.case_profile(case, x))
        for row in suite.compare(case, {} if "failure" in got else got):
            ratio = row["ratio"]
            out.append(math.log(ratio) if ratio else MISSING_RESIDUAL)
    prior = GPU_PRIOR_WEIGHT * x[len(fit.params) :]
    return np.concatenate([np.array(out), prior])


def fit_on(
    s: Suite, cases: list[dict], params: tuple[Param, ...], per_host: tuple[Param, ...] = ()
) -> Fit:
    """The constants fitted on `cases` (from the priors; unchanged when there are none)."""
    hosts = sorted({source_of(c) for c in cases})
    fit = Fit(params, sorted({c["gpu"] for c in cases}), hosts, per_host)
    if not cases:
        return fit
    low, high = fit.bounds()
    result = least_squares(
        lambda x: residuals(s, fit, cases, x),
        fit.x,
        jac=lambda x: jacobian(s, fit, cases, x),
        bounds=(low, high),
        method="trf",
        loss="soft_l1",
        f_scale=ROBUST_SCALE,
        max_nfev=MAX_NFEV,
        ftol=1e-4,
    )
    fit.x, fit.evaluations = result.x, (result.nfev, result.njev)
    return fit


def jacobian(s: Suite, fit: Fit, cases: list[dict], x: np.ndarray) -> np.ndarray:
    """d residuals / d x by forward differences, one simulation of the cases per effective
    direction: a case sees a group's deviation (its GPU's, its host's) and the global constant
    of the same name only through their sum, so one step of every group's deviation at once
    gives both columns (the global one is every case's, a group's deviation its own cases');
    a deviation with no global of its name is stepped for every group at once too (a case
    sees its own group's only). One simulation of the cases per global constant and per such
    deviation, not one per global plus one per deviation."""
    n = len(fit.params)
    base = residuals(s, fit, cases, x)  # remembered: the solver evaluated x just before
    n_fig = len(base) - (len(x) - n)
    jac = np.zeros((len(base), len(x)))
    group_of_row = fit.groups_of(cases)
    for k, deviations, step, moved in _steps(fit, x):
        column = (residuals(s, fit, cases, moved)[:n_fig] - base[:n_fig]) / step
        if k is not None:
            jac[:n_fig, k] = column
        for b, j in deviations:
            for g, group in enumerate(fit.blocks[b][1]):
                rows = group_of_row[b] == group
                jac[:n_fig, fit.at(b, g) + j][rows] = column[rows]
    jac[n_fig:, n:] = GPU_PRIOR_WEIGHT * np.eye(len(x) - n)
    return jac


def _steps(
    fit: Fit, x: np.ndarray
) -> list[tuple[int | None, list[tuple[int, int]], float, np.ndarray]]:
    """`jacobian`'s points: (the global constant's index or None, the (block, deviation)s
    whose columns the point gives, the step, x moved). A global with deviations of its name
    moves the first block's deviation of every group (every case has one: the cases'
    effective constant moves by the step), which gives every block's deviation of that name
    too (a case sees its GPU's and its generation's only through their sum with the global);
    a deviation with no global of its name is moved alone, for every group."""
    out, paired = [], set()
    for k, p in enumerate(fit.params):
        step = DIFF_STEP * max(1.0, abs(x[k]))
        moved = x.copy()
        deviations = fit.shared(p.name)
        if not deviations:
            moved[k] += step
        else:
            moved[fit.column_of(*deviations[0])] += step
            paired.update(deviations)
        out.append((k, deviations, step, moved))
    for b, (ps, keys) in enumerate(fit.blocks):
        for j in range(len(ps) if keys else 0):
            if (b, j) not in paired:
                at = fit.column_of(b, j)
                step = DIFF_STEP * max(1.0, float(np.abs(x[at]).max()))
                moved = x.copy()
                moved[at] += step
                out.append((None, [(b, j)], step, moved))
    return out


def _warm(
    s: Suite, params: tuple[Param, ...], per_host: tuple[Param, ...], jobs: int, cases: list[dict]
) -> None:
    """Simulate, in the workers, what every fit asks first: every case at the common start
    and at its Jacobian's steps (a case's profile there is the same in every fold), and as
    the built-in profiles have it; the fits forked after this find them remembered. `cases`:
    those some fit trains on."""
    hosts = sorted({source_of(c) for c in s.cases})
    fit = Fit(params, sorted({c["gpu"] for c in s.cases}), hosts, per_host)
    points = [fit.x] + [moved for *_, moved in _steps(fit, fit.x)]
    wanted = [(c, fit.case_profile(c, x)) for x in points for c in cases]
    wanted += [(c, GPUS[c["gpu"]]) for c in s.cases]
    with _pool(jobs) as pool:
        got = list(pool.map(_simulate, wanted, chunksize=4))
    for (case, gpu), metrics in zip(wanted, got, strict=True):
        s.remember(case, gpu, metrics)


def _simulate(job: tuple[dict, GpuProfile]) -> dict:
    assert _SUITE is not None
    case, gpu = job
    model, flags, work = _SUITE.prepared[case["id"]]
    return published_fit.simulated(model, gpu, flags, work)


def predictions(s: Suite, cases: list[dict], profile: Callable[[dict], GpuProfile]) -> list[dict]:
    rows = []
    for case in cases:
        got = s.metrics(case, profile(case))
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


_SUITE: Suite | None = None  # the suite the fit workers read (inherited through fork)


def _params(also: list[str]) -> tuple[Param, ...]:
    return FITTED + tuple(OPTIONAL[name] for name in also)


def _per_host(names: list[str]) -> tuple[Param, ...]:
    return tuple(PER_HOST[name] for name in names)


def _fit_and_predict(job: tuple[str | None, list[str], list[str]]) -> tuple:
    """One fit (a worker's job): on every source but `held_out` (None: on every source), and
    its predictions of the held-out source's cases (of every case: a held-out source is a host
    the fit never saw, predicted with no deviation). Returns the fitted x, the GPUs and the
    hosts it fitted, the rows and the simulations it ran."""
    held_out, also, per_host = job
    params, s = _params(also), _SUITE
    assert s is not None
    train = [c for c in s.cases if source_of(c) != held_out]
    test = [c for c in s.cases if held_out is None or source_of(c) == held_out]
    before, cpu = s.simulations, time.process_time()
    fit = fit_on(s, train, params, _per_host(per_host))
    rows = predictions(s, test, fit.case_profile)
    cost = {
        "residuals": fit.evaluations[0],
        "jacobians": fit.evaluations[1],
        "simulations": s.simulations - before,
        "cpu_s": round(time.process_time() - cpu, 1),
    }
    return fit.x, fit.gpus, fit.hosts, rows, cost


def run(
    cases_path: Path,
    also: list[str],
    jobs: int,
    only: list[str] | None = None,
    per_host: list[str] | None = None,
) -> dict:
    global _SUITE
    data = suite.load_cases(cases_path)
    problems = suite.case_problems(data)
    if problems:
        raise SystemExit("cases file malformed: " + "; ".join(problems))
    cases = [c for c in data["cases"] if c["engine"] == "V1"]
    params, host_names = _params(also), list(per_host or [])
    host_params = _per_host(host_names)
    started, wall = time.process_time(), time.perf_counter()
    s = _SUITE = Suite(cases, data.get("models") or {}, jobs)
    prepared_s = time.process_time() - started + _children_cpu_s()
    sources = sorted({source_of(c) for c in cases})
    # the largest fits first: the full one, then the folds that keep the most cases
    order = [None, *sorted(sources, key=lambda src: sum(source_of(c) == src for c in cases))]
    if only:  # some folds alone (no fit on every source: no in-sample figures)
        sources = [src for src in sources if any(o in src for o in only)]
        order = sources
    _warm(
        s,
        params,
        host_params,
        jobs,
        [c for c in cases if len(order) > 1 or source_of(c) != order[0]],
    )
    with _pool(jobs) as pool:
        fitted = pool.map(_fit_and_predict, [(o, also, host_names) for o in order])
        done = dict(zip(order, fitted, strict=True))
    shipped = predictions(s, cases, lambda c: GPUS[c["gpu"]])
    everything = done.get(None)
    fitted_on = (everything[1], everything[2]) if everything else ([], [])
    full = Fit(params, *fitted_on, host_params)
    if everything:
        full.x = everything[0]
    in_sample = everything[3] if everything else []
    held_out, folds = [], {}
    for source in sources:
        x, gpus, hosts, rows, cost = done[source]
        fold = Fit(params, gpus, hosts, host_params)
        fold.x = x
        unseen = sorted({c["gpu"] for c in cases if source_of(c) == source} - set(gpus))
        folds[source] = {"constants": fold.named(), "gpus_from_priors": unseen, "cost": cost}
        held_out += rows
        _print_fold(source, unseen, rows, cost)
    figures = sim_bands.figures_of(held_out, {c["id"]: c for c in cases})
    return {
        "sources": sources,
        "fitted": [p.name for p in params]
        + [f"per GPU: {p.name}" for p in PER_GPU]
        + [f"per generation: {p.name}" for p in (PER_GENERATION if GENERATIONS else ())]
        + [f"per host: {p.name}" for p in host_params],
        "full_fit": full.named(),
        "folds": folds,
        "summary": {
            "cross_validated": family_errors(held_out),
            "in_sample": family_errors(in_sample),
            "shipped_profiles": family_errors(shipped),
        },
        "bands": sim_bands.table(figures),
        "band_coverage_leave_one_source_out": sim_bands.coverage(figures),
        "rows": {"cross_validated": held_out, "in_sample": in_sample, "shipped": shipped},
        "cpu_s": {
            "prepare": round(prepared_s, 1),
            "total": round(time.process_time() - started + _children_cpu_s(), 1),
        },
        "wall_s": round(time.perf_counter() - wall, 1),
        "jobs": jobs,
        "full_fit_cost": everything[4] if everything else None,
        "simulations": s.simulations + sum(d[4]["simulations"] for d in done.values()),
    }


def _children_cpu_s() -> float:
    """CPU seconds of the worker processes that have ended (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _print_fold(source: str, unseen: list[str], rows: list[dict], cost: dict) -> None:
    """The held-out source's cases, one line each: SIMULATED/published per figure."""
    priors = f"; {', '.join(unseen)} from priors" if unseen else ""
    print(
        f"\nheld out: {source} (fit: {cost['residuals']} residual evaluations, "
        f"{cost['jacobians']} Jacobians, {cost['cpu_s']} s CPU{priors})"
    )
    short = {"throughput": "thr", "ttft": "ttft", "tpot": "tpot"}
    for case in dict.fromkeys(r["case"] for r in rows):
        cells = []
        for family, keys in suite.FAMILIES.items():
            got = [r["ratio"] for r in rows if r["case"] == case and r["metric"] in keys]
            if got:
                shown = " ".join(f"x{x:.2f}" if x else "n/a" for x in got)
                cells.append(f"{short[family]} {shown}")
        print(f"  {case[:46]:<46} " + " | ".join(cells), flush=True)


def _cell(rows: list[dict], family: str) -> str:
    e = family_errors(rows)[family]
    if e["median_abs_error"] is None:
        return "-"
    return f"{e['median_abs_error'] * 100:.1f} % ({e['figures']}; {e['over_2x']} >2x)"


def print_result(result: dict) -> None:
    rows = result["rows"]
    print(f"\n{len(result['sources'])} sources; fitted: {', '.join(result['fitted'])}")
    print("median |SIMULATED/published - 1| (figures; off by more than 2x), V1 cases:")
    print(f"  {'family':<11} {'cross-validated':>24} {'in-sample':>24} {'shipped profiles':>24}")
    for family in suite.FAMILIES:
        cells = [_cell(rows[kind], family) for kind in ("cross_validated", "in_sample", "shipped")]
        print(f"  {family:<11} " + " ".join(f"{c:>24}" for c in cells))
    covered = result["band_coverage_leave_one_source_out"]
    print("\nper held-out source: cross-validated | in-sample, per family; band coverage")
    print("(its figures inside the band made without it)")
    for source in result["sources"]:
        cells = []
        for family in suite.FAMILIES:
            cv = [r for r in rows["cross_validated"] if r["source"] == source]
            fit = [r for r in rows["in_sample"] if r["source"] == source]
            cells.append(f"{family} {_pct(cv, family)} | {_pct(fit, family)}")
        n_in, n = covered[source]
        print(f"  {source[:34]:<34} " + "; ".join(cells) + f"; bands {n_in}/{n}")
    n_in, n = covered["all"]
    print(f"band coverage, leave one source out: {n_in} of {n} figures ({n_in / n:.0%})")
    print("bands: published/SIMULATED [low, high], conformal over sources (sim_bands.py)")
    for regime, fams in result["bands"].items():
        cells = [f"{family} {lo:.2f}-{hi:.2f}" for family, (lo, hi) in fams.items()]
        print(f"  {regime:<13} " + ", ".join(cells))
    print(
        f"CPU {result['cpu_s']['total']} s ({result['cpu_s']['prepare']} s preparing), "
        f"{result['wall_s']} s wall on {result['jobs']} workers, "
        f"{result['simulations']} simulations"
    )


def _pct(rows: list[dict], family: str) -> str:
    e = family_errors(rows)[family]["median_abs_error"]
    return "-" if e is None else f"{e * 100:.0f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=suite.CASES, help="the cases file")
    parser.add_argument("--json", type=Path, help="write the errors, bands and rows here")
    parser.add_argument(
        "--also", action="append", default=[], choices=sorted(OPTIONAL), help="fit this too"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(os.cpu_count() or 1, 4),
        help="worker processes (the fits run in parallel; default: the cores, at most 4)",
    )
    parser.add_argument(
        "--fold", action="append", help="only the fold holding out the source that has this"
    )
    parser.add_argument(
        "--gpu-prior-weight", type=float, default=GPU_PRIOR_WEIGHT, help="per GPU deviation"
    )
    parser.add_argument(
        "--per-generation",
        action="store_true",
        help="a deviation per GPU generation too (an unseen GPU takes its generation's)",
    )
    parser.add_argument(
        "--per-host",
        type=lambda text: text.split(","),
        default=[],
        help="a deviation per training source (host) of these, comma-separated: "
        + ",".join(PER_HOST),
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.per_host) - set(PER_HOST))
    if unknown:
        parser.error(f"--per-host: unknown {', '.join(unknown)} (known: {', '.join(PER_HOST)})")
    globals()["GPU_PRIOR_WEIGHT"] = args.gpu_prior_weight  # the forked workers' too
    globals()["GENERATIONS"] = args.per_generation
    result = run(args.cases, args.also, max(1, args.jobs), args.fold, args.per_host)
    print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
