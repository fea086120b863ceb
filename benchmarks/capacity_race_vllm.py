"""The race against the incumbent against the old capacity search, on real vLLM (issue 47).

The engine is vLLM's CPU build with the tiny dummy model (`studies/cpu-tiny.yaml`'s engine:
pinned to core 1, the client kept off it, `tuner.engine.cores`), in capacity mode:
`--prompts` (100) random prompts a step of `--input-len` / `--output-len` tokens (128 / 64:
answers long enough that the engine's decode batch, not the HTTP client, bounds the rate, at
~10 req/s on the loaded box, far below the highest rate 100 prompts can show under a 200 ms
limit, 125 req/s; with 32 the defaults held at that ceiling), P90 TTFT
≤ `--ttft-ms` (200; `capacity.step_prompts` asks 10 for a P90), from 4 req/s, resolution
10 %, no rate below 2 req/s. The same configs (`CONFIGS`) for both searches, each search on
its own engine start:

- old: the search before issue 47: no race, no step budget (`max_runs` 5 + `max_repeats` 2);
- new: as a night with early stopping runs it: the first config searched whole within the
  step budget (`capacity.max_steps`, `--max-steps`, 4, as `tuner init` writes for long
  documents; a capacity found gets `capacity.INTERVAL_RUNS` more for its interval), then
  each config races the incumbent (the best capacity so far: `capacity_to_beat`'s `Beat`,
  `capacity.race_rps`); a config that breaks there reads "below X".

The box is shared and noisy, so the two searches are interleaved config by config, old then
new on one config and new then old on the next (and the other way round in the next round),
and the whole study is run `--rounds` times (each round a fresh race). Printed: each config's
capacities with their intervals, runs and engine seconds; per round, the best config by each
search (old: the highest capacity; new: the last incumbent) and whether they agree (the same
config, or the old best's capacity inside the new best's interval, counted only when that
interval is closed on both ends); the median and range of every figure over the rounds.
Written: `--out` (JSON, every search's figures). Measured, not simulated. Needs
`make vllm-env model`.

    nice -n 5 .venv/bin/python benchmarks/capacity_race_vllm.py --rounds 2 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from tuner.measure.capacity import Beat, race_high
from tuner.measure.measurement import Measurement
from tuner.run.cost import slo_rule
from tuner.runners.engine_runner import EngineRunner
from tuner.runners.trial_runner import TrialContext
from tuner.spec.study import StudySpec, load_study_spec
from tuner_testing import REPO

CONFIGS: list[dict[str, Any]] = [
    {},  # vLLM's defaults (the search space's)
    {"max-num-seqs": 8},
    {"max-num-seqs": 32},
]


def spec_for(args: argparse.Namespace, max_steps: int | None, tmp: Path) -> StudySpec:
    data = yaml.safe_load((REPO / "studies" / "cpu-tiny.yaml").read_text())
    data["name"] = "capacity-race"
    data["search_space"] = str(REPO / "search_spaces" / "cpu-tiny.yaml")
    engine = data["engine"]
    engine["command"] = [str(REPO / ".venv-vllm" / "bin" / "python"), *engine["command"][1:]]
    engine["model"] = str(REPO / ".cache" / "tiny-qwen2")
    # on the CPU backend this is the share of the box's memory vLLM checks is free at start:
    # the shared box rarely has vLLM's 0.92 of it (the KV cache is VLLM_CPU_KVCACHE_SPACE's)
    engine["flags"]["gpu-memory-utilization"] = 0.3
    w = data["workload"]
    del w["max_concurrency"]  # a capacity is a rate served
    w.update(
        {
            "num_prompts": args.prompts,
            "random_input_len": args.input_len,
            "random_output_len": args.output_len,
            "request_rate": 4.0,
            "metric_percentiles": "50,90,99",
        }
    )
    # no rate below 2 req/s: a step of 100 prompts then sends for at most 50 s
    search = {"resolution": 0.1, "max_runs": 5, "max_repeats": 2, "max_steps": max_steps}
    search["min_rps"] = 2.0
    data["objective"] = {
        "mode": "capacity",
        "slo": [f"p90_ttft_ms<={args.ttft_ms:g}"],
        "capacity": search,
    }
    path = tmp / f"race-{max_steps}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


def figures(m: Measurement) -> dict[str, Any]:
    """One search's answer, as the JSON keeps it."""
    c = m.capacity
    out: dict[str, Any] = {"engine_s": round(m.engine_s, 1)}
    if c is None:
        return {**out, "failed": m.failure_reason}
    steps = [
        {
            "rate_rps": round(s.rate_rps, 2),
            "verdict": s.verdict,
            "runs": s.runs,
            "stopped": bool(s.pruned_reason),
            "p90_ttft_ms": round(s.metrics.get("p90_ttft_ms", -1.0), 1),
            "request_throughput": round(s.metrics.get("request_throughput", -1.0), 2),
            "run_excess": [round(e, 3) for e in s.run_excess],
        }
        for s in m.rate_steps
    ]
    return {
        **out,
        "capacity_rps": c.capacity_rps,
        "low_rps": c.capacity_rps_low,
        "high_rps": c.capacity_rps_high,
        "above_rps": c.above_rps,
        "capped": c.capped,
        "runs": c.runs,
        "steps": steps,
    }


