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

That is the "night" phase. The other phases (`--phases`, all by default) run an engine
that draws a fault at each start (benchmarks/soak_engine.py: a crash at once or after half
the workload, a hang, a refusal, or none), so faults hit some trials of one spec and not
others: "capacity" (capacity-mode studies, the crash or hang landing in the rate search's
second step), "confirm" (`--confirm 1`, two re-runs, stops during the confirmation; `tuner
best` must not recommend a config whose re-runs failed), "slots" (`--gpus 0-3
--gpus-per-trial 2 --confirm 1`: one re-run per run, not one per slot), and "postgres" (a
throw-away PostgreSQL, `tuner_testing.PostgresServer`: worker A runs; once A has a trial
stored, worker B starts on an edited file with `--accept-changes` while A runs; A is
sometimes killed, and run again at the end). Each phase runs two study files that differ in
one number (two specs), without --n-trials, so each spec's budget must hold exactly.

At the end of each phase it checks what docs/reliability.md reports (`tuner_testing.soak`,
reading trials through `tuner.trial`): trials scored, reused or re-measured across specs,
budgets exceeded per spec, stale RUNNING trials, orphaned engine processes (the process
groups and pids the tuner recorded, never by name), engines marked running, rows lost (a
launched trial not stored as ended, or without its row, its failure reason, its request
records), and for the night the budget per invocation. Any check that fails is listed under
"violations" and the script exits 1.

    TUNER_SIM_TIME_SCALE=4 PYTHONPATH=. .venv/bin/python benchmarks/soak.py --out /tmp/soak
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import optuna
import yaml
from soak_engine import MARK

from tuner import trial as tr
from tuner_testing import TUNER, PostgresServer, sim_study
from tuner_testing import soak as invariants
from tuner_testing.postgres_env import postgres_missing

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
STUDY = "e2e"

