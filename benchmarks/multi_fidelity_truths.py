"""Multi-fidelity against TPE under several hidden truths the study is not told about.

Each truth is the stock A6000 profile with some constants scaled (`TRUTHS`: compute,
bandwidth, overheads and all-reduce, 1.3-2.5x off, alone and together; the factor names are
`tuner.sim.fit_problem.FACTORS`'s, e.g. flops 0.5 = compute 2x slower). The study screens
with the stock profile; its "real" trials run on the truth in virtual time through the
planner (`benchmarks/multi_fidelity.py`'s `TruthRunner`: the loop, Optuna, SQLite and the
screen are the real ones). The truth's planned optimum is the exhaustive best over
`multi_fidelity.py`'s grid (1920 configs) on the truth. Gap = best score found − that
optimum, in score units (0.01 ≈ 1 % on one weight-1 metric; negative: beat the grid).
Every figure is SIMULATED.

    nice .venv/bin/python benchmarks/multi_fidelity_truths.py --seeds 5 --trials 20
    nice .venv/bin/python benchmarks/multi_fidelity_truths.py --trace compute-2x+bw-0.64

The table gives, per truth, method and trial count (5, 10, 20 real trials: what the study's
budget counts; a proposal vLLM's rules refuse before launch is none), the median gap over the
seeds and its spread (min, max), then issue 37's check (multi's median gap <= 0.01 at 5 real
trials and <= 0.005 at 10, and never worse than TPE's). A whole run takes hours on a small
box: split it by truth and seeds (`--truths T --seed-list 0,1 --json a.json`, one process
each) and print the table of the parts with `--merge a.json b.json ...`.

`--trace TRUTH` runs one multi-fidelity study on that truth and prints, per screened trial,
what the calibration moved (its factors), the screen's pick, its predicted and measured
score, and how well the calibrated simulator *ranks* a fixed probe set of configs against
the truth (Spearman ρ, and the truth's regret of the probe the simulator likes best).
`--prior-check TRUTH` fits the stock profile to the truth's figures at four fixed configs
under the loop's prior and the fit's default one, and prints the same ranking figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from multi_fidelity import COUNTS, GRID, grid_argbest, run, spec_for

from tuner.fidelity import screen as screen_mod
from tuner.measure.objective import score
from tuner.sim.fit_problem import apply_factors
from tuner.sim.profile_file import write_profile
from tuner.sim.profiles import get_gpu
from tuner.spec.space import baseline_params

OVERHEADS = ("step_overhead", "per_seq_overhead", "request_overhead")
TRUTHS: dict[str, dict[str, float]] = {
    "compute-2x": {"flops": 0.5},
    "bw-0.6": {"bandwidth": 0.6},
    "overheads-2.5x": dict.fromkeys(OVERHEADS, 2.5),
    "allreduce-2.5x": {"allreduce": 2.5},
    "compute-2x+bw-0.64": {"flops": 0.5, "bandwidth": 0.64},
    "all-1.3x": {
        "flops": 0.77,
        "bandwidth": 0.77,
        "allreduce": 1.3,
        **dict.fromkeys(OVERHEADS, 1.3),
    },
    "mixed-2x": {"flops": 0.5, "bandwidth": 1.3, "step_overhead": 2.0, "allreduce": 2.0},
    # issue 37's first truth (bandwidth x0.8, compute x0.7, overheads x1.6, all-reduce x4)
    "issue37": {"bandwidth": 0.8, "flops": 0.7, "allreduce": 4.0, **dict.fromkeys(OVERHEADS, 1.6)},
}
QUICK = ("compute-2x+bw-0.64", "overheads-2.5x", "mixed-2x")


def parse_truth(text: str) -> tuple[str, dict[str, float]]:
    """`NAME:FACTOR=X,FACTOR=X` (factor names as in `tuner.sim.fit_problem.FACTORS`)."""
    from tuner.sim.fit_problem import FACTORS

    name, _, body = text.partition(":")
    factors = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key not in FACTORS:
            sys.exit(f"unknown factor {key!r} in --truth {text!r}; known: {', '.join(FACTORS)}")
        factors[key] = float(value)
    if not name or not factors:
        sys.exit(f"--truth {text!r}: expected NAME:FACTOR=X,...")
    return name, factors


def truth_file(name: str, tmp: Path) -> Path:
    """The truth as a profile file (the stock A6000 with `TRUTHS[name]` applied)."""
    path = tmp / f"{name}.yaml"
    gpu = apply_factors(get_gpu("a6000"), TRUTHS[name])
    write_profile(replace(gpu, name=name), path)
    return path


def compare(names, seeds, trials, candidates, methods, tmp: Path, out: Path | None) -> list[dict]:
    """Each (truth, seed, method) study's best-so-far curve (`study_rows`), written to `out`
    (JSON) after every study, so a run cut short keeps what it measured; then the table."""
    rows: list[dict] = []
    for name in names:
        for row in study_rows(name, seeds, trials, candidates, methods, tmp):
            rows.append(row)
            if out is not None:
                out.write_text(json.dumps(rows, indent=1))
    print_table(rows)
    return rows


def study_rows(
    name, seeds, trials, candidates, methods, tmp: Path, grid: dict = GRID, prompts=None
) -> Iterator[dict]:
    """One row per study on truth `name`: its gap to the truth's planned optimum (the best of
    `grid` on the truth) per real trial (`prompts`: a shorter workload, for a quick check)."""
    truth = truth_file(name, tmp)
    optimum, _ = grid_argbest(spec_for("grid", 0, tmp, prompts=prompts), truth, grid)
    for seed in seeds:  # methods interleaved per seed: the box's load hits both
        for m in methods:
            curve, wall_s = run(m, seed, trials, tmp, truth, candidates, prompts)
            yield {
                "truth": name,
                "factors": TRUTHS[name],
                "optimum": optimum,
                "method": m,
                "seed": seed,
                "trials": trials,
                "best": curve,
                "gap": [b - optimum for b in curve],
                "wall_s": round(wall_s, 1),
            }


def summary(rows: Sequence[dict]) -> list[dict]:
    """Per (truth, method) and trial count in `COUNTS`: the median gap, its spread over the
    seeds (min, max), and the seeds, in score units (0.01 = 1 % on one weight-1 metric)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["truth"], r["method"]), []).append(r)
    out = []
    for (name, method), group in groups.items():
        for c in COUNTS:
            # a study that ran out of new configs early keeps its best
            gaps = [r["gap"][min(c, len(r["gap"])) - 1] for r in group if r["trials"] >= c]
            if gaps:
                out.append(
                    {
                        "truth": name,
                        "method": method,
                        "trials": c,
                        "seeds": len(gaps),
                        "optimum": group[0]["optimum"],
                        "median": statistics.median(gaps),
                        "min": min(gaps),
                        "max": max(gaps),
                    }
                )
    return out


