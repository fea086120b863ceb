"""Is a capacity's 95 % interval honest on fresh prompts? (issue 46, SIMULATED)

For each capacity study of the simulated 4×A6000 (DeepSeek-R1-Distill-Qwen-32B, TP=4, vLLM's
defaults: the study's baseline trial), `tuner plan STUDY --n-trials 1` (vLLM's random
dataset, 80 prompts unless the study says, seed 0, one SLO on a P99, the default search: 8
rates, 4 repeats);
its capacity and interval from `tuner trials --format json` (`capacity_rps`,
`capacity_rps_low`, `capacity_rps_high`). Then the same engine under `tuner sim serve` (real
HTTP, the simulated engine in wall time) and the tuner's own bench client (`tuner bench`,
vLLM's definitions) on fresh seeds (other prompts, other arrivals) at 0.9 × the low end and
1.15 × the high end: the interval is honest when at least 2 of 3 seeds keep the SLO at the
first and break it at the second.

    .venv/bin/python benchmarks/capacity_interval.py [--seeds 3] [--studies 0,1,2,3,4,5]

Studies 0-2 are the ones the 95 % rule (`tuner.measure.rate_verdicts`) was built against;
3-5 were added with it as stand-ins for a study it was not tuned on (4 showed a flaw that was
then fixed, so only 3 and 5 are unseen); 6 was added after the merges, unseen by anyone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner_testing import TUNER

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
MODEL, GPU = "deepseek-r1-distill-qwen-32b", "a6000"
FLAGS = {"tensor-parallel-size": 4, "max-model-len": 65536}
PROMPTS = 80


@dataclass(frozen=True)
class Study:
    input_len: int  # random_input_len
    output_len: int  # random_output_len
    limit_ms: float  # the SLO: metric <= limit_ms
    metric: str = "p99_ttft_ms"
    prompts: int = PROMPTS

    @property
    def lengths(self) -> tuple[int, int]:
        return self.input_len, self.output_len


STUDIES = [
    Study(512, 64, 1500.0),
    Study(256, 128, 1000.0),
    Study(1024, 32, 2500.0),
    Study(1024, 128, 2000.0),  # added with the 95 % rule: not tuned on
    # a P99 E2EL limit; 200 prompts show up to 200 / (4 × 6 s) = 8.3 req/s (`shown_rps`).
    # Its first run found no sure low end (E2EL floored near the limit: a new rate further
    # down is no further from it); the rule then gave each side one new rate (docs/objective.md)
    Study(512, 128, 6000.0, "p99_e2el_ms", 200),
    Study(2048, 64, 4000.0),  # added after that change: not tuned on
    Study(768, 96, 1800.0),  # added after the merges of 7 Dec (the race, the wider bands): unseen
]
LOW_FACTOR, HIGH_FACTOR = 0.9, 1.15


def study_file(folder: Path, name: str, study: Study) -> Path:
    data = {
        "name": name,
        "engine": {"model": MODEL, "flags": FLAGS},
        "hardware": {"gpu": GPU, "count": 4},
        "search_space": str(REPO / "search_spaces" / "vllm-core.yaml"),
        "workload": {
            "dataset_name": "random",
            "random_input_len": study.input_len,
            "random_output_len": study.output_len,
            "num_prompts": study.prompts,
            **({"percentile_metrics": "ttft,tpot,itl,e2el"} if "e2el" in study.metric else {}),
            "request_rate": 4.0,
            "seed": 0,
            "num_warmups": 0,
            "tokenizer": str(TOKENIZER),
        },
        "objective": {"mode": "capacity", "slo": [f"{study.metric}<={study.limit_ms:g}"]},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def capacity_of(study: Path) -> dict:
    """`tuner plan` the study's baseline, then its capacity row from `tuner trials`."""
    run = [*TUNER, "plan", str(study), "--n-trials", "1"]
    subprocess.run(run, cwd=study.parent, check=True, capture_output=True, text=True)
    listed = [*TUNER, "trials", str(study), "--simulated", "--format", "json"]
    out = subprocess.run(listed, cwd=study.parent, check=True, capture_output=True, text=True)
    (row,) = json.loads(out.stdout)
    return row