FAULTS = {
    "none": {},
    "crash": {"fault-crash-after": 6},
    "hang": {"fault-hang-after": 6},
    "refuse": {"fault-refuse-start": True},
    "slow-start": {"fault-slow-start-s": None},  # twice the startup timeout (_set_fault)
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


def _set_fault(study: Path, fault: str, startup_timeout_s: float) -> None:
    """The fault's flags in the study file; a startup timeout the slow start runs past (it
    must stay well above a normal start: on a loaded 2-core box one takes 5-10 s)."""
    data = yaml.safe_load(study.read_text())
    flags = {k: v for k, v in data["engine"]["flags"].items() if not k.startswith("fault-")}
    fault_flags = {k: 2 * startup_timeout_s if v is None else v for k, v in FAULTS[fault].items()}
    data["engine"]["flags"] = {**flags, **fault_flags}
    data["engine"]["startup_timeout_s"] = startup_timeout_s
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

    # Reading the database (through tuner.trial, SQLite or PostgreSQL alike) ---------------

    def frozen(self) -> list[optuna.trial.FrozenTrial]:
        try:
            return optuna.load_study(study_name=STUDY, storage=self.storage).get_trials()
        except KeyError:
            return []

    def trials(self) -> list[tr.TrialPoint]:
        return [tr.read(t) for t in self.frozen()]

    def current_spec(self) -> str | None:
        try:
            study = optuna.load_study(study_name=STUDY, storage=self.storage)
        except KeyError:
            return None
        return tr.StudyRecord.of(study).spec_id

    def running_numbers(self) -> set[int]:
        return {p.number for p in self.trials() if p.state == "RUNNING"}

    def finished(self) -> int:
        return sum(
            1 for p in self.trials() if p.state not in ("RUNNING", "WAITING") and not p.interrupted
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
        mine = [t.number for t in self.frozen() if (tr.owner_of(t) or {}).get("pid") == proc.pid]
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
            if t.state != "WAITING"
            and (t.number not in before or before[t.number].state == "WAITING")
        ]
        new = [t for t in ran if t.record.reused_from is None]
        limit = self.args.per_run
        if budget_mode:
            sids = {t.spec_id for t in ran}
            done = sum(
                1
                for t in before.values()
                if t.spec_id in sids
                and t.state not in ("RUNNING", "WAITING")
                and not t.interrupted
                and t.record.reused_from is None
            )
            limit = max(self.args.spec_budget - done, 0) if len(sids) <= 1 else 0
        if len(new) > limit:
            self.violations.append(f"invocation ran {len(new)} new configs, limit {limit}")
        if summary is not None:
            n_run, n_new = int(summary.group(1)), int(summary.group(2))
            measured_new = [t for t in new if not t.interrupted]
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
        study = sim_study(self.out, TOKENIZER, budget={"n_trials": args.spec_budget})
        t0 = time.monotonic()
        while self.finished() < args.trials:
            fault = rng.choice(list(FAULTS))
            self.fault_runs[fault] += 1
            _set_fault(study, fault, args.startup_timeout_s)
            if self.invocations and rng.random() < args.edit_share:
                self.refused_edit(study)
            self.invoke(study, fault)
        # One last run recovers whatever the last kill left, and fills the spec's budget.
        _set_fault(study, "none", args.startup_timeout_s)
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
        # --n-trials runs may go past the budget ("N more"): a spec's count may exceed the
        # budget only by what its --n-trials runs added, which check_budget bounds per run.
        inv = invariants.check(self.storage, STUDY, check_budgets=False)
        self.violations += inv.violations()
        trials = self.trials()
        return {
            "trials": len(trials),
            "by_outcome": _outcomes(trials),
            **inv.figures(),
            "spec_budget": self.args.spec_budget,
            "new_configs_per_spec": invariants.new_configs(trials),
        }


def _outcomes(points: list[tr.TrialPoint]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for p in points:
        kind = p.failure_kind or ("measured" if p.state == "COMPLETE" else p.state.lower())
        if p.record.reused_from is not None:
            kind = "reused"
        elif p.confirm_of is not None:
            kind = f"--confirm re-run, {kind}"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


# The other soaks (--phases): an engine that draws a fault at each start ----------------------

ENGINE = REPO / "benchmarks" / "soak_engine.py"
STOPPED = {"killed", "exit 130", "exit 143", "exit 129", "died of it, after its summary"}


def engine_faults(num_prompts: int, *, capacity: bool) -> dict[str, list]:
    """What soak_engine.py draws from (weight, `sim serve` flags). `later`: after half the
    workload, or, on a capacity search, during its second rate step."""
    later = str(num_prompts + num_prompts // 2 if capacity else max(num_prompts // 2, 1))
    return {
        "none": [4, []],
        "crash at once": [1, ["--fault-crash-after", "1"]],
        "crash later": [1, ["--fault-crash-after", later]],
        "hang later": [1, ["--fault-hang-after", later]],
        "refuse start": [0.5, ["--fault-refuse-start"]],
    }


def phase_study(folder: Path, faults: dict[str, list], **kw: Any) -> Path:
    """`sim_study` whose engine is soak_engine.py with these faults (not part of the spec)."""
    folder.mkdir(parents=True, exist_ok=True)
    faults_file = folder / "faults.json"
    faults_file.write_text(json.dumps(faults))
    path = sim_study(folder, TOKENIZER, **kw)
    data = yaml.safe_load(path.read_text())
    data["engine"]["command"] = [
        "{python}",
        str(ENGINE),
        str(faults_file),
        *data["engine"]["command"][1:],
    ]
    data["engine"]["startup_timeout_s"] = 60  # a busy box: only a refusal fails a start
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def variant_of(study: Path, key: tuple[str, ...], factor: float) -> Path:
    """The study file with one number scaled (another spec), next to it."""
    data = yaml.safe_load(study.read_text())
    node = data
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = round(node[key[-1]] * factor, 6)
    out = study.with_name(f"study-x{factor}.yaml")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def injected(folder: Path) -> dict[str, int]:
    """The faults soak_engine.py drew, from the first line of every engine log."""
    out: dict[str, int] = {}
    for log in folder.rglob("trial-*.log"):
        for line in log.read_text(errors="replace").splitlines()[:5]:
            if line.startswith(MARK):
                name = line[len(MARK) :].strip()
                out[name] = out.get(name, 0) + 1
                break
    return out


class Phase:
    """Budget-mode `tuner run`s (no --n-trials, so each spec's budget must hold exactly) of
    study files that differ in one number (two specs, each with its own budget), some
    stopped mid-trial, on an engine that draws a fault at each start."""

    def __init__(self, args: argparse.Namespace, name: str, storage: str | None = None) -> None:
        self.args, self.name = args, name
        self.rng = random.Random(f"{args.seed}-{name}")
        self.folder: Path = args.out / name
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.storage = storage or f"sqlite:///{self.folder / 'tuner.db'}"
        self.endings: dict[str, int] = {}
        self.violations: list[str] = []
        self.confirms_queued: list[int] = []  # --confirm re-runs each unstopped run queued

    def points(self) -> list[tr.TrialPoint]:
        try:
            study = optuna.load_study(study_name=STUDY, storage=self.storage)
        except KeyError:
            return []
        return [tr.read(t) for t in study.get_trials()]

    def tuner(self, study: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
        return subprocess.Popen(
            [*TUNER, "run", str(study), "--storage", self.storage, "--accept-changes", *extra],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )

    def wait_for(self, proc: Any, pred: Any, timeout_s: float = 300) -> bool:
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            if pred(self.points()):
                return True
            time.sleep(0.3)
        return False

    def stop_mid_trial(self, proc: Any, before: set[int], how: str, confirm: bool) -> bool:
        """Signal `proc` once a trial of its own (a --confirm re-run, with `confirm`) is
        RUNNING, after a random delay; False when the run ended first."""

        def mine(points: list[tr.TrialPoint]) -> bool:
            return any(
                p.state == "RUNNING"
                and p.number not in before
                and (not confirm or p.confirm_of is not None)
                for p in points
            )

        if self.wait_for(proc, mine):
            time.sleep(self.rng.uniform(0.2, 3.0))
        if proc.poll() is not None:
            return False
        proc.send_signal(KILLS[how][0])
        return True

    def finish(self, proc: Any, how: str | None, what: str) -> tuple[int, str]:
        """Wait for a run; judge how it ended (as the night does); the ending, counted."""
        _, err = proc.communicate(timeout=900)
        text = " ".join(err.decode().split())
        rc, summary = proc.returncode, SUMMARY.search(text)
        if how is not None and rc == -KILLS[how][0]:
            ending, ok = (
                ("killed" if how == "sigkill" else "died of it, after its summary"),
                (how == "sigkill" or summary is not None),
            )
        elif how is not None and rc != 0:
            ending, ok = f"exit {rc}", rc in KILLS[how][1]
        else:
            ending = f"exit {rc}" + (": nothing starts" if NOTHING_STARTS in text else "")
            ok = rc == 0 or (rc == 2 and NOTHING_STARTS in text)
        key = f"{what}, {how or 'not stopped'}: {ending}"
        self.endings[key] = self.endings.get(key, 0) + 1
        if not ok:
            self.violations.append(f"{self.name}: {what} ({how}) ended {rc}: {text[-1500:]}")
        return rc, ending

    def invoke(self, study: Path, *extra: str, stop: bool = True, confirm: int = 0) -> str:
        """One run of `study`; stopped mid-trial (one time in kill_share) when `stop`."""
        before = {p.number for p in self.points()}
        proc = self.tuner(study, *extra)
        how = (
            self.rng.choice(list(KILLS))
            if stop and self.rng.random() < self.args.kill_share
            else None
        )
        if how is not None:
            during_confirm = confirm > 0 and self.rng.random() < 0.5
            if not self.stop_mid_trial(proc, before, how, during_confirm):
                how = None
        _, ending = self.finish(proc, how, study.stem)
        queued = [p for p in self.points() if p.number not in before and p.confirm_of is not None]
        if confirm and ending not in STOPPED:
            self.confirms_queued.append(len(queued))
            if len(queued) > confirm:
                self.violations.append(
                    f"{self.name}: one run queued {len(queued)} --confirm re-runs, at most "
                    f"{confirm} (one confirmation per study, whatever the slots)"
                )
        return ending

    def soak(self, files: list[Path], runs: int, *extra: str, confirm: int = 0) -> None:
        """`runs` runs of randomly chosen files, then one unstopped run of each file (which
        recovers what the last stop left and fills each spec's budget)."""
        for _ in range(runs):
            self.invoke(self.rng.choice(files), *extra, confirm=confirm)
        for f in files:
            self.invoke(f, *extra, stop=False, confirm=confirm)

    def report(self, t0: float, **more: Any) -> dict:
        inv = invariants.check(self.storage, STUDY)
        self.violations += [f"{self.name}: {v}" for v in inv.violations()]
        points = self.points()
        return {
            "trials": len(points),
            "by_outcome": _outcomes(points),
            "faults_drawn_at_engine_starts": injected(self.folder),
            "runs_ended": self.endings,
            "new_configs_per_spec": invariants.new_configs(points),
            "budget_per_spec": sorted(
                set(invariants.read_study(self.storage, STUDY).budgets.values())
            ),
            **inv.figures(),
            **more,
            "wall_s": round(time.monotonic() - t0, 1),
            "violations": self.violations,
        }


def best_with_failed_reruns(phase: Phase, study: Path) -> int:
    """1 when `tuner best` recommends a config one of whose --confirm re-runs failed or broke
    an SLO (issue 24, item 2), read from the stored re-runs' own states."""
    points = phase.points()
    missed = {
        p.confirm_of
        for p in points
        if p.confirm_of is not None
        and p.status not in ("feasible", "running")
        and not p.interrupted
    }
    done = subprocess.run(
        [*TUNER, "best", str(study), "--storage", phase.storage],
        cwd=phase.folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    top = re.search(r"# best trial (\d+)", done.stdout)
    if top and int(top.group(1)) in missed:
        phase.violations.append(
            f"{phase.name}: `tuner best` recommends trial {top.group(1)}, "
            "whose --confirm re-runs failed or broke an SLO"
        )
        return 1
    return 0


def capacity_phase(args: argparse.Namespace) -> dict:
    """Capacity-mode studies: faults during the rate search (a crash or hang at its second
    step), plus stops mid-trial."""
    t0, phase = time.monotonic(), Phase(args, "capacity")
    n = args.prompts
    study = phase_study(
        phase.folder,
        engine_faults(n, capacity=True),
        # 512-token prompts against a 300 ms P99 TTFT: a knee near 6 req/s (`tuner plan`), so
        # the search brackets it in 5 steps instead of stopping at max_rps
        workload={"num_prompts": n, "request_rate": 2, "random_input_len": 512},
        objective={
            "mode": "capacity",
            "slo": ["p99_ttft_ms<=300"],
            "capacity": {"start_rps": 2, "max_rps": 64, "max_runs": 5},
        },
        budget={"n_trials": args.phase_budget},
    )
    files = [study, variant_of(study, ("objective", "capacity", "start_rps"), 1.5)]
    phase.soak(files, args.phase_runs)
    return phase.report(t0)


def confirm_phase(args: argparse.Namespace) -> dict:
    """`tuner run --confirm 1` (two re-runs of the best config) with faults drawn at every
    start, a re-run's too, and stops during the confirmation; `tuner best` must not then
    recommend a config whose re-runs failed."""
    t0, phase = time.monotonic(), Phase(args, "confirm")
    study = phase_study(
        phase.folder,
        engine_faults(args.prompts, capacity=False),
        workload={"num_prompts": args.prompts},
        trial={"stall_timeout_s": 5, "confirm_repeats": 2},
        budget={"n_trials": args.phase_budget},
    )
    files = [study, variant_of(study, ("workload", "request_rate"), 0.75)]
    phase.soak(files, args.phase_runs, "--confirm", "1", confirm=2)
    misses = sum(best_with_failed_reruns(phase, f) for f in files)
    return phase.report(
        t0, best_with_failed_reruns=misses, confirm_reruns_queued=phase.confirms_queued
    )


def slots_phase(args: argparse.Namespace) -> dict:
    """GPU slots (`--gpus 0-3 --gpus-per-trial 2`: two trials at once) with faults, stops
    and `--confirm 1` (one re-run for the whole study, not one per slot)."""
    t0, phase = time.monotonic(), Phase(args, "slots")
    study = phase_study(
        phase.folder,
        engine_faults(args.prompts, capacity=False),
        flags={"tensor-parallel-size": 2},
        workload={"num_prompts": args.prompts},
        trial={"stall_timeout_s": 5, "confirm_repeats": 1},
        budget={"n_trials": args.phase_budget},
    )
    files = [study, variant_of(study, ("workload", "request_rate"), 0.75)]
    slots = ("--gpus", "0-3", "--gpus-per-trial", "2", "--confirm", "1")
    phase.soak(files, args.phase_runs, *slots, confirm=1)
    return phase.report(t0, confirm_reruns_queued=phase.confirms_queued)


def postgres_phase(args: argparse.Namespace) -> dict:
    """Two workers on one PostgreSQL study: A runs its file; once A's baseline is stored, B
    starts on an edited file with --accept-changes while A runs. Sometimes A is then killed
    (SIGKILL) and started again once B is done. Every spec's budget and scores must hold."""
    missing = postgres_missing()
    if missing:
        return {"skipped": missing, "violations": [f"postgres: {missing}"]}
    server = PostgresServer().start()
    try:
        return _two_workers(args, server.new_database())
    finally:
        server.stop()


def _two_workers(args: argparse.Namespace, url: str) -> dict:
    t0, phase = time.monotonic(), Phase(args, "postgres", storage=url)
    fast = {"TUNER_HEARTBEAT_S": "0.5"}
    a = phase_study(
        phase.folder / "a",
        engine_faults(args.prompts * 4, capacity=False),
        workload={"num_prompts": args.prompts * 4, "request_rate": 16},
        budget={"n_trials": args.phase_budget + 2},
    )
    b = variant_of(a, ("workload", "request_rate"), 0.75)
    data = yaml.safe_load(b.read_text())
    data["budget"]["n_trials"] = args.phase_budget
    b.write_text(yaml.safe_dump(data, sort_keys=False))
    worker_a = phase.tuner(a, env=fast)
    phase.wait_for(worker_a, lambda ps: any(p.state not in ("RUNNING", "WAITING") for p in ps))
    worker_b = phase.tuner(b, env=fast)
    b_started = time.time()
    kill_a = phase.rng.random() < args.kill_share
    if kill_a:  # A is killed mid-trial while B runs; a later run of A recovers it
        phase.wait_for(worker_a, lambda ps: any(p.state == "RUNNING" for p in ps), 120)
        time.sleep(phase.rng.uniform(2.0, 8.0))
        kill_a = worker_a.poll() is None
        if kill_a:
            worker_a.send_signal(signal.SIGKILL)
    phase.finish(worker_b, None, "B (edited file, --accept-changes)")
    phase.finish(worker_a, "sigkill" if kill_a else None, "A")
    last = phase.tuner(a, env=fast)  # recovers what a kill left, fills A's budget
    phase.finish(last, None, "A again, after both")
    return phase.report(t0, a_trials_started_after_b=_started_after(phase, b_started))


def _started_after(phase: Phase, when: float) -> int:
    """Trials of the first spec (A's) that started once B was running: that A kept measuring
    next to B is what makes the phase mean something."""
    trials = optuna.load_study(study_name=STUDY, storage=phase.storage).get_trials()
    first = tr.read(trials[0]).spec_id if trials else None
    return sum(
        1
        for t in trials
        if tr.read(t).spec_id == first and t.datetime_start and t.datetime_start.timestamp() > when
    )


PHASES = {
    "capacity": capacity_phase,
    "confirm": confirm_phase,
    "slots": slots_phase,
    "postgres": postgres_phase,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40, help="the night: finished trials")
    ap.add_argument("--spec-budget", type=int, default=8, help="the night's budget.n_trials")
    ap.add_argument("--per-run", type=int, default=4, help="--n-trials of most invocations")
    ap.add_argument("--budget-share", type=float, default=0.25, help="runs without --n-trials")
    ap.add_argument("--kill-share", type=float, default=0.3)
    ap.add_argument("--concurrent-share", type=float, default=0.7)
    ap.add_argument("--edit-share", type=float, default=0.15)
    ap.add_argument("--startup-timeout-s", type=float, default=6, help="the night's engines")
    ap.add_argument("--phases", default="night," + ",".join(PHASES), help="comma list")
    ap.add_argument("--phase-runs", type=int, default=3, help="stoppable runs per phase")
    ap.add_argument("--phase-budget", type=int, default=4, help="budget.n_trials per phase spec")
    ap.add_argument("--prompts", type=int, default=12, help="num_prompts of the phases' studies")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/tuner-soak"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    for name in args.phases.split(","):
        if name == "night":
            report[name] = Soak(args).run()
        elif name in PHASES:
            report[name] = PHASES[name](args)
        else:
            ap.error(f"no phase {name!r} (phases: night, {', '.join(PHASES)})")
        print(json.dumps({name: report[name]}, indent=2), flush=True)
    violations = [v for r in report.values() for v in r["violations"]]
    print(json.dumps({"violations": violations}, indent=2))
    raise SystemExit(1 if violations else 0)


if __name__ == "__main__":
    main()
