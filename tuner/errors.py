"""Every exception the tuner defines, in one tree (as httpx's `_exceptions.py` lists its own).

    Exception
    ├── UserError ............ a mistake in the user's input (study file, flag, URL, storage);
    │                          the CLI prints it as one line on stderr and exits with code 2
    ├── RunInterrupted ....... Ctrl-C, SIGTERM or SIGHUP stopped a run after its trial was
    │                          recorded as interrupted; the CLI exits with 128 + the signal
    ├── NotReady ............. waiting for an engine's readiness ended without it: the process
    │                          exited, the start-up timeout passed, or another process holds
    │                          the port (`.foreign`) (tuner.engine.ready);
    │                          tuner.engine.process turns it into EngineStartFailed
    ├── EngineStartFailed .... the engine exited or timed out before it was ready; `.failure`
    │   (tuner.engine.failures)  is the classified Failure. A trial outcome, not a tuner error
    ├── ValueError
    │   └── EngineRefused .... the simulator's vLLM would refuse to start with these flags; the
    │                          message is vLLM's (raised in tuner.sim.engine). A trial outcome
    └── RuntimeError
        └── BenchmarkAborted . the workload stopped before its end: the engine died or hung;
            (tuner.workload.benchmark)  `.reason` says why. A trial outcome

The classes defined here depend on nothing. Two live elsewhere, named with their module above:
EngineStartFailed carries `tuner.engine.failures.Failure`, and this module, at the bottom of
the package, must not import the engine layer; BenchmarkAborted belongs to the workload code
that raises it (it has no dependency and may move here). Trial outcomes are caught by
tuner.runners.engine_runner and stored as the trial's failure; only UserError reaches the user
as such.
"""

from enum import StrEnum


class UserError(Exception):
    """A mistake in the user's input (file, flag, URL): reported in one line, no traceback."""


class NotReady(Exception):
    """Waiting ended without a ready engine: the process exited, or the timeout passed.
    `foreign`: the last server that answered on the port was not the engine."""

    def __init__(self, *, exited: bool, foreign: bool = False) -> None:
        super().__init__("engine exited before it was ready" if exited else "startup timed out")
        self.exited = exited
        self.foreign = foreign


class EngineRefused(ValueError):
    """vLLM would refuse to start with these flags; the message is vLLM's."""


class RunInterrupted(Exception):
    """A run stopped by Ctrl-C, SIGTERM or SIGHUP, after its trial was recorded as
    interrupted. The CLI prints one line and exits with 128 + `signum`."""

    def __init__(self, signum: int, signal_name: str, during: str | None = None) -> None:
        """`during`: what was interrupted when it was not a trial (recorded as unfinished)."""
        super().__init__(f"interrupted by {signal_name}" + (f" during {during}" if during else ""))
        self.signum, self.signal_name, self.during = signum, signal_name, during


class FailureKind(StrEnum):
    """Why a trial has no measurement. Engine start-up kinds are read from the engine's log
    (`tuner.engine.failures`); the rest are the tuner's own."""

    KV_CACHE_TOO_SMALL = "kv_cache_too_small"
    OUT_OF_MEMORY = "out_of_memory"
    INVALID_ARGUMENT = "invalid_argument"  # vLLM's rules or argparse refused the flags
    UNSUPPORTED_BLOCK_SIZE = "unsupported_block_size"
    PORT_IN_USE = "port_in_use"  # another process took the port first: retried elsewhere
    STARTUP_TIMEOUT = "startup_timeout"
    CRASHED = "crashed"  # exited during start-up for a reason no pattern names
    ENGINE_CRASHED = "engine_crashed"  # died during the workload
    ENGINE_HUNG = "engine_hung"  # stopped answering during the workload
    REQUESTS_FAILED = "requests_failed"  # up, but every request (or the first) failed
    INTERRUPTED = "interrupted"  # the tuner was stopped (Ctrl-C, a signal, kill) mid-trial
    TUNER_ERROR = "tuner_error"  # the tuner itself failed (the sampler, a bug): see the reason


# vLLM's rules' refusals (argument checks, the platform's block sizes): known before launch,
# they cost no engine time and do not use up `n_trials` (`tuner.run.reading.budget_used`).
RULE_REFUSALS = frozenset({FailureKind.INVALID_ARGUMENT, FailureKind.UNSUPPORTED_BLOCK_SIZE})

# Refusals at start-up that the memory precheck claims to predict.
PREDICTABLE = frozenset(
    {FailureKind.KV_CACHE_TOO_SMALL, FailureKind.UNSUPPORTED_BLOCK_SIZE, FailureKind.OUT_OF_MEMORY}
)