def words(f: dict[str, Any]) -> str:
    if "failed" in f:
        return f"failed ({f['failed']})"
    high = "?" if f["high_rps"] is None else f"{f['high_rps']:.3g}"
    cap, low = f["capacity_rps"], f["low_rps"] or 0
    head = f"below {f['above_rps']:.3g}" if cap == 0 and f["above_rps"] else f"{cap:.3g}"
    return f"{head} ({low:.3g}-{high}){' capped' if f['capped'] else ''}, {f['runs']} runs"


def one_round(
    r: int, runners: dict[str, EngineRunner], spec: StudySpec, log: list[dict[str, Any]]
) -> dict[str, Any]:
    """Every config by both searches, interleaved; the round's bests and engine time."""
    incumbent: tuple[int, float, Beat] | None = None  # the new search's (config, capacity)
    rule = slo_rule(spec)
    row: dict[str, Any] = {"round": r, "configs": []}
    for i, params in enumerate(CONFIGS):
        ctx = TrialContext(spec.name, i, dict(params), phase=lambda _: None)
        ctx = replace(ctx, checkpoint=rule, check_every_s=spec.pruning.check_every_s)
        got: dict[str, dict[str, Any]] = {}
        for which in ("old", "new") if (r + i) % 2 == 0 else ("new", "old"):
            beat = incumbent[2] if which == "new" and incumbent is not None else None
            load = os.getloadavg()[0]
            m = runners[which].measure(replace(ctx, log_name=f"r{r}-{which}-{i}", beat=beat))
            got[which] = {**figures(m), "load": round(load, 1), "raced": beat is not None}
        new = got["new"]
        cap = new.get("capacity_rps") or 0.0
        if isinstance(cap, float) and cap > 0 and (incumbent is None or cap > incumbent[1]):
            incumbent = (i, cap, Beat(cap, 1.0, race_high(new["high_rps"], new["above_rps"])))
        row["configs"].append({"config": params or "defaults", **got})
        print(
            f"round {r} config {i} {params or 'defaults'}: old {words(got['old'])} "
            f"{got['old']['engine_s']:.0f} s | new {words(got['new'])} "
            f"{got['new']['engine_s']:.0f} s (load {got['old']['load']}, {got['new']['load']})",
            flush=True,
        )
    configs = row["configs"]
    olds = [(c["old"].get("capacity_rps") or 0.0, i) for i, c in enumerate(configs)]
    old_cap, old_i = max(olds)
    assert incumbent is not None, "no config met the SLO in the new search"
    best = configs[incumbent[0]]["new"]
    low, high = best["low_rps"] or 0.0, best["high_rps"]
    closed = low > 0 and high is not None
    row.update(
        old_best=old_i,
        old_best_rps=old_cap,
        new_best=incumbent[0],
        new_best_rps=incumbent[1],
        new_best_interval=[low, high],
        closed=closed,
        same=old_i == incumbent[0],
        inside=closed and low <= old_cap <= high,
        old_engine_s=round(sum(c["old"]["engine_s"] for c in configs), 1),
        new_engine_s=round(sum(c["new"]["engine_s"] for c in configs), 1),
    )
    verdict = "the same" if row["same"] else "inside its interval" if row["inside"] else "DIFFERENT"
    print(
        f"round {r} best: old config {old_i} ({old_cap:.3g} req/s), new config "
        f"{incumbent[0]} ({incumbent[1]:.3g} req/s, interval {low:.3g}-"
        f"{'?' if high is None else f'{high:.3g}'}): {verdict}; engine time old "
        f"{row['old_engine_s']:.0f} s, new {row['new_engine_s']:.0f} s",
        flush=True,
    )
    log.append(row)
    return row


def spread(values: list[float]) -> str:
    """Median (min-max)."""
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="race-vllm-"))
    old_spec = spec_for(args, None, logs)
    new_spec = spec_for(args, args.max_steps, logs)
    db = f"sqlite:///{logs}/race.db"  # the runners' stored state; nothing is judged from it
    runners = {"old": EngineRunner(old_spec, logs, db), "new": EngineRunner(new_spec, logs, db)}
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        one_round(r, runners, new_spec, rows)
    agree = sum(bool(row["same"] or row["inside"]) for row in rows)
    olds = [float(row["old_engine_s"]) for row in rows]
    news = [float(row["new_engine_s"]) for row in rows]
    wall = time.monotonic() - started
    for i, params in enumerate(CONFIGS):
        caps = {
            w: [float(row["configs"][i][w].get("capacity_rps") or 0.0) for row in rows]
            for w in ("old", "new")
        }
        print(
            f"config {i} {params or 'defaults'}: old {spread(caps['old'])} req/s, "
            f"new {spread(caps['new'])} req/s (median (range) of {len(rows)} rounds)"
        )
    print(
        f"agree: {agree} of {len(rows)} rounds (the same best config, or the old best inside "
        f"the new best's closed interval); engine time old {spread(olds)} s, new "
        f"{spread(news)} s (median (range)), new < old in "
        f"{sum(n < o for n, o in zip(news, olds, strict=True))} of {len(rows)}; {wall:.0f} s "
        "wall (measured, real vLLM CPU)"
    )
    if args.out is not None:
        summary = {
            "args": vars(args) | {"out": str(args.out)},
            "wall_s": round(wall),
            "rounds": rows,
        }
        args.out.write_text(json.dumps(summary, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
