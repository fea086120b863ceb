"""What a soak must leave behind in a study, counted from its storage (benchmarks/soak.py).

Trials are read through `tuner.trial` (`TrialPoint`), the tuner's own tables with SQLAlchemy
(SQLite or PostgreSQL alike), and engine processes by the process groups and pids the tuner
recorded (`tuner_engines`), never by name. `count` is pure, so it is unit-tested on made-up
trials (tests/test_soak_invariants.py); `read_study` and `orphans` do the reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy as sa

from tuner import trial as tr
from tuner.engine.process import group_members, start_ticks
from tuner.store.schema import engines_table, requests_table, trials_table
from tuner.trial import TrialPoint


@dataclass
class Stored:
    """One study as a soak reads it afterwards."""

    points: list[TrialPoint]
    budgets: dict[str, int]  # spec id -> its budget.n_trials
    rows: set[int]  # trial numbers with a `tuner_trials` row
    requests: dict[int, int]  # trial number -> request records stored
    engines: list[tuple[int, dict[str, Any], bool]]  # (trial, identity, marked running)


@dataclass
class Invariants:
    """Each figure must be 0 (`violations` names the trials behind any that is not)."""

    scored_across_specs: int = 0  # a score relative to a trial of another spec
    reused_across_specs: int = 0  # a result reused from a trial of another spec
    reruns_across_specs: int = 0  # a --confirm re-run measured under another spec
    budgets_exceeded: int = 0  # specs with more new configs than their budget.n_trials
    stale_running: int = 0  # trials left RUNNING once every run has ended
    orphan_processes: int = 0  # live processes of the engines the tuner recorded
    engines_marked_running: int = 0
    rows_lost: int = 0  # a launched trial not stored as ended, or without its row / reason
    details: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if k != "details"}

    def violations(self) -> list[str]:
        return list(self.details)


def new_configs(points: Iterable[TrialPoint]) -> dict[str, int]:
    """Per spec, the ended trials its budget counts that are not `--confirm` re-runs: not
    interrupted, not reused, not refused by vLLM's rules, not still running or queued."""
    out: dict[str, int] = {}
    for p in points:
        if p.state in ("RUNNING", "WAITING") or p.interrupted:
            continue
        if p.record.reused_from is not None or p.confirm_of is not None or p.refused_by_rules:
            continue
        out[p.spec_id or "-"] = out.get(p.spec_id or "-", 0) + 1
    return out


def count(stored: Stored, *, check_budgets: bool = True) -> Invariants:
    """Every invariant but the orphans (`orphans`), which needs the live process table."""
    inv = Invariants()
    by_number = {p.number: p for p in stored.points}

    def other_spec(p: TrialPoint, number: int | None, what: str) -> int:
        if number is None:
            return 0
        src = by_number.get(number)
        if src is not None and src.spec_id == p.spec_id:
            return 0
        inv.details.append(
            f"trial {p.number} (spec {p.spec_id}) {what} trial {number} "
            f"(spec {src.spec_id if src else 'missing'})"
        )
        return 1

    for p in stored.points:
        inv.scored_across_specs += other_spec(p, p.reference, "is scored against")
        inv.reused_across_specs += other_spec(p, p.record.reused_from, "reuses")
        inv.reruns_across_specs += other_spec(p, p.confirm_of, "re-measured")
        if p.state == "RUNNING":
            inv.stale_running += 1
            inv.details.append(f"trial {p.number} left RUNNING")
    if check_budgets:
        for spec, n in new_configs(stored.points).items():
            budget = stored.budgets.get(spec)
            if budget is not None and n > budget:
                inv.budgets_exceeded += 1
                inv.details.append(f"spec {spec}: {n} new configs on a budget of {budget}")
    inv.rows_lost = _rows_lost(stored, by_number, inv.details)
    for number, _identity, running in stored.engines:
        if running:
            inv.engines_marked_running += 1
            inv.details.append(f"trial {number}: its engine is still marked running")
    return inv


def _rows_lost(stored: Stored, by_number: Mapping[int, TrialPoint], details: list[str]) -> int:
    """Launched trials (an engine recorded) not stored as ended, and ended trials without a
    `tuner_trials` row, a failure reason (when failed), or their request records (measured)."""
    lost = 0
    for number in sorted({n for n, _, _ in stored.engines}):
        p = by_number.get(number)
        if p is None or p.state in ("WAITING", "RUNNING"):
            lost += 1
            details.append(f"trial {number} launched an engine but is {p.state if p else 'gone'}")
    for p in stored.points:
        if p.state in ("WAITING", "RUNNING") or p.record.reused_from is not None:
            continue
        why = None
        if p.status == "failed" and not (p.failure_kind and p.record.failure_reason):
            why = f"failed without a reason ({p.failure!r})"
        elif p.number not in stored.rows and not p.interrupted and not p.record.predicted:
            why = "no tuner_trials row"
        elif p.measured and not stored.requests.get(p.number):
            why = "measured without request records"
        elif p.measured and p.record.capacity is None:
            expected = int(p.metrics.get("completed", 0) + p.metrics.get("failed", 0))
            if stored.requests.get(p.number) != expected:
                why = f"{stored.requests.get(p.number)} request records, {expected} requests"
        if why:
            lost += 1
            details.append(f"trial {p.number}: {why}")
    return lost


def orphans(engines: Iterable[tuple[int, dict[str, Any], bool]]) -> list[str]:
    """Live processes of the engines the tuner recorded: its process group's members, and the
    engine's own pid while its start time still matches (a reused pid is someone else's)."""
    out = []
    for number, identity, _ in engines:
        pid, pgid = int(identity["pid"]), int(identity["pgid"])
        ticks = start_ticks(pid)
        if ticks is not None and ticks != identity.get("start_ticks"):
            continue  # the pid (and so the group) now belongs to another process
        alive = set(group_members(pgid)) | ({pid} if ticks is not None else set())
        out += [f"trial {number}: engine process {p} still alive" for p in sorted(alive)]
    return out


def read_study(url: str, study_name: str) -> Stored:
    """Everything `count` needs, from a study's storage (SQLite or PostgreSQL)."""
    try:
        study = optuna.load_study(study_name=study_name, storage=url)
    except KeyError:
        return Stored([], {}, set(), {}, [])
    points = tr.read_all(study.get_trials())
    budgets = {
        sid: int(dump.get("budget", {}).get("n_trials"))
        for sid, dump in tr.StudyRecord.of(study).specs_by_id.items()
        if dump.get("budget", {}).get("n_trials") is not None
    }
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = {
                n
                for (n,) in conn.execute(
                    sa.select(trials_table.c.trial_number).where(
                        trials_table.c.study_name == study_name
                    )
                )
            }
            requests: dict[int, int] = dict(
                conn.execute(
                    sa.select(requests_table.c.trial_number, sa.func.count())
                    .where(requests_table.c.study_name == study_name)
                    .group_by(requests_table.c.trial_number)
                ).all()
            )
            engines = [
                (r.trial_number, r.identity, bool(r.running))
                for r in conn.execute(
                    sa.select(engines_table).where(engines_table.c.study_name == study_name)
                )
            ]
    finally:
        engine.dispose()
    return Stored(points, budgets, rows, requests, engines)


def check(url: str, study_name: str, *, check_budgets: bool = True) -> Invariants:
    """`count` and `orphans` for one study."""
    stored = read_study(url, study_name)
    inv = count(stored, check_budgets=check_budgets)
    found = orphans(stored.engines)
    inv.orphan_processes = len(found)
    inv.details += found
    return inv
