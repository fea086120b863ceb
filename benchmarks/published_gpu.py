"""The simulator against published real-GPU vLLM measurements (benchmarks/published/cases.yaml).

Every case runs through the `tuner plan` CLI, as a user would: a study file per case (the
case's model, GPU, TP, flags and workload; a one-point search space, so the one trial is the
case's own config), `tuner plan --n-trials 1`, then `tuner trials --simulated --format json`
(the trial's state) and `tuner pareto --simulated --format json` (every figure of the trial).
A model that `tuner` does not know built-in is written as a directory holding a config.json
with the model's published shape; the prompts' text comes from the tiny tokenizer (the
planner needs only their lengths). Prints, per case, each published figure beside the
SIMULATED one and their ratio; then the median |simulated/published - 1| per metric family
(throughput, TTFT, TPOT) over the V1 cases, for the "fit" cases and the "held out" ones
apart, the V0 cases (out of the simulator's regime) on their own line, and the worst
figures.

    .venv/bin/python benchmarks/published_gpu.py [--case ID ...] [--split fit|held_out]
        [--json OUT]

About 10-60 s per case on one core (the CLI's start, then the simulation). These figures are
in-sample (the built-in profiles' constants were chosen on these cases); the headline, each
source predicted by constants fitted on the others, is benchmarks/published_cv.py's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml
from sharegpt_lengths import MAX_PROMPT_LEN, MAX_TOTAL_LEN, MIN_LEN, valid

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks" / "published" / "cases.yaml"
# ShareGPT_V3's prompt/reply lengths after vLLM's filter (benchmarks/sharegpt_lengths.py)
SHAREGPT_LENGTHS = REPO / "benchmarks" / "published" / "sharegpt_v3_lengths.yaml"
TUNER = [sys.executable, "-m", "tuner.cli"]
SPLITS = ("fit", "held_out")
ENGINES = ("V0", "V1")
FAMILIES = {
    "throughput": ("request_throughput", "output_throughput", "total_token_throughput"),
    "ttft": ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"),
    "tpot": ("mean_tpot_ms", "median_tpot_ms"),
}
METRICS = tuple(k for keys in FAMILIES.values() for k in keys)
CASE_FIELDS = ("id", "split", "source", "gpu", "gpu_count", "tp", "vllm_version", "engine")
CASE_FIELDS += ("model", "flags", "workload", "published")
SOURCE_FIELDS = ("url", "repo", "path", "commit", "quote")
WORKLOAD_FIELDS = ("endpoint", "dataset", "num_prompts")
DATASET_FIELDS = {"random": ("input_len", "output_len"), "sharegpt": ()}


def load_cases(path: Path = CASES) -> dict:
    return yaml.safe_load(path.read_text())


def case_problems(data: dict) -> list[str]:
    """Every way the cases file is malformed, one line each (empty when it is well-formed)."""
    from tuner.sim.profiles import BUILTIN_MODELS, GPUS

    problems = []
    models = data.get("models") or {}
    cases = data.get("cases") or []
    ids = [c.get("id") for c in cases]
    if len(set(ids)) != len(ids):
        problems.append("case ids repeat")
    for case in cases:
        where = f"case {case.get('id')!r}"
        missing = [f for f in CASE_FIELDS if f not in case]
        if missing:
            problems.append(f"{where}: lacks {', '.join(missing)}")
            continue
        problems += _case_value_problems(where, case, models, BUILTIN_MODELS, GPUS)
    return problems


def _case_value_problems(where, case, models, builtin_models, gpus) -> list[str]:
    problems = []
    source, work, published = case["source"], case["workload"], case["published"]
    if case["split"] not in SPLITS:
        problems.append(f"{where}: split must be one of {SPLITS}")
    if case["engine"] not in ENGINES:
        problems.append(f"{where}: engine must be V0 or V1 (mark V0 sources)")
    if case["gpu"] not in gpus:
        problems.append(f"{where}: unknown gpu {case['gpu']!r}")
    if case["model"] not in models and case["model"] not in builtin_models:
        problems.append(f"{where}: model {case['model']!r} is neither in models: nor built in")
    if not (1 <= case["tp"] <= case["gpu_count"]):
        problems.append(f"{where}: tp must be 1..gpu_count")
    problems += [f"{where}: source lacks {f}" for f in SOURCE_FIELDS if f not in source]
    if not source.get("quote") or not source.get("url"):
        problems.append(f"{where}: source needs its url and the quoted row")
    problems += [f"{where}: workload lacks {f}" for f in WORKLOAD_FIELDS if f not in work]
    if work.get("dataset") not in DATASET_FIELDS:
        problems.append(f"{where}: workload dataset must be one of {tuple(DATASET_FIELDS)}")
    needed = DATASET_FIELDS.get(work.get("dataset"), ())
    problems += [
        f"{where}: a {work['dataset']} workload lacks {f}" for f in needed if f not in work
    ]
    if not published:
        problems.append(f"{where}: no published figure")
    for key, fig in published.items():
        if key not in METRICS:
            problems.append(f"{where}: published {key!r} is not a compared vLLM result key")
        elif not isinstance(fig, dict) or not _positive(fig.get("value")) or "stat" not in fig:
            problems.append(f"{where}: published {key} needs a positive value and its stat")
        elif "factor" in fig and not (_positive(fig["factor"]) and fig.get("why")):
            problems.append(f"{where}: published {key}'s factor needs a positive value and why")
    return problems


def _positive(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def study_for(case: dict, model_dir: str, tokenizer: str, dataset: str | None = None) -> dict:
    """The study file that runs `case` as trial 0 of `tuner plan`; a ShareGPT case reads
    `dataset`, its stand-in ShareGPT file (`write_sharegpt_standin`)."""
    flags = dict(case["flags"])
    seqs = flags.pop("max-num-seqs")  # the one searched (one-choice) parameter
    work = case["workload"]
    workload = {"endpoint": work["endpoint"], "tokenizer": tokenizer}
    if work["dataset"] == "sharegpt":  # as `vllm bench serve --dataset-name sharegpt` sends it
        workload |= {"dataset_name": "sharegpt", "dataset_path": dataset, "ignore_eos": False}
    else:
        workload |= {
            "dataset_name": "random",
            "random_input_len": work["input_len"],
            "random_output_len": work["output_len"],
            "random_range_ratio": work.get("range_ratio", 0.0),
            "ignore_eos": True,
        }
    workload |= {
        "num_prompts": work["num_prompts"],
        "request_rate": float(work.get("request_rate", math.inf)),
        "seed": 0,  # `vllm bench serve`'s default --seed
        "percentile_metrics": "ttft,tpot,itl",
        "metric_percentiles": "99",
    }
    if work.get("max_concurrency"):
        workload["max_concurrency"] = work["max_concurrency"]
    return {
        "name": f"published-{case['id']}",
        "engine": {
            "model": model_dir,
            "flags": {"tensor-parallel-size": case["tp"], **flags},
        },
        "hardware": {"gpu": case["gpu"], "count": case["gpu_count"]},
        "search_space": {
            "parameters": {
                "max-num-seqs": {"type": "categorical", "choices": [seqs], "default": seqs}
            }
        },
        "workload": workload,
        "budget": {"n_trials": 1},
    }


def write_case_study(case: dict, models: dict, tokenizer: Path, workdir: Path) -> Path:
    """The case's study file in `workdir` (a model the simulator lacks gets a directory with
    its published `config.json`; a ShareGPT case, its stand-in ShareGPT file): what `tuner
    plan` and the fit both read."""
    model = case["model"]
    if model in models:
        model_dir = workdir / model
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(models[model]))
        model = str(model_dir)
    dataset = None
    if case["workload"]["dataset"] == "sharegpt":
        dataset = workdir / f"{case['id']}-sharegpt.json"
        write_sharegpt_standin(dataset, case["workload"], tokenizer)
    study = workdir / f"{case['id']}.yaml"
    text = yaml.safe_dump(
        study_for(case, model, str(tokenizer), dataset and str(dataset)), sort_keys=False
    )
    study.write_text(text)
    return study


# ---- the ShareGPT stand-in ------------------------------------------------------------------


def sharegpt_lengths(
    n: int, seed: int, *, input_total: int | None = None, output_total: int | None = None
) -> tuple[list[int], list[int]]:
    """`n` (prompt, output) token lengths that follow ShareGPT_V3 as vLLM samples it.

    Each side is drawn from its quantiles in SHAREGPT_LENGTHS (inverse CDF, linear between
    them), the two tied by a Gaussian copula at the table's rank correlation (long prompts get
    short replies); a pair vLLM's filter would skip is drawn again. A side with a total (the
    published run's "Total input/generated tokens") is scaled to it: the table's shape, the
    run's own scale (its tokenizer is Qwen3's, the table's Tekken's)."""
    table = yaml.safe_load(SHAREGPT_LENGTHS.read_text())
    rho = 2.0 * math.sin(math.pi * table["spearman"] / 6.0)  # Spearman -> Pearson of the normals
    rng = np.random.default_rng(seed)
    prompts = np.zeros(0, dtype=np.int64)
    outputs = np.zeros(0, dtype=np.int64)
    while len(prompts) < n:
        z = rng.standard_normal((2, n))
        z[1] = rho * z[0] + math.sqrt(1.0 - rho * rho) * z[1]
        u = [0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in row])) for row in z]
        p = _inverse_cdf(table["input"]["quantiles"], u[0])
        o = _inverse_cdf(table["output"]["quantiles"], u[1])
        keep = _vllm_keeps(p, o)
        prompts, outputs = np.concatenate([prompts, p[keep]]), np.concatenate([outputs, o[keep]])
    prompts, outputs = prompts[:n], outputs[:n]
    prompts = _scaled_to(prompts, input_total, low=SHAREGPT_MIN, high=SHAREGPT_MAX_PROMPT)
    outputs = _scaled_to(outputs, output_total, low=SHAREGPT_MIN, high=None)
    outputs = np.minimum(outputs, SHAREGPT_MAX_TOTAL - prompts)  # rescaling kept inside the filter
    return prompts.tolist(), outputs.tolist()


# vLLM's `is_valid_sequence` defaults and filter, where the table was made
SHAREGPT_MIN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN
_vllm_keeps = valid


def _inverse_cdf(quantiles: dict, u: np.ndarray) -> np.ndarray:
    levels = np.array([float(k) for k in quantiles]) / 100.0
    values = np.array([float(v) for v in quantiles.values()])
    return np.rint(np.interp(u, levels, values)).astype(np.int64)


def _scaled_to(x: np.ndarray, total: int | None, *, low: int, high: int | None) -> np.ndarray:
    """`x` scaled so that it sums to `total` (largest remainders take the rounding), then
    held within [low, high]; unchanged without a total."""
    if total is None:
        return x
    exact = x * (total / x.sum())
    out = np.floor(exact).astype(np.int64)
    short = int(total - out.sum())
    out[np.argsort(out - exact)[:short]] += 1  # the largest fractional parts
    return np.clip(out, low, high)


def write_sharegpt_standin(path: Path, work: dict, tokenizer_dir: Path) -> None:
    """A ShareGPT-format file of `num_prompts` conversations whose first two turns are exactly
    the drawn lengths in the tiny tokenizer's tokens (`sharegpt_lengths`, seed 0): the tuner
    reads it as `vllm bench serve --dataset-name sharegpt` reads ShareGPT_V3 (the same filter,
    shuffle and seed), and the simulator needs only the lengths."""
    from tuner.workload.tokenizer import decode, load_tokenizer

    tokenizer = load_tokenizer(str(tokenizer_dir))
    words = [decode(tokenizer, [t]) for t in range(int(tokenizer.vocab_size))]
    words = [w for w in words if len(w) > 1 and w[0] == " " and w[1:].isalpha()]
    words = [w for w in words if len(tokenizer.encode(w, add_special_tokens=False)) == 1]
    n = work["num_prompts"]
    prompts, outputs = sharegpt_lengths(
        n, 0, input_total=work.get("input_tokens"), output_total=work.get("output_tokens")
    )
    rng = np.random.default_rng(1)

    def text(length: int) -> str:  # one-token words: the text is exactly `length` tokens
        return "".join(rng.choice(words, size=length).tolist())

    conversations = [
        {
            "id": f"standin-{k}",
            "conversations": [
                {"from": "human", "value": text(p)},
                {"from": "gpt", "value": text(o)},
            ],
        }
        for k, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    path.write_text(json.dumps(conversations))


def simulate_case(case: dict, models: dict, tokenizer: Path, workdir: Path) -> dict:
    """The SIMULATED figures of `case`, by the `tuner plan` CLI; {"failure": why} if none."""
    study = write_case_study(case, models, tokenizer, workdir)
    storage = f"sqlite:///{workdir / (case['id'] + '.db')}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    plan = subprocess.run(
        [*TUNER, "plan", str(study), "--n-trials", "1", "--storage", storage],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
    )
    if plan.returncode not in (0, 1):
        return {"failure": (plan.stderr.strip().splitlines() or ["?"])[-1]}
    shown = subprocess.run(
        [*TUNER, "trials", str(study), "--simulated", "--format", "json", "--storage", storage],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        check=True,
    )
    trial = json.loads(shown.stdout)[0]
    if trial.get("failure"):
        return {"failure": trial["failure"]}
    # `tuner pareto --format json` prints every stored metric of the front's trials
    front = subprocess.run(
        [*TUNER, "pareto", str(study), "--simulated", "--format", "json", "--storage", storage],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        check=True,
    )
    metrics = json.loads(front.stdout)[0]["metrics"]
    return {k: metrics[k] for k in METRICS if metrics.get(k) is not None}


def compare(case: dict, simulated: dict) -> list[dict]:
    """One row per published figure: published (as compared), simulated, their ratio."""
    rows = []
    for key, fig in case["published"].items():
        published = fig["value"] * fig.get("factor", 1.0)
        sim = simulated.get(key)
        ratio = sim / published if sim is not None else None
        rows.append(
            {
                "case": case["id"],
                "split": case["split"],
                "engine": case["engine"],
                "metric": key,
                "stat": fig["stat"],
                "published": published,
                "simulated": sim,
                "ratio": ratio,
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Median |ratio - 1| per family and split, and how many figures are off by over 2x.

    The splits (fit, held_out, all) count the V1 cases only: the simulator models vLLM V1
    (vLLM 0.32, which the tuner targets, has no V0 engine), so a V0 case is out of its regime
    and is reported apart, under "V0" (docs/simulator.md, "How close (real GPUs)")."""
    out = {}
    v1 = [r for r in rows if r["engine"] == "V1"]
    for split in (*SPLITS, "all", "V0"):
        if split == "V0":
            chosen = [r for r in rows if r["engine"] == "V0" and r["ratio"]]
        else:
            chosen = [r for r in v1 if split in ("all", r["split"]) and r["ratio"]]
        for family, keys in FAMILIES.items():
            errors = [abs(r["ratio"] - 1.0) for r in chosen if r["metric"] in keys]
            out[f"{split}/{family}"] = {
                "median_abs_error": statistics.median(errors) if errors else None,
                "figures": len(errors),
                "over_2x": sum(1 for r in chosen if r["metric"] in keys and _off_2x(r)),
            }
    return out