def print_table(rows: Sequence[dict]) -> None:
    """The median gap and its spread per truth, method and trial count, and issue 37's
    check (median gap <= 0.01 at 5 real trials and <= 0.005 at 10, never worse than TPE)."""
    cells = summary(rows)
    head = "truth | grid optimum | real trials | method | seeds | median gap | spread (min, max)"
    print(f"| {head} |")
    print("| --- | ---: | ---: | --- | ---: | ---: | --- |")
    for c in sorted(cells, key=lambda c: (c["truth"], c["trials"], c["method"])):
        print(
            f"| {c['truth']} | {c['optimum']:+.4f} | {c['trials']} | {c['method']} | "
            f"{c['seeds']} | {c['median']:+.4f} | {c['min']:+.4f}, {c['max']:+.4f} |"
        )
    for line in check(cells):
        print(line)
    sys.stdout.flush()


TARGETS = {5: 0.01, 10: 0.005}  # issue 37: multi's median gap at that many real trials


def check(cells: Sequence[dict]) -> list[str]:
    """Issue 37's check, one line per (truth, trial count) it applies to."""
    at = {(c["truth"], c["method"], c["trials"]): c for c in cells}
    lines = []
    for (name, method, n), c in sorted(at.items()):
        if method != "multi" or n not in TARGETS:
            continue
        tpe = at.get((name, "tpe", n))
        ok = c["median"] <= TARGETS[n] and (tpe is None or c["median"] <= tpe["median"])
        against = f", TPE {tpe['median']:+.4f}" if tpe else ""
        lines.append(
            f"{'meets' if ok else 'MISSES'} at {n}: {name} multi {c['median']:+.4f}"
            f" (target <= {TARGETS[n]}{against})"
        )
    return lines


