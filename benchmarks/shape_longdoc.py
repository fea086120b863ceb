"""The user's question (issue 23 §4), on the simulator: on 4×A6000 with
DeepSeek-R1-Distill-Qwen-32B and the seed's long documents, does one engine at TP=4 or two
replicas of TP=2 hold more traffic under the SLO, each at its own tuned flags?

For 1 and for 4 questions per document it writes four studies from
studies/a6000x4-r1-distill-qwen-32b-longdoc.yaml (capacity mode, the same SLOs, 64 prompts
of 512-32k tokens, 1024-token answers, max-model-len 65536), with the shape fixed in
engine.flags and the five scheduler flags of search_spaces/vllm-core.yaml tuned (prefix
caching at vLLM V1's default, on), and runs each with `tuner plan` (virtual time). It
prints, per study, the baseline's and the tuned best's capacity and the best's latency-load
curve (every rate its capacity search ran). Every figure is SIMULATED.

    .venv/bin/python benchmarks/shape_longdoc.py [--n-trials 30] [--out DIR]
        [--tokenizer .cache/tiny-qwen2] [--why]

`--why` prints instead the figures the page's "Why" quotes, each one `tuner plan` run of the
workload at vLLM's defaults (the planner's inputs, `tuner.runners.plan.study_workload`): the
preemptions, P99 TTFT and prefix-cache hit rate of each shape at 0.05 req/s with one
question per document and at 0.1 req/s with four.

The tokenizer only builds the prompts to their exact token lengths (the simulated engine
counts tokens, not words); the model's own tokenizer gives the same lengths. The figures are
recorded in docs/shape-longdoc.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import optuna
import yaml

from tuner.trial import StudyRecord, read_all
from tuner.trial.specs import of_current

REPO = Path(__file__).resolve().parent.parent
SHAPES = {"TP=4": {"tensor-parallel-size": 4}, "2xTP=2": {"tensor-parallel-size": 2,
                                                          "data-parallel-size": 2}}  # fmt: skip
QUESTIONS = {1: {}, 4: {"longdoc_questions": [4], "longdoc_order": "spread"}}


def study_file(out: Path, shape: str, questions: int, tokenizer: str) -> Path:
    data = yaml.safe_load((REPO / "studies/a6000x4-r1-distill-qwen-32b-longdoc.yaml").read_text())
    data["name"] = f"shape-{shape.replace('=', '')}-q{questions}".lower()
    data["engine"]["model"] = "deepseek-r1-distill-qwen-32b"  # the simulator's built-in
    data["engine"]["flags"] = {"max-model-len": 65536, **SHAPES[shape]}
    data["search_space"] = str(REPO / "search_spaces/vllm-core.yaml")
    data["workload"].update(tokenizer=tokenizer, **QUESTIONS[questions])
    path = out / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def planned(path: Path, storage: str) -> bool:
    name = yaml.safe_load(path.read_text())["name"] + "-simulated"
    try:
        return bool(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:  # no such study yet
        return False


def summary(path: Path, storage: str) -> list[str]:
    name = yaml.safe_load(path.read_text())["name"] + "-simulated"
    study = optuna.load_study(study_name=name, storage=storage)
    points = of_current(StudyRecord.of(study), read_all(study.get_trials(deepcopy=False)))
    found = [p for p in points if p.capacity_rps is not None and p.rate_steps]
    base = next((p for p in points if p.baseline), None)
    if not found:
        return [f"{name}: no trial measured"]
    best = max(found, key=lambda p: (p.capacity_rps or 0.0, -(p.score or 0.0)))
    failed = sum(p.status == "failed" for p in points)
    lines = [
        f"{name}: baseline {base.capacity_rps if base else None} req/s, best trial "
        f"{best.number} {best.capacity_rps:.4g} req/s ({len(points)} trials, {failed} refused "
        f"or failed) {best.params}",
        "  rate (req/s)  meets SLO  p99 TTFT (ms)  mean TPOT (ms)",
    ]
    for s in sorted(best.rate_steps, key=lambda s: s.rate_rps):
        ttft, tpot = s.metrics.get("p99_ttft_ms"), s.metrics.get("mean_tpot_ms")
        lines.append(
            f"  {s.rate_rps:12.4g}  {'yes' if s.feasible else 'no':>9}  "
            f"{'-' if ttft is None else round(ttft):>13}  "
            f"{'-' if tpot is None else round(tpot, 1):>14}"
        )
    return lines


def why(out: Path, tokenizer: str) -> None:
    from tuner.measure.metrics import compute_metrics
    from tuner.runners.plan import study_workload
    from tuner.sim.planner import simulate
    from tuner.spec.study import load_study_spec
    from tuner.workload.datasets import build_requests
    from tuner.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer)
    for questions, rate in ((1, 0.05), (4, 0.1)):
        for shape in SHAPES:
            spec = load_study_spec(study_file(out, shape, questions, tokenizer))
            w = spec.workload.model_copy(update={"request_rate": rate})
            work = study_workload(spec, build_requests(spec.workload, tok), w)
            sim = simulate(spec.engine.model, "a6000", dict(spec.engine.flags),
                           list(work.prompt_lens), list(work.output_lens), list(work.arrival_s),
                           prompt_ids=work.prompt_id_lists())  # fmt: skip
            m = compute_metrics(sim.records, sim.duration_s, selected_metrics=["ttft"],
                                percentiles=[99.0])  # fmt: skip
            hits = sim.prefix_cache_hits / max(1, sim.prefix_cache_queries)
            print(f"{questions} question(s), {shape}, {rate} req/s: {sim.preemptions} "
                  f"preemptions, p99 TTFT {m['p99_ttft_ms'] / 1e3:.1f} s, prefix-cache hit "
                  f"rate {hits:.1%}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-trials", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("shape-longdoc"))
    ap.add_argument("--tokenizer", default=str(REPO / ".cache/tiny-qwen2"))
    ap.add_argument("--why", action="store_true", help="the figures of the page's 'Why'")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.why:
        why(args.out, args.tokenizer)
        return
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = f"sqlite:///{args.out.resolve()}/shape.db"
    for questions in QUESTIONS:
        for shape in SHAPES:
            path = study_file(args.out, shape, questions, args.tokenizer)
            cmd = [sys.executable, "-m", "tuner.cli", "plan", str(path)]
            cmd += ["--n-trials", str(args.n_trials), "--storage", storage]
            if not planned(path, storage):  # a rerun only prints what is stored
                subprocess.run(cmd, check=True, capture_output=True)
            print("\n".join(summary(path, storage)), flush=True)


if __name__ == "__main__":
    main()
