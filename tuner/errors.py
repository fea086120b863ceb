"""Every exception the tuner defines, in one tree (as httpx's `_exceptions.py` lists its own).

    Exception
    └── TunerError ............. the base of every exception the tuner raises (but one, below)
        ├── UserError .......... a mistake in the user's input (study file, flag, URL, storage);
        │                        the CLI prints it as one line on stderr and exits with code 2
        ├── KeyTaken ........... another process stored a row of the same key first (the run
        │                        lock, a config's claim): the database's unique key, mapped
        │                        from the driver's error by tuner.store.driver_errors
        ├── RunInterrupted ..... Ctrl-C, SIGTERM or SIGHUP stopped a run after its trial was
        │                        recorded as interrupted; the CLI exits with 128 + the signal
        ├── NotReady ........... waiting for an engine's readiness ended without it: the
        │                        process exited, the start-up timeout passed, or another process
        │                        holds the port (`.foreign`) (tuner.engine.ready);
        │                        tuner.engine.process turns it into EngineStartFailed
        ├── EngineStartFailed .. the engine exited or timed out before it was ready; `.failure`
        │   (tuner.engine.failures)  is the classified Failure. A trial outcome
        ├── EngineRefused ...... (also a ValueError) the simulator's vLLM would refuse to start
        │                        with these flags; the message is vLLM's (raised in
        │                        tuner.sim.engine). A trial outcome
        ├── BenchmarkAborted ... (also a RuntimeError) the workload stopped before its end: the
        │   (tuner.workload.benchmark)  engine died or hung; `.reason` says why. A trial outcome
        ├── BenchmarkPruned .... (also a RuntimeError) early stopping stopped the workload at a
        │   (tuner.workload.benchmark)  checkpoint; `.result` holds what was measured by then
        ├── _Stopped ........... early stopping's decision, raised out of the event loop and
        │   (tuner.workload.benchmark)  turned into BenchmarkPruned there (private)
        └── _StepFailed ........ a failed rate step of the capacity search, carrying its
            (tuner.runners.load_runs)   measurement out of the search (private)

    BaseException
    └── KeyboardInterrupt
        └── Interrupted ........ (tuner.run.signals) what a signal handler raises mid-trial: a
                                 KeyboardInterrupt on purpose, so that no `except Exception`
                                 on the way swallows it; tuner.run.session turns it
                                 into RunInterrupted

The classes defined here depend on nothing. The others live with the data they carry, named
with their module above: EngineStartFailed carries `tuner.engine.failures.Failure`, and this
module, at the bottom of the package, must not import the engine layer; the benchmark's carry
its result. Trial outcomes are caught by tuner.runners.engine_runner and stored as the trial's
failure; only UserError reaches the user as such. `tests/test_errors.py` holds every exception
class of the package to this tree.
"""

from enum import StrEnum


class TunerError(Exception):
    """The base of every exception the tuner defines (the tree above)."""


class UserError(TunerError):
    """A mistake in the user's input (file, flag, URL): reported in one line, no traceback."""


class KeyTaken(TunerError):
    """Another process stored a row of the same key first (`tuner.store.driver_errors`)."""


class NotReady(TunerError):
    """Waiting ended without a ready engine: the process exited, or the timeout passed.
    `foreign`: the last server that answered on the port was not the engine."""

    def __init__(self, *, exited: bool, foreign: bool = False) -> None:
        super().__init__("engine exited before it was ready" if exited else "startup timed out")
        self.exited = exited
        self.foreign = foreign


class EngineRefused(TunerError, ValueError):
    """vLLM would refuse to start with these flags; the message is vLLM's."""


class RunInterrupted(TunerError):
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
    # The box's state, not the config's (tuner.engine.gpu_memory, docs/reliability.md):
    BOX_BUSY = "box_busy"  # another process held the GPU's memory at start: waited, never told
    GPU_FAULT = "gpu_fault"  # Xid, illegal memory access, NCCL timeout, ECC: retried once


# vLLM's rules' refusals (argument checks, the platform's block sizes): known before launch,
# they cost no engine time and do not use up `n_trials` (`tuner.run.reading.budget_used`).
RULE_REFUSALS = frozenset({FailureKind.INVALID_ARGUMENT, FailureKind.UNSUPPORTED_BLOCK_SIZE})

# What the box did, not the config: never told to the sampler as the config's result.
BOX_FAULTS = frozenset({FailureKind.BOX_BUSY, FailureKind.GPU_FAULT})

# Refusals at start-up that the memory precheck claims to predict.
PREDICTABLE = frozenset(
    {FailureKind.KV_CACHE_TOO_SMALL, FailureKind.UNSUPPORTED_BLOCK_SIZE, FailureKind.OUT_OF_MEMORY}
)
