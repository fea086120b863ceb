"""`tuner plan` against `tuner sim serve` on long prompts that fill the KV cache (issue 32).

The seed's regime: DeepSeek-R1-Distill-Qwen-32B on one A100-80GB (45,344 tokens of KV cache
at vLLM's defaults and `--max-model-len 16384`), vLLM's random dataset of 8000-token prompts,
1024-token answers (ignore_eos), Poisson arrivals at 0.2 req/s, 32 prompts: five requests fill
the cache and the engine preempts. The same requests go

- through `tuner plan`'s path (`tuner.runners.plan.study_workload` and
  `tuner.sim.planner.simulate`, virtual time): it knows the prompts' lengths only;
- to `tuner sim serve` with the tokenizer (real HTTP, `tuner bench`'s client,
  `--time-scale` simulated seconds per wall second): it knows their token ids.

It prints output throughput, mean and P99 TTFT, mean TPOT and the preemptions of both, and
their differences. Every figure is SIMULATED. docs/simulator.md ("Block identity") records
them.

    .venv/bin/python benchmarks/plan_vs_serve.py [--time-scale 10] [--plan-only]
        [--num-prompts 32] [--input-len 8000] [--output-len 1024] [--rate 0.2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.measure.metrics import compute_metrics
from tuner.runners.plan import study_workload
from tuner.sim.planner import simulate
from tuner.spec.study import StudySpec
from tuner.workload.benchmark import run_benchmark
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer
from tuner_testing import TUNER

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
MODEL, GPU = "deepseek-r1-distill-qwen-32b", "a100-80g"
FLAGS = {"max-model-len": 16384}
KEYS = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")


def study(args: argparse.Namespace) -> StudySpec:
    return StudySpec.model_validate({
        "name": "plan-vs-serve",
        "engine": {"model": MODEL, "flags": FLAGS},
        "hardware": {"gpu": GPU, "count": 1},
        "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 8, "high": 64}}},
        "workload": {
            "dataset_name": "random", "num_prompts": args.num_prompts,
            "random_input_len": args.input_len, "random_output_len": args.output_len,
            "request_rate": args.rate, "seed": 0, "num_warmups": 0,
            "tokenizer": str(TOKENIZER),
        },
    })  # fmt: skip


def planned(spec: StudySpec, requests: list) -> tuple[dict, int]:
    """`PlanRunner._simulate`'s inputs and figures."""
    work = study_workload(spec, requests)
    sim = simulate(MODEL, GPU, dict(FLAGS), list(work.prompt_lens), list(work.output_lens),
                   list(work.arrival_s), prompt_ids=work.prompt_id_lists())  # fmt: skip
    figures = compute_metrics(
        sim.records, sim.duration_s, selected_metrics=["ttft", "tpot"], percentiles=[99.0]
    )
    return figures, sim.preemptions


def served(spec: StudySpec, requests: list, scale: float, log: Path) -> tuple[dict, int]:
    port = free_port()
    argv = [*TUNER, "sim", "serve", "--model", MODEL, "--gpu", GPU, "--tokenizer", str(TOKENIZER)]
    argv += ["--served-model-name", "m", "--port", str(port), "--time-scale", str(scale)]
    argv += [f"--{k}={v}" for k, v in FLAGS.items()]
    process = EngineProcess.start(argv, {}, log)
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(url, 120)
        result = run_benchmark(spec.workload, url, "m", requests, tokenizer=None)
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
    finally:
        process.stop()
    preemptions = next(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("vllm:num_preemptions_total")
    )
    return result.metrics, int(preemptions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--plan-only", action="store_true")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=8000)
    parser.add_argument("--output-len", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=0.2)
    parser.add_argument("--log", type=Path, default=Path("/tmp/plan-vs-serve.log"))
    args = parser.parse_args()
    spec = study(args)
    t0 = time.monotonic()
    requests = build_requests(spec.workload, load_tokenizer(str(TOKENIZER)))
    print(f"{len(requests)} requests built in {time.monotonic() - t0:.0f} s")
    t0 = time.monotonic()
    plan, plan_pre = planned(spec, requests)
    print(f"tuner plan: {time.monotonic() - t0:.1f} s of wall time")
    rows = [("", "tuner plan", "sim serve", "serve/plan - 1")]
    if args.plan_only:
        rows += [(k, f"{plan[k]:.1f}", "", "") for k in KEYS]
        rows.append(("preemptions", str(plan_pre), "", ""))
    else:
        t0 = time.monotonic()
        serve, serve_pre = served(spec, requests, args.time_scale, args.log)
        print(f"tuner sim serve: {time.monotonic() - t0:.0f} s of wall time")
        for k in KEYS:
            rows.append((k, f"{plan[k]:.1f}", f"{serve[k]:.1f}", f"{serve[k] / plan[k] - 1:+.1%}"))
        rows.append(("preemptions", str(plan_pre), str(serve_pre), ""))
    for row in rows:
        print(f"{row[0]:<20}{row[1]:>12}{row[2]:>12}{row[3]:>16}")


if __name__ == "__main__":
    main()