class Tracer:
    """Wraps `Screen.choose` to print what each calibration moved and how it ranks."""

    def __init__(self, truth: Path, probes: int) -> None:
        from tuner.sim.profile_file import read_profile

        self.truth = read_profile(truth)
        self.probes = probes
        self.rows: list[dict] = []

    def install(self) -> None:
        original = screen_mod.Screen.choose
        tracer = self

        def choose(screen, points, host=None):
            choice = original(screen, points, host)
            if choice is not None:
                tracer.row(screen, points, choice)
            return choice

        screen_mod.Screen.choose = choose

    def scores(self, screen, gpu, probes) -> np.ndarray:
        from tuner.sim import fit as cal

        def at(params):
            flags = screen.flags(params)
            return cal.predict(screen.model, gpu, flags, screen.workload, screen.metrics)

        ref = at(baseline_params(screen.spec.search_space))
        w = screen.spec.objective.weights
        return np.array([score(m, ref, w) if m else np.nan for m in map(at, probes)])

    def ranking(self, screen) -> tuple[float, float]:
        """Spearman ρ of the calibrated profile's probe scores against the truth's, and the
        truth's regret of the probe the calibrated profile likes best."""
        from scipy.stats import spearmanr

        if not hasattr(self, "probe_set"):
            rng = np.random.default_rng(12345)
            units = rng.random((self.probes, len(screen.names)))
            self.probe_set = [screen.from_unit(u) for u in units]
            self.truth_scores = self.scores(screen, self.truth, self.probe_set)
        predicted = self.scores(screen, screen.calibration.profile, self.probe_set)
        ok = np.isfinite(predicted) & np.isfinite(self.truth_scores)
        rho = spearmanr(predicted[ok], self.truth_scores[ok]).statistic
        liked = int(np.nanargmin(np.where(ok, predicted, np.inf)))
        return float(rho), float(self.truth_scores[liked] - np.nanmin(self.truth_scores[ok]))

    def row(self, screen, points, choice) -> None:
        rho, regret = self.ranking(screen)
        p = choice.params
        print(
            f"trial {len(points) + 1:2d} | fitted on {screen.calibration.observations} | "
            f"{_factors(screen.calibration.factors)} | pick mnbt={p['max-num-batched-tokens']} "
            f"seqs={p['max-num-seqs']} chunked={p['enable-chunked-prefill']} | "
            f"pred {choice.score:+.4f} dist {choice.info.distance:.2f} "
            f"err {choice.info.score_error:.3f} | probe ρ {rho:+.2f} regret {regret:+.4f}"
            + (
                f" | drawn {_factors(choice.info.drawn_factors)}"
                if choice.info.drawn_factors
                else ""
            ),
            flush=True,
        )


def _factors(factors: dict[str, float]) -> str:
    return " ".join(f"{k[:6]}={v:.2f}" for k, v in factors.items())


def trace(name: str, seed: int, trials: int, candidates: int, probes: int, tmp: Path) -> None:
    truth = truth_file(name, tmp)
    spec = spec_for("grid", 0, tmp)
    t_best, t_params = grid_argbest(spec, truth)
    s_best, s_params = grid_argbest(spec, _stock(tmp))
    print(f"truth {name} {TRUTHS[name]}: grid optimum {t_best:+.4f} at {t_params}")
    print(f"stock profile: grid optimum {s_best:+.4f} at {s_params}")
    Tracer(truth, probes).install()
    curve, _ = run("multi", seed, trials, tmp, truth, candidates)
    print("best so far per trial:", " ".join(f"{b:+.4f}" for b in curve))


