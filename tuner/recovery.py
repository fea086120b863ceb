"""Recovery after a tuner died mid-trial (kill -9, power cut, reboot).

Each trial records its owner (host, boot, pid, the kernel's start time of that pid); each
engine its identity. A later run ends the dead owner's RUNNING trials as interrupted and
stops its engines, checking identities so that nothing else is ever signalled.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

import optuna

from tuner import optuna_adapter as adapter
from tuner import trials as tr
from tuner.engine.process import boot_id, start_ticks, stop_orphan
from tuner.store import Store


def this_process() -> dict[str, Any]:
    """The owner identity recorded on every trial this process runs."""
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "start_ticks": start_ticks(os.getpid()),
    }


def owner_alive(owner: dict[str, Any] | None) -> bool:
    """A RUNNING trial is stale when the tuner that owns it (same host) no longer exists."""
    if not owner:
        return False
    if owner.get("host") != socket.gethostname():
        return True  # another machine's worker: not ours to judge
    if owner.get("boot_id") != boot_id():
        return False  # rebooted since
    return start_ticks(int(owner["pid"])) == owner.get("start_ticks")


@dataclass
class Recovered:
    interrupted: list[int] = field(default_factory=list)
    orphans_stopped: int = 0


def recover(study: optuna.Study, store: Store, *, retry: bool) -> Recovered:
    """Stop engines a dead tuner left behind; end its RUNNING trials as interrupted.

    With `retry`, each interrupted parameter set is enqueued once more (never a retry's retry).
    """
    out = Recovered()
    running = {
        t.number: t
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.RUNNING
    }
    stale = {n for n, t in running.items() if not owner_alive(t.system_attrs.get(tr.OWNER))}
    for number, identity in store.running_engines(study.study_name):
        if number in running and number not in stale:
            continue  # a live tuner's engine
        if stop_orphan(identity):
            out.orphans_stopped += 1
        store.engine_stopped(study.study_name, number)
    for number in sorted(stale):
        t = running[number]
        store.delete_trial(study.study_name, number)  # whatever the dead run half-wrote
        trial = adapter.writable(study, t)
        trial.set_user_attr(tr.FAILURE_KIND, tr.FailureKind.INTERRUPTED.value)
        trial.set_user_attr(tr.FAILURE_REASON, "interrupted: the tuner stopped during this trial")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        out.interrupted.append(number)
        if retry and not t.user_attrs.get(tr.RETRY_OF):
            study.enqueue_trial(t.params, user_attrs={tr.RETRY_OF: number})
    return out