# Issue 32's targets over the repo's V1 cases: median |SIMULATED/published - 1| per family
TARGETS = {"throughput": 0.10, "ttft": 0.15, "tpot": 0.10}


def missed_targets(summary_: dict) -> list[str]:
    """Each family whose median error over all the V1 cases is above its target (or has no
    figure), one line each; empty when every target is met."""
    missed = []
    for family, target in TARGETS.items():
        got = summary_[f"all/{family}"]["median_abs_error"]
        if got is None or got > target:
            shown = "no figure" if got is None else f"{got * 100:.1f} %"
            missed.append(f"{family}: {shown} against the target {target * 100:.0f} %")
    return missed


def _off_2x(row: dict) -> bool:
    return row["ratio"] > 2.0 or row["ratio"] < 0.5


def _tokenizer(workdir: Path) -> Path:
    """The repo's tiny tokenizer (`make model`), else a fresh one in `workdir`."""
    shipped = REPO / ".cache" / "tiny-qwen2"
    if (shipped / "tokenizer.json").is_file():
        return shipped
    from tuner.tools.tinymodel import make_tiny_model

    return make_tiny_model(workdir / "tiny-qwen2")


def run(case_ids: list[str] | None, split: str | None, cases_path: Path = CASES) -> dict:
    data = load_cases(cases_path)
    problems = case_problems(data)
    if problems:
        raise SystemExit("cases file malformed: " + "; ".join(problems))
    cases = [
        c
        for c in data["cases"]
        if (not case_ids or c["id"] in case_ids) and (split is None or c["split"] == split)
    ]
    rows, failures = [], {}
    with tempfile.TemporaryDirectory(prefix="published-gpu-") as tmp:
        workdir = Path(tmp)
        tokenizer = _tokenizer(workdir)
        for case in cases:
            simulated = simulate_case(case, data.get("models") or {}, tokenizer, workdir)
            if "failure" in simulated:
                failures[case["id"]] = simulated["failure"]
                print(f"{case['id']}: NOT SIMULATED: {simulated['failure']}", flush=True)
                continue
            case_rows = compare(case, simulated)
            rows += case_rows
            _print_case(case, case_rows)
    return {"rows": rows, "failures": failures, "summary": summary(rows)}


