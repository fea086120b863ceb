"""Faults `tuner sim serve` injects on purpose, so the tuner's recovery can be tested cheaply.

- refuse_start: fail at start-up after the load delay, with an engine-init error (exit 1);
- crash_after N: once N requests have started, the process exits abruptly (os._exit)
  after the next engine step, mid-stream for the requests in flight;
- hang_after N: once N requests have started, the engine stops after the next step:
  connections stay open, no more tokens come, /health still answers 200;
- slow_start_s S: S more seconds before the port opens;
- no_usage: streams carry no `usage` chunk, even when the client asks for one (as some
  OpenAI-compatible servers do), so the client must count output tokens from the text.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

REFUSE_START_MESSAGE = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {} (simulated fault: --fault-refuse-start)"
)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    refuse_start: bool = False
    crash_after: int | None = None
    hang_after: int | None = None
    slow_start_s: float = 0.0
    no_usage: bool = False


class FaultState:
    """Counts started requests and says when a planned fault fires."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.started = 0
        self.hung = False

    def request_started(self) -> None:
        self.started += 1

    def after_step(self) -> None:
        """Called after every engine step: crash or hang once enough requests started."""
        plan = self.plan
        if plan.crash_after is not None and self.started >= plan.crash_after:
            print(
                f"simulated fault: engine process crashed after {self.started} requests "
                "(--fault-crash-after)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        if plan.hang_after is not None and self.started >= plan.hang_after and not self.hung:
            self.hung = True
            print(
                f"simulated fault: engine hung after {self.started} requests (--fault-hang-after)",
                file=sys.stderr,
                flush=True,
            )
