"""The client's event loop, with the process's stop signals taken between its callbacks.

A run's Ctrl-C, SIGTERM and SIGHUP handlers raise (`tuner.run.signals.stopping`, Python's own
SIGINT handler). Python runs a handler in the main thread at the next bytecode, so inside an
event loop the exception starts wherever a task's step happens to be, and inside anyio's cancel
scopes (httpx's connect timeout) it can leave the scopes' bookkeeping broken: a SIGHUP while
the workload emptied the prefix cache ended `tuner run` with a `RuntimeError` ("Attempted to
exit a cancel scope that isn't the current tasks's current cancel scope") and then a
`CancelledError`, exit code 1, instead of the signal's 129 (a fresh clone's suite, 7 Dec). Here
the handler is called from a loop callback instead, between two tasks' steps, as asyncio's own
runner treats SIGINT; what it raises leaves the loop there, and the runner cancels every task,
which unwind at their awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

# The signals that stop a run (`tuner.run.signals`): Ctrl-C, `timeout`/systemd, a dropped session.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

PythonHandler = Callable[[int, FrameType | None], Any]


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with each Python handler of SIGINT, SIGTERM and SIGHUP called
    between the loop's callbacks rather than inside a task's step, while the loop runs and
    while it is torn down. A signal whose call the loop did not reach before it closed is
    handled once it is closed, before this returns. The handlers in place before are in place
    after. What a handler raises leaves the loop if it is a KeyboardInterrupt (the run's
    `Interrupted` is; asyncio re-raises only those and SystemExit from a callback). Off the
    main thread (a slot's trial), where no handler can be set: `asyncio.run`."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    handlers: dict[signal.Signals, PythonHandler] = {}
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if callable(handler):  # SIG_DFL and SIG_IGN stay what they are
            handlers[sig] = handler
    pending: list[int] = []

    def deliver() -> None:
        while pending:
            signum = pending.pop(0)
            handlers[signal.Signals(signum)](signum, None)

    runner = asyncio.Runner()
    loop = runner.get_loop()

    def defer(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)
        with contextlib.suppress(RuntimeError):  # closed: `deliver` below takes it
            loop.call_soon_threadsafe(deliver)

    for sig in handlers:
        signal.signal(sig, defer)
    try:
        with runner:
            return runner.run(main)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        deliver()
