"""Scale-out on the simulated engine: 1, 2 and 4 workers on one PostgreSQL study, and 1 or 2
GPU slots in one run, at a fixed total budget. SIMULATED: `tuner sim serve` engines, so
trials/hour measures the tuner's coordination, not a GPU.

For each setting it reports trials/hour (counted trials over wall time), budget exactness
(counted trials against `n_trials`; the overshoot is bounded by the trials in flight),
duplicates (pairs of trials that measured one config at overlapping times: must be 0),
configs reused, and, with 3 workers one of which is `kill -9`'d mid-trial, the seconds from
the kill until a survivor has ended its trial as interrupted.

    .venv/bin/python benchmarks/scale_out.py --trials 12 --repeats 2 --out /tmp/scale-out

Needs PostgreSQL 15 (`initdb`, `pg_ctl`); it starts its own on a free loopback port.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from tuner.tools.tinymodel import make_tiny_model
from tuner_testing import (
    TUNER,
    PostgresServer,
    counted,
    measured_at_once,
    postgres_missing,
    sim_study,
    start_workers,
)

WORKLOAD = {"num_prompts": 32, "request_rate": 8}  # ~4 s of workload per trial
STUDY = "e2e"


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name=STUDY, storage=url).get_trials()
    except KeyError:
        return []


def _figures(trials: list[Any], n: int, wall_s: float) -> dict[str, Any]:
    done = counted(trials)
    return {
        "wall_s": round(wall_s, 1),
        "counted": done,
        "budget": n,
        "trials_per_hour": round(done / wall_s * 3600, 1),
        "duplicates_at_once": measured_at_once(trials),
        "reused": sum(1 for t in trials if "reused_from" in t.user_attrs),
        "left_running": sum(1 for t in trials if t.state == optuna.trial.TrialState.RUNNING),
    }


def workers_run(pg: PostgresServer, tmp: Path, model: Path, workers: int, n: int) -> dict:
    url = pg.new_database()
    d = Path(tempfile.mkdtemp(dir=tmp))
    study = sim_study(d, model, budget={"n_trials": n}, workload=WORKLOAD)
    t0 = time.monotonic()
    procs = start_workers(study, url, workers, d)
    codes = [p.wait(timeout=1800) for p in procs]
    out = _figures(_trials(url), n, time.monotonic() - t0)
    return {"workers": workers, "exit_codes": codes, **out}


def kill_run(pg: PostgresServer, tmp: Path, model: Path, n: int, heartbeat_s: float) -> dict:
    """3 workers; the second is kill -9'd 1.5 s into its first trial."""
    url = pg.new_database()
    d = Path(tempfile.mkdtemp(dir=tmp))
    study = sim_study(d, model, budget={"n_trials": n}, workload=WORKLOAD)
    env = {"TUNER_HEARTBEAT_S": str(heartbeat_s)}
    t0 = time.monotonic()
    procs = start_workers(study, url, 3, d, env=env)
    victim, target = procs[1], None
    while target is None and time.monotonic() - t0 < 300:
        time.sleep(0.2)
        for t in _trials(url):
            owner = t.system_attrs.get("tuner:owner") or {}
            running = t.state == optuna.trial.TrialState.RUNNING
            if running and owner.get("pid") == victim.pid and "host" in t.user_attrs:
                target = t.number
    time.sleep(1.5)
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.time()
    victim.wait()
    codes = [p.wait(timeout=1800) for p in procs if p is not victim]
    trials = _trials(url)
    dead = next(t for t in trials if t.number == target)
    out = _figures(trials, n, time.monotonic() - t0)
    return {
        "heartbeat_s": heartbeat_s,
        "exit_codes": codes,
        "killed_trial_state": dead.state.name,
        "killed_trial_kind": dead.user_attrs.get("failure_kind"),
        "recovered_after_s": round(dead.datetime_complete.timestamp() - killed, 2),
        **out,
    }


def slots_run(tmp: Path, model: Path, slots: int, n: int) -> dict:
    d = Path(tempfile.mkdtemp(dir=tmp))
    study = sim_study(d, model, budget={"n_trials": n}, workload=WORKLOAD)
    url = f"sqlite:///{d}/tuner.db"
    args = ["--gpus", f"0-{slots - 1}", "--gpus-per-trial", "1"] if slots > 1 else []
    t0 = time.monotonic()
    run = subprocess.run(
        [*TUNER, "run", str(study), "--storage", url, *args], cwd=d, capture_output=True
    )
    out = _figures(_trials(url), n, time.monotonic() - t0)
    return {"slots": slots, "exit_codes": [run.returncode], **out}


def _median(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    med = statistics.median(values)
    return f"{med:g} ({min(values):g}–{max(values):g})" if len(values) > 1 else f"{med:g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=12, help="the study's n_trials")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--heartbeat-s", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/scale-out"))
    args = ap.parse_args()
    why = postgres_missing()
    if why:
        raise SystemExit(f"scale_out: {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    model = make_tiny_model(args.out / "tiny")
    pg = PostgresServer().start()
    results: dict[str, list[dict]] = {}
    try:
        for _ in range(args.repeats):
            for w in (int(x) for x in args.workers.split(",")):
                results.setdefault(f"pg-{w}-workers", []).append(
                    workers_run(pg, args.out, model, w, args.trials)
                )
            results.setdefault("pg-3-workers-kill", []).append(
                kill_run(pg, args.out, model, args.trials, args.heartbeat_s)
            )
            for s in (1, 2):
                results.setdefault(f"sqlite-{s}-slots", []).append(
                    slots_run(args.out, model, s, args.trials)
                )
    finally:
        pg.stop()
    (args.out / "scale_out.json").write_text(json.dumps(results, indent=2))
    print(
        f"SIMULATED engine; budget {args.trials} trials; {args.repeats} repeat(s); median (range)"
    )
    print(
        "| setting | trials/hour | counted / budget | duplicates at once | reused "
        "| recovered after s |"
    )
    print("|---|---|---|---|---|---|")
    bad = False
    for name, rows in results.items():
        rec = _median(rows, "recovered_after_s") if "recovered_after_s" in rows[0] else "-"
        print(
            f"| {name} | {_median(rows, 'trials_per_hour')} | {_median(rows, 'counted')} / "
            f"{args.trials} | {max(r['duplicates_at_once'] for r in rows)} | "
            f"{_median(rows, 'reused')} | {rec} |"
        )
        for r in rows:
            bad |= r["duplicates_at_once"] > 0 or r["left_running"] > 0
            bad |= any(c != 0 for c in r["exit_codes"]) or r["counted"] < args.trials
    print(f"raw: {args.out / 'scale_out.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
