"""Ctrl-C, SIGTERM and SIGHUP during a run: what they raise, and installing their handlers."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from tuner.errors import FailureKind
from tuner.trial import TrialRecord
from tuner.workload.loop import STOP_SIGNALS

if TYPE_CHECKING:
    import optuna

# what `signal.signal` takes and gives back: a function, SIG_DFL/SIG_IGN, or None (not Python's)
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class Interrupted(KeyboardInterrupt):
    """A first Ctrl-C, SIGTERM or SIGHUP: the trial is ended as interrupted, then the tuner
    exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal_name}")


def install(signum: int, handler: Handler) -> Handler:
    """Set a handler; return the one it replaces (None off the main thread: left as it is)."""
    if handler is None:
        return None
    try:
        return signal.signal(signum, handler)
    except ValueError:  # not the main thread: leave Python's default
        return None


@contextlib.contextmanager
def stopping(kill: Callable[[], None]) -> Iterator[None]:
    """Inside, the first Ctrl-C, SIGTERM or SIGHUP raises `Interrupted` (what it cuts short
    records itself as interrupted); a second one calls `kill` (the engine's process group, at
    once). After an interruption the tuner is on its way out, so later signals are ignored
    (they must not cut the cleanup short)."""
    seen: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if seen:
            kill()
            return
        seen.append(signum)
        raise Interrupted(signum)

    old = {sig: install(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            install(sig, signal.SIG_IGN if seen else handler)


def ended_by(exc: BaseException, trial: optuna.Trial) -> TrialRecord:
    """What a trial ended mid-way by `exc` records: interrupted (a signal, Ctrl-C) or the
    tuner's error, and the engine time it used until now (`engine_started_at` on)."""
    from tuner.trial.uptime import engine_s_until_now

    if isinstance(exc, Interrupted):
        kind, reason = FailureKind.INTERRUPTED, f"interrupted by {exc.signal_name}"
    elif isinstance(exc, KeyboardInterrupt):
        kind, reason = FailureKind.INTERRUPTED, "interrupted by the user"
    else:
        kind, reason = FailureKind.TUNER_ERROR, repr(exc)
    return TrialRecord(
        failure_kind=kind.value, failure_reason=reason[:500], engine_s=engine_s_until_now(trial)
    )