def _print_case(case: dict, rows: list[dict]) -> None:
    v0 = " (V0)" if case["engine"] == "V0" else ""
    assumed = " (GPU assumed)" if case.get("gpu_assumed") else ""
    gpus = f"{case['gpu_count']}x{case['gpu']}{assumed} TP={case['tp']}"
    print(f"\n{case['id']} [{case['split']}] {gpus} vLLM {case['vllm_version']}{v0}")
    for r in rows:
        print(
            f"  {r['metric']:<24} published {r['published']:>12.2f}   SIMULATED "
            f"{r['simulated']:>12.2f}   x{r['ratio']:.2f}",
            flush=True,
        )


def print_summary(result: dict, worst: int = 8) -> None:
    print("\nmedian |SIMULATED/published - 1| (figures; off by more than 2x); fit, held_out")
    print("and all count the V1 cases; V0 (out of regime: the simulator is V1) apart:")
    for key, s in result["summary"].items():
        if s["figures"]:
            print(
                f"  {key:<22} {s['median_abs_error'] * 100:6.1f} %  "
                f"({s['figures']} figures; {s['over_2x']} over 2x)"
            )
    missed = missed_targets(result["summary"])
    targets = ", ".join(f"{f} <= {t * 100:.0f} %" for f, t in TARGETS.items())
    print(f"issue 32's targets ({targets}): " + ("; ".join(missed) or "met"))
    rows = sorted(result["rows"], key=lambda r: -abs(math.log(r["ratio"])))
    print(f"\nworst {min(worst, len(rows))} figures:")
    for r in rows[:worst]:
        v0 = ", V0" if r["engine"] == "V0" else ""
        print(f"  x{r['ratio']:<6.2f} {r['case']} {r['metric']} [{r['split']}{v0}]")
    for case_id, why in result["failures"].items():
        print(f"  NOT SIMULATED {case_id}: {why}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="only this case id (repeatable)")
    parser.add_argument("--split", choices=SPLITS, help="only the fit or the held-out cases")
    parser.add_argument("--cases", type=Path, default=CASES, help="the cases file")
    parser.add_argument("--json", type=Path, help="write every row and the summary here")
    args = parser.parse_args(argv)
    result = run(args.case, args.split, args.cases)
    print_summary(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
