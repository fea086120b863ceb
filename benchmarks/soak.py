"""Overnight-style soak: simulated trials under random faults and random tuner deaths.

Not a CI test (it takes minutes). It drives `tuner run` the way a bad night would: each
invocation gets a random engine fault (crash mid-workload, hang, refusal at start, slow start
past the timeout, or none), set by editing the study file's engine flags, which changes what
a trial measures, so every invocation passes `--accept-changes` (each fault is its own spec).
Some invocations are stopped mid-trial by SIGKILL, Ctrl-C, SIGTERM or SIGHUP; some are
preceded by an edit of the study file run without `--accept-changes` (which must be refused
with one line, adding no trial), and some get a second `tuner run` of the same study while a
trial runs (which must be refused, adding no trial and leaving the current spec alone). Some
invocations run with `--n-trials`, the others up to the study's per-spec budget.

At the end it checks what docs/reliability.md reports: stale trials, orphaned engine
processes, engines marked running, rows lost, results reused across specs, and the budget
(per invocation and per spec). Any check that fails is listed under "violations" and the
script exits 1.

    .venv/bin/python benchmarks/soak.py --trials 40 --out /tmp/soak
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import yaml

from tuner.engine.process import group_members
from tuner.testing import TUNER, sim_study

REPO = Path(__file__).resolve().parent.parent
STUDY = "e2e"

FAULTS = {
    "none": {},
    "crash": {"fault-crash-after": 6},
    "hang": {"fault-hang-after": 6},
    "refuse": {"fault-refuse-start": True},
    "slow-start": {"fault-slow-start-s": 30},
}
# How a stop signal may end a run: 128 + signum from the tuner's handler, or death by the
# signal itself (negative) when it landed after the run's loop had ended and the default
# handlers were back, i.e. while the tuner printed its summary or the interpreter exited. The
# harness accepts the latter only when the summary line was printed (the loop had finished).
KILLS = {
    "sigkill": (signal.SIGKILL, ()),
    "sigint": (signal.SIGINT, (130,)),
    "sigterm": (signal.SIGTERM, (143,)),
    "sighup": (signal.SIGHUP, (129,)),
}
SUMMARY = re.compile(r"(\d+) trial\(s\) run, (\d+) of them new configs")
NOTHING_STARTS = "engine starts all failed the same way"


def _set_fault(study: Path, fault: str) -> None:
    data = yaml.safe_load(study.read_text())
    flags = {k: v for k, v in data["engine"]["flags"].items() if not k.startswith("fault-")}
    data["engine"]["flags"] = {**flags, **FAULTS[fault]}
    data["engine"]["startup_timeout_s"] = 6
    study.write_text(yaml.safe_dump(data, sort_keys=False))


def _edit_rate(src: Path, dst: Path) -> None:
    """The study file with another request rate: a change in what a trial measures."""
    data = yaml.safe_load(src.read_text())
    data["workload"]["request_rate"] = data["workload"]["request_rate"] * 2
    dst.write_text(yaml.safe_dump(data, sort_keys=False))


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.out: Path = args.out
        self.db = self.out / "tuner.db"
        self.storage = f"sqlite:///{self.db}"
        self.violations: list[str] = []
        self.invocations: list[dict[str, Any]] = []
        self.fault_runs = {k: 0 for k in FAULTS}
        self.endings: dict[str, dict[str, int]] = {k: {} for k in FAULTS}  # runs not stopped
        self.kills = {k: {} for k in KILLS}  # how -> {ending: count}
        self.edits: dict[str, int] = {}
        self.concurrent: dict[str, int] = {}

    # Reading the database ------------------------------------------------------------------

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        try:
            return optuna.load_study(study_name=STUDY, storage=self.storage).get_trials()
        except KeyError:
            return []

    def current_spec(self) -> str | None:
        try:
            return optuna.load_study(study_name=STUDY, storage=self.storage).user_attrs.get(
                "tuner_spec_id"
            )
        except KeyError:
            return None

    def running_numbers(self) -> set[int]:
        if not self.db.exists():
            return set()
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30) as db:
            try:
                rows = db.execute("SELECT number FROM trials WHERE state = 'RUNNING'").fetchall()
            except sqlite3.OperationalError:
                return set()
        return {n for (n,) in rows}

    def finished(self) -> int:
        return sum(
            1
            for t in self.trials()
            if t.state.is_finished() and t.user_attrs.get("failure_kind") != "interrupted"
        )

    # One invocation ------------------------------------------------------------------------

    def tuner(self, study: Path, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*TUNER, "run", str(study), "--storage", self.storage, *extra],
            cwd=self.out,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def wait_for_trial(self, proc: subprocess.Popen, before: set[int]) -> bool:
        """Until a trial this run started is RUNNING (False: the run ended first)."""
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if self.running_numbers() - before:
                return True
            time.sleep(0.2)
        return False

    def refused_edit(self, study: Path) -> None:
        """The study file edited, run without --accept-changes: one line, exit 2, no trial."""
        saved = study.read_text()
        _edit_rate(study, study)
        before = len(self.trials())
        proc = self.tuner(study, "--n-trials", "1")
        _, err = proc.communicate(timeout=300)
        study.write_text(saved)
        text = err.decode().strip()
        added = len(self.trials()) - before
        ok = proc.returncode == 2 and "\n" not in text and "changed what study" in text
        ending = "refused, one line, no trial" if ok and not added else f"rc {proc.returncode}"
        self.edits[ending] = self.edits.get(ending, 0) + 1
        if not ok or added:
            self.violations.append(
                f"edit without --accept-changes: rc {proc.returncode}, "
                f"{added} trial(s) added: {text[-500:]}"
            )

    def second_run(self, study: Path, first: subprocess.Popen, variant: str) -> None:
        """A second `tuner run` of the study while one runs a trial: refused, nothing written."""
        other = study
        if variant == "changed-file":
            other = self.out / "other" / "study.yaml"
            other.parent.mkdir(exist_ok=True)
            _edit_rate(study, other)
        spec_before = self.current_spec()
        proc = self.tuner(other, "--n-trials", "1", "--accept-changes")
        _, err = proc.communicate(timeout=300)
        text = err.decode().strip()
        mine = [
            t.number
            for t in self.trials()
            if t.system_attrs.get("tuner:owner", {}).get("pid") == proc.pid
        ]
        spec_after = self.current_spec()
        if proc.returncode == 0 and first.poll() is not None:
            key = f"{variant}: not concurrent (the first run had ended)"
            self.concurrent[key] = self.concurrent.get(key, 0) + 1
            return
        ok = proc.returncode == 2 and "already being run" in text
        ending = "refused, no trial" if ok and not mine else f"rc {proc.returncode}"
        if spec_after != spec_before:
            ending += ", current spec switched"
        key = f"{variant}: {ending}"
        self.concurrent[key] = self.concurrent.get(key, 0) + 1
        if not ok or mine or spec_after != spec_before:
            self.violations.append(
                f"second run ({variant}): rc {proc.returncode}, trials {mine}, current spec "
                f"{spec_before} -> {spec_after}: {text[-300:]}"
            )

    def invoke(self, study: Path, fault: str, *, final: bool = False) -> None:
        args, rng = self.args, self.rng
        budget_mode = final or rng.random() < args.budget_share
        limit_arg = [] if budget_mode else ["--n-trials", str(args.per_run)]
        before = {t.number: t for t in self.trials()}
        running_before = self.running_numbers()
        proc = self.tuner(study, *limit_arg, "--accept-changes")
        how = None
        if not final and rng.random() < args.kill_share:
            how = rng.choice(list(KILLS))
        elif (
            not final
            and fault in ("none", "crash", "hang")
            and rng.random() < args.concurrent_share
            and self.wait_for_trial(proc, running_before)
        ):
            variants = ("same-file", "changed-file")  # in turn: both get tried
            self.second_run(study, proc, variants[sum(self.concurrent.values()) % 2])
        if how is not None:
            if self.wait_for_trial(proc, running_before):
                time.sleep(rng.uniform(0.2, 5.0))
            if proc.poll() is None:
                proc.send_signal(KILLS[how][0])
            else:
                how = None
        _, err = proc.communicate(timeout=600)
        text = " ".join(err.decode().split())
        rc = proc.returncode
        summary = SUMMARY.search(text)
        if how is not None:
            if rc == -KILLS[how][0]:
                ending = "killed" if how == "sigkill" else "died of it, after its summary"
                ok = how == "sigkill" or summary is not None
            else:
                ending, ok = f"exit {rc}", rc in KILLS[how][1] or rc == 0
                ending = "finished first" if rc == 0 else ending
            self.kills[how][ending] = self.kills[how].get(ending, 0) + 1
        else:
            ok = rc == 0 or (
                rc == 2 and fault in ("refuse", "slow-start") and NOTHING_STARTS in text
            )
        if not ok:
            self.violations.append(f"run ({fault}, {how}) ended {rc}: {text[-1500:]}")
        elif how is None:
            ending = "exit 2: nothing starts, study stopped" if rc == 2 else f"exit {rc}"
            self.endings[fault][ending] = self.endings[fault].get(ending, 0) + 1
        self.check_budget(before, budget_mode, rc, summary)
        self.invocations.append({"fault": fault, "kill": how, "rc": rc, "budget": budget_mode})

    def check_budget(self, before: dict, budget_mode: bool, rc: int, summary: Any) -> None:
        """New configs of this invocation ≤ its --n-trials, or ≤ what its spec's budget left."""
        ran = [
            t
            for t in self.trials()
            if t.state.name != "WAITING"
            and (t.number not in before or before[t.number].state.name == "WAITING")
        ]
        new = [t for t in ran if "reused_from" not in t.user_attrs]
        limit = self.args.per_run
        if budget_mode:
            sids = {t.user_attrs.get("spec_id") for t in ran}
            done = sum(
                1
                for t in before.values()
                if t.user_attrs.get("spec_id") in sids
                and t.state.is_finished()
                and t.user_attrs.get("failure_kind") != "interrupted"
                and "reused_from" not in t.user_attrs
            )
            limit = max(self.args.spec_budget - done, 0) if len(sids) <= 1 else 0
        if len(new) > limit:
            self.violations.append(f"invocation ran {len(new)} new configs, limit {limit}")
        if summary is not None:
            n_run, n_new = int(summary.group(1)), int(summary.group(2))
            measured_new = [t for t in new if t.user_attrs.get("failure_kind") != "interrupted"]
            if n_new > limit or n_run != len(ran) or n_new != len(measured_new):
                self.violations.append(
                    f"summary says {n_run} run, {n_new} new; the database: {len(ran)} run, "
                    f"{len(measured_new)} new; limit {limit}"
                )

    # The night -----------------------------------------------------------------------------

    def run(self) -> dict:
        args, rng = self.args, self.rng
        self.out.mkdir(parents=True, exist_ok=True)
        for name in ("tuner.db", "tuner.db-wal", "tuner.db-shm"):
            (self.out / name).unlink(missing_ok=True)
        shutil.rmtree(self.out / "other", ignore_errors=True)
        tok = REPO / ".cache" / "tiny-qwen2"
        study = sim_study(self.out, tok, budget={"n_trials": args.spec_budget})
        t0 = time.monotonic()
        while self.finished() < args.trials:
            fault = rng.choice(list(FAULTS))
            self.fault_runs[fault] += 1
            _set_fault(study, fault)
            if self.invocations and rng.random() < args.edit_share:
                self.refused_edit(study)
            self.invoke(study, fault)
        # One last run recovers whatever the last kill left, and fills the spec's budget.
        _set_fault(study, "none")
        self.invoke(study, "none", final=True)
        report = self.report()
        report.update(
            invocations=len(self.invocations),
            faults_injected=self.fault_runs,
            unstopped_runs_ended=self.endings,
            budget_mode_invocations=sum(1 for i in self.invocations if i["budget"]),
            stop_signals={k: v for k, v in self.kills.items()},
            edits_without_accept_changes=self.edits,
            second_concurrent_runs=self.concurrent,
            wall_s=round(time.monotonic() - t0, 1),
            violations=self.violations,
        )
        return report

    def report(self) -> dict:
        trials = self.trials()
        with sqlite3.connect(self.db) as db:
            rows = dict(db.execute("SELECT trial_number, outcome FROM tuner_trials").fetchall())
            requests = dict(
                db.execute(
                    "SELECT trial_number, COUNT(*) FROM tuner_requests GROUP BY trial_number"
                ).fetchall()
            )
            engines = [json.loads(i) for (i,) in db.execute("SELECT identity FROM tuner_engines")]
            running_rows = db.execute("SELECT COUNT(*) FROM tuner_engines WHERE running").fetchone()
        by_number = {t.number: t for t in trials}
        kinds: dict[str, int] = {}
        lost = cross_spec = 0
        per_spec: dict[str, int] = {}
        for t in trials:
            kind = t.user_attrs.get(
                "failure_kind", "measured" if t.state.name == "COMPLETE" else "-"
            )
            if "reused_from" in t.user_attrs:
                kind = "reused"
                src = by_number.get(t.user_attrs["reused_from"])
                if src is None or src.user_attrs.get("spec_id") != t.user_attrs.get("spec_id"):
                    cross_spec += 1
            kinds[kind] = kinds.get(kind, 0) + 1
            if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs:
                lost += _rows_missing(t, kind, rows, requests)
            if t.state.is_finished() and kind not in ("interrupted", "reused"):
                sid = t.user_attrs.get("spec_id", "-")
                per_spec[sid] = per_spec.get(sid, 0) + 1
        stale = sum(1 for t in trials if t.state.name == "RUNNING")
        orphans = sum(len(group_members(e["pgid"])) for e in engines)
        figures = {
            "stale_running_trials": stale,
            "orphaned_engine_processes": orphans,
            "engines_marked_running": running_rows[0],
            "rows_lost": lost,
            "reused_across_specs": cross_spec,
        }
        for name, value in figures.items():
            if value:
                self.violations.append(f"{name}: {value}")
        # --n-trials runs may go past the budget ("N more"): a spec's count may exceed the
        # budget only by what its --n-trials runs added, which check_budget bounds per run.
        return {
            "trials": len(trials),
            "by_outcome": kinds,
            **figures,
            "spec_budget": self.args.spec_budget,
            "new_configs_per_spec": per_spec,
        }


def _rows_missing(t: optuna.trial.FrozenTrial, kind: str, rows: dict, requests: dict) -> int:
    """1 when a finished trial lacks its row, or a measured one lacks any request record."""
    if t.number not in rows:
        return 1
    expected = t.user_attrs.get("completed", 0) + t.user_attrs.get("failed", 0)
    return int(kind == "measured" and requests.get(t.number, 0) != expected)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40, help="finished trials, all specs")
    ap.add_argument("--spec-budget", type=int, default=8, help="the study's budget.n_trials")
    ap.add_argument("--per-run", type=int, default=4, help="--n-trials of most invocations")
    ap.add_argument("--budget-share", type=float, default=0.25, help="runs without --n-trials")
    ap.add_argument("--kill-share", type=float, default=0.3)
    ap.add_argument("--concurrent-share", type=float, default=0.7)
    ap.add_argument("--edit-share", type=float, default=0.15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/tuner-soak"))
    report = Soak(ap.parse_args()).run()
    print(json.dumps(report, indent=2))
    raise SystemExit(1 if report["violations"] else 0)


if __name__ == "__main__":
    main()
