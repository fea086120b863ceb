"""The client's event loop takes the run's stop signals between its callbacks
(`tuner.workload.loop`): what the handler raises leaves the loop whole, never from inside a
task's step or an anyio cancel scope."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import anyio
import pytest

from tuner.workload import loop


class Stop(KeyboardInterrupt):
    """What `tuner.run.signals.stopping`'s handler raises, as a stand-in."""


@pytest.fixture
def raising_sighup():
    calls: list[int] = []

    def handler(signum: int, frame: object) -> None:
        calls.append(signum)
        raise Stop

    old = signal.signal(signal.SIGHUP, handler)
    try:
        yield handler, calls
    finally:
        signal.signal(signal.SIGHUP, old)


def test_the_handler_runs_after_the_step_and_every_task_unwinds(raising_sighup):
    handler, calls = raising_sighup
    seen: list[str] = []

    async def other() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            seen.append("other unwound")

    async def main() -> None:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        with anyio.fail_after(30):  # a cancel scope, as httpx's connect has
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)  # delivered by now: a handler called here would raise here
            seen.append("the step went on")
            await asyncio.sleep(30)
        await task

    with pytest.raises(Stop):
        loop.run(main())
    assert calls == [signal.SIGHUP]
    assert seen == ["the step went on", "other unwound"]
    assert signal.getsignal(signal.SIGHUP) is handler  # the run's handler is back


def test_a_handler_that_does_not_raise_lets_the_run_finish(raising_sighup):
    counted: list[int] = []
    signal.signal(signal.SIGHUP, lambda signum, frame: counted.append(signum))

    async def main() -> str:
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
        return "done"

    assert loop.run(main()) == "done"
    assert counted == [signal.SIGHUP]


def test_a_signal_in_the_last_step_is_handled_before_it_returns(raising_sighup):
    _, calls = raising_sighup

    async def main() -> None:
        os.kill(os.getpid(), signal.SIGHUP)  # the step ends the run: no callback runs after

    with pytest.raises(Stop):
        loop.run(main())
    assert calls == [signal.SIGHUP]


def test_off_the_main_thread_it_is_asyncio_run():
    out: list[object] = []

    async def main() -> int:
        await asyncio.sleep(0)
        return 7

    worker = threading.Thread(target=lambda: out.append(loop.run(main())))
    worker.start()
    worker.join(10)
    assert out == [7]
