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
    """Whether the tuner that owns a RUNNING trial may still be running.

    The boot id, the pid and the kernel's start time of that pid identify a process; the
    hostname does not (a new container each night has a new one on the same boot). So:
    - same boot: alive exactly when that pid exists with that start time;
    - another boot, same hostname: this machine rebooted since, so the owner is dead;
    - another boot and another hostname: another machine's worker, not ours to judge
      (docs/reliability.md, "Recovery").
    """
    if not owner:
        return False
    if owner.get("boot_id") == boot_id():
        return start_ticks(int(owner["pid"])) == owner.get("start_ticks")
    return owner.get("host") != socket.gethostname()


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
        # An interrupted baseline is queued again by the loop itself (it is the next trial).
        if retry and not t.user_attrs.get(tr.RETRY_OF) and not t.user_attrs.get(tr.BASELINE):
            study.enqueue_trial(t.params, user_attrs={tr.RETRY_OF: number})
    return out
