"""Fit the CUDA profiles' step-time constants to the published suite's "fit" cases.

The same study per case as benchmarks/published_gpu.py (its `study_for`), simulated in-process
with the planner (`tuner.sim.planner.simulate`, the core `tuner plan` runs) so that one
candidate set of constants costs seconds, not a CLI start per case. Candidates are given on
the command line as NAME=VALUE over a built-in profile's constants; the script prints the
median |SIMULATED/published - 1| per metric family over the chosen cases, so constants are
chosen by comparing a handful of candidates (docs/simulator.md, "How close (real GPUs)").
The figures in the docs come from published_gpu.py (the CLI), not from this script.

    .venv/bin/python benchmarks/published_fit.py --gpu a100-80g [--split fit] \
        [--set flops_efficiency=0.5 ...] [--case ID ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_gpu as suite

from tuner.errors import EngineRefused
from tuner.measure.metrics import compute_metrics
from tuner.runners.plan import PlanRunner, study_workload
from tuner.sim.planner import simulate
from tuner.sim.profiles import GPUS
from tuner.spec.space import simulator_flags
from tuner.spec.study import load_study_spec


def prepared(case: dict, models: dict, tokenizer: Path, workdir: Path):
    """(model dir, flags, workload) of a case, as `tuner plan` builds them."""
    path = suite.write_case_study(case, models, tokenizer, workdir)
    spec = load_study_spec(path)
    runner = PlanRunner(spec)
    runner.prepare()
    flags = simulator_flags(spec, {"max-num-seqs": case["flags"]["max-num-seqs"]})
    return spec.engine.model, flags, study_workload(spec, runner.requests)


def simulated(model: str, gpu, flags: dict, work) -> dict:
    try:
        sim = simulate(
            model,
            gpu,
            flags,
            list(work.prompt_lens),
            list(work.output_lens),
            list(work.arrival_s),
            max_concurrency=work.max_concurrency,
        )
    except EngineRefused as exc:
        return {"failure": str(exc)}
    return compute_metrics(
        sim.records, sim.duration_s, selected_metrics=["ttft", "tpot", "itl"], percentiles=[99.0]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True, help="the built-in profile to vary")
    parser.add_argument("--split", choices=suite.SPLITS)
    parser.add_argument("--case", action="append")
    parser.add_argument("--set", action="append", default=[], help="CONSTANT=VALUE")
    args = parser.parse_args(argv)
    gpu = GPUS[args.gpu]
    changes = {k: float(v) for k, v in (s.split("=", 1) for s in args.set)}
    gpu = gpu.with_constants(**changes) if changes else gpu
    data = suite.load_cases()
    cases = [
        c
        for c in data["cases"]
        if c["gpu"] == args.gpu
        and (args.split is None or c["split"] == args.split)
        and (not args.case or c["id"] in args.case)
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="published-fit-") as tmp:
        workdir = Path(tmp)
        tokenizer = suite._tokenizer(workdir)
        for case in cases:
            model, flags, work = prepared(case, data.get("models") or {}, tokenizer, workdir)
            got = simulated(model, gpu, flags, work)
            if "failure" in got:
                print(f"{case['id']}: refused: {got['failure'][:100]}")
                continue
            case_rows = suite.compare(case, got)
            rows += case_rows
            ratios = " ".join(f"{r['metric']}=x{r['ratio']:.2f}" for r in case_rows)
            print(f"{case['id']}: {ratios}", flush=True)
    for key, s in suite.summary(rows).items():
        if s["figures"] and key.startswith("all/"):
            print(f"{key:<16} {s['median_abs_error'] * 100:6.1f} % ({s['over_2x']} over 2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
