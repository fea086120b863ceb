"""Overnight-style soak: >= 100 simulated trials with random faults and random tuner deaths.

Not a CI test (it takes minutes). It drives `tuner run` the way a bad night would: each
invocation gets a random engine fault (crash mid-workload, hang, refusal at start, slow
start past the timeout, or none), and some invocations are killed with SIGKILL or stopped
with Ctrl-C while a trial runs. At the end it checks what docs/reliability.md reports:
trials completed, faults survived, stale trials, orphaned engine processes, rows lost.

    .venv/bin/python benchmarks/soak.py --trials 100 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import optuna
import yaml

from tuner.engine.process import group_members
from tuner.testing import TUNER, sim_study

REPO = Path(__file__).resolve().parent.parent


FAULTS = {
    "none": {},
    "crash": {"fault-crash-after": 6},
    "hang": {"fault-hang-after": 6},
    "refuse": {"fault-refuse-start": True},
    "slow-start": {"fault-slow-start-s": 30},
}


def _set_fault(study: Path, fault: str) -> None:
    data = yaml.safe_load(study.read_text())
    flags = {k: v for k, v in data["engine"]["flags"].items() if not k.startswith("fault-")}
    data["engine"]["flags"] = {**flags, **FAULTS[fault]}
    data["engine"]["startup_timeout_s"] = 6
    study.write_text(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--per-run", type=int, default=4)
    ap.add_argument("--kill-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/tuner-soak"))
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuner.db").unlink(missing_ok=True)
    tok = REPO / ".cache" / "tiny-qwen2"
    study = sim_study(out, tok, budget={"n_trials": args.trials})
    t0 = time.monotonic()
    counts = {"invocations": 0, "sigkill": 0, "sigint": 0}
    fault_runs = {k: 0 for k in FAULTS}
    storage = f"sqlite:///{out}/tuner.db"
    while True:
        done = _finished(storage)
        if done >= args.trials:
            break
        fault = rng.choice(list(FAULTS))
        fault_runs[fault] += 1
        _set_fault(study, fault)
        counts["invocations"] += 1
        proc = subprocess.Popen(
            [*TUNER, "run", str(study), "--n-trials", str(args.per_run)],
            cwd=out,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if rng.random() < args.kill_share:
            time.sleep(rng.uniform(2.0, 8.0))
            how = rng.choice(["sigkill", "sigint"])
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL if how == "sigkill" else signal.SIGINT)
                counts[how] += 1
        _, err = proc.communicate(timeout=600)
        if proc.returncode not in (0, 130, -2, -9):  # -2: Ctrl-C landed as it exited
            raise SystemExit(f"tuner run failed ({proc.returncode}): {err.decode()[-2000:]}")
    # One last run recovers whatever the last kill left (and runs nothing if the budget is met).
    _set_fault(study, "none")
    final = subprocess.run([*TUNER, "run", str(study)], cwd=out, capture_output=True)
    report = _report(storage, out)
    report.update(
        counts,
        faults_injected=fault_runs,
        wall_s=round(time.monotonic() - t0, 1),
        final_run_rc=final.returncode,
    )
    print(json.dumps(report, indent=2))


def _finished(storage: str) -> int:
    try:
        study = optuna.load_study(study_name="e2e", storage=storage)
    except KeyError:
        return 0
    return sum(
        1
        for t in study.trials
        if t.state.is_finished() and t.user_attrs.get("failure_kind") != "interrupted"
    )


def _report(storage: str, out: Path) -> dict:
    trials = optuna.load_study(study_name="e2e", storage=storage).trials
    with sqlite3.connect(out / "tuner.db") as db:
        rows = dict(db.execute("SELECT trial_number, outcome FROM tuner_trials").fetchall())
        requests = dict(
            db.execute(
                "SELECT trial_number, COUNT(*) FROM tuner_requests GROUP BY trial_number"
            ).fetchall()
        )
        engines = [json.loads(i) for (i,) in db.execute("SELECT identity FROM tuner_engines")]
        running_rows = db.execute("SELECT COUNT(*) FROM tuner_engines WHERE running").fetchone()
    kinds: dict[str, int] = {}
    lost = 0
    for t in trials:
        kind = t.user_attrs.get("failure_kind", "measured" if t.state.name == "COMPLETE" else "-")
        kinds[kind] = kinds.get(kind, 0) + 1
        if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs:
            lost += _rows_missing(t, kind, rows, requests)
    return {
        "trials": len(trials),
        "by_outcome": kinds,
        "stale_running_trials": sum(1 for t in trials if t.state.name == "RUNNING"),
        "orphaned_engine_processes": sum(len(group_members(e["pgid"])) for e in engines),
        "engines_marked_running": running_rows[0],
        "rows_lost": lost,
    }


def _rows_missing(t: optuna.trial.FrozenTrial, kind: str, rows: dict, requests: dict) -> int:
    """1 when a finished trial lacks its row, or a measured one lacks any request record."""
    if t.number not in rows:
        return 1
    expected = t.user_attrs.get("completed", 0) + t.user_attrs.get("failed", 0)
    return int(kind == "measured" and requests.get(t.number, 0) != expected)


if __name__ == "__main__":
    main()