# the configs the seed-0 trace of `mixed-2x` measured by trial 5 (mnbt, max-num-seqs)
PRIOR_CHECK_CONFIGS = ((2048, 256), (66755, 8), (1035, 10), (1151, 8))


def prior_check(name: str, probes: int, tmp: Path) -> None:
    """Fit the stock profile to the truth's figures at `PRIOR_CHECK_CONFIGS` with the loop's
    prior and with the fit's default (weaker) one: the factors and the probe ranking."""
    from multi_fidelity import TruthRunner, truth_spec

    from tuner.fidelity.screen import Screen
    from tuner.sim import fit as cal

    truth = truth_file(name, tmp)
    spec = spec_for("multi", 0, tmp)
    runner = TruthRunner(truth_spec(spec, truth))
    runner.prepare()
    screen, tracer = Screen(spec, runner.requests), Tracer(truth, probes)
    base = baseline_params(spec.search_space)
    configs = [
        {**base, "max-num-batched-tokens": b, "max-num-seqs": n} for b, n in PRIOR_CHECK_CONFIGS
    ]

    def observe(params):
        flags = screen.flags(params)
        figures = cal.predict(screen.model, tracer.truth, flags, screen.workload, screen.metrics)
        return cal.Observation(flags, figures)

    observations = [observe(c) for c in configs]
    for label, weight in (("loop prior", cal.LOOP_PRIOR_WEIGHT), ("fit default", cal.PRIOR_WEIGHT)):
        c = cal.fit(
            screen.base,
            observations,
            model=screen.model,
            workload=screen.workload,
            max_nfev=30,
            metrics=screen.metrics,
            prior_weight=weight,
            min_observations=1,
        )
        screen.calibration = c
        rho, regret = tracer.ranking(screen)
        print(f"{label}: {_factors(c.factors)} | probe ρ {rho:+.2f} regret {regret:+.4f}")


def _stock(tmp: Path) -> Path:
    path = tmp / "stock.yaml"
    write_profile(get_gpu("a6000"), path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-list", help="the sampler seeds, e.g. 2,3 (default: 0..seeds-1)")
    ap.add_argument("--json", type=Path, help="write every study's curve here (after each)")
    ap.add_argument("--merge", type=Path, nargs="+", help="print the table of --json files")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--candidates", type=int, default=128)
    ap.add_argument("--methods", default="multi,tpe")
    ap.add_argument("--truths", default=",".join(TRUTHS), help=f"quick: {','.join(QUICK)}")
    ap.add_argument("--trace", metavar="TRUTH", help="trace one multi-fidelity study")
    ap.add_argument("--prior-check", metavar="TRUTH", help="fit 4 fixed configs, two priors")
    ap.add_argument("--seed", type=int, default=0, help="the traced study's sampler seed")
    ap.add_argument("--probes", type=int, default=64)
    ap.add_argument(
        "--truth",
        action="append",
        default=[],
        metavar="NAME:FACTOR=X,...",
        help="a truth of your own, e.g. mine:flops=0.6,bandwidth=0.75 (repeatable)",
    )
    args = ap.parse_args()
    if args.merge:
        print_table([row for path in args.merge for row in json.loads(path.read_text())])
        return
    for text in args.truth:
        name, factors = parse_truth(text)
        TRUTHS[name] = factors
    names = (
        [args.trace or args.prior_check]
        if args.trace or args.prior_check
        else args.truths.split(",")
    )
    unknown = [n for n in names if n not in TRUTHS]
    if unknown:
        sys.exit(f"unknown truths {unknown}; known: {', '.join(TRUTHS)}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.prior_check:
            prior_check(args.prior_check, args.probes, tmp)
        elif args.trace:
            trace(args.trace, args.seed, args.trials, args.candidates, args.probes, tmp)
        else:
            methods = args.methods.split(",")
            seeds = (
                [int(x) for x in args.seed_list.split(",")]
                if args.seed_list
                else list(range(args.seeds))
            )
            compare(names, seeds, args.trials, args.candidates, methods, tmp, args.json)


if __name__ == "__main__":
    main()