def bench_p99(url: str, study: Study, rate: float, seed: int, folder: Path) -> float:
    """The study's SLO figure (ms) of one `tuner bench` run at `rate` on `seed` (fresh prompts
    and arrivals)."""
    saved = folder / f"bench-{rate:.4f}-{seed}.json"
    argv = [*TUNER, "bench", "--base-url", url, "--model", "m", "--tokenizer", str(TOKENIZER)]
    argv += ["--dataset-name", "random", "--random-input-len", str(study.input_len)]
    argv += ["--random-output-len", str(study.output_len), "--num-prompts", str(study.prompts)]
    argv += ["--request-rate", f"{rate:.6f}", "--seed", str(seed)]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el"]
    argv += ["--save-result", str(saved), "--force"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tuner bench failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(saved.read_text())[study.metric])


def served(
    study: Study, folder: Path, points: list[tuple[str, float]], seeds: list[int]
) -> dict[str, list[float]]:
    """Each (label, rate) of `points` benched on every seed against one `tuner sim serve`; the
    k-th point on the seeds + 100 k: the engine keeps its prefix cache between runs, and a
    seed's prompts sent twice would find themselves cached."""
    port = free_port()
    argv = [*TUNER, "sim", "serve", "--model", MODEL, "--gpu", GPU, "--tokenizer", str(TOKENIZER)]
    argv += ["--served-model-name", "m", "--port", str(port)]
    argv += [f"--{k}={v}" for k, v in FLAGS.items()]
    process = EngineProcess.start(argv, {}, folder / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(url, 120)
        return {
            label: [bench_p99(url, study, rate, s + 100 * k, folder) for s in seeds]
            for k, (label, rate) in enumerate(points)
        }
    finally:
        process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--studies", default=",".join(str(i) for i in range(len(STUDIES))))
    args = parser.parse_args()
    seeds = [101 + i for i in range(args.seeds)]  # the study's own seed is 0
    chosen = [int(i) for i in args.studies.split(",")]
    honest = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in chosen:
            study, folder = STUDIES[i], Path(tmp) / f"s{i}"
            folder.mkdir()
            t0 = time.monotonic()
            row = capacity_of(study_file(folder, f"cap-interval-{i}", study))
            cap, low, high = row["capacity_rps"], row["capacity_rps_low"], row["capacity_rps_high"]
            steps = row["rate_steps"]
            runs = sum(s["runs"] for s in steps)
            shown_high = "?" if high is None else f"{high:.2f}"
            print(
                f"random {study.input_len}/{study.output_len}, {study.prompts} prompts, "
                f"{study.metric} <= {study.limit_ms:g}: capacity {cap:.2f} req/s "
                f"({low:.2f}-{shown_high}), {len(steps)} rates, {runs} runs; "
                f"plan {time.monotonic() - t0:.0f} s"
            )
            points = [("low", LOW_FACTOR * low)] if low else []
            points += [("high", HIGH_FACTOR * high)] if high else []
            t0 = time.monotonic()
            found = served(study, folder, points, seeds)
            ok = len(points) == 2
            for label, rate in points:
                p99 = found[label]
                kept = sum(v <= study.limit_ms for v in p99)
                count = kept if label == "low" else len(p99) - kept
                want = count >= 2
                ok &= want
                verdict = "kept" if label == "low" else "broke"
                print(
                    f"  {LOW_FACTOR if label == 'low' else HIGH_FACTOR} x {label}: {rate:.2f} "
                    f"req/s, {study.metric} {', '.join(f'{v:.0f}' for v in p99)} on fresh seeds: "
                    f"{verdict} the SLO on {count} of {len(p99)} -> {'OK' if want else 'FAIL'}"
                )
            honest += ok
            print(f"  bench {time.monotonic() - t0:.0f} s")
    print(f"honest intervals: {honest} of {len(chosen)} studies (SIMULATED)")


if __name__ == "__main__":
    main()
