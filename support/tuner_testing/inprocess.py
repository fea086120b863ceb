"""`tuner run` in the test's own process, on the simulated engine in virtual time.

A `tuner run` on `tuner sim serve` is ~4.5 s of CPU (a CLI process, and a server process and an
HTTP client per trial, waiting in scaled real time); the same study on the simulation core in
this process is a fraction of a second per trial (docs/performance.md, "The suite's time"). A
test whose point is the tuner's logic (what the loop, the screen, `--confirm`'s checks and the
results commands decide) runs the real `tuner run` command here with `SimEngine` in place of
the engine runner: the CLI's parsing, preflight, store, loop, checks and printing are the
product's own; only the engine process is not. Tests whose point is a process (signals,
`kill -9`, ports, PostgreSQL workers, the README's commands) keep `tuner sim serve`.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tuner import __version__
from tuner.measure.measurement import Measurement
from tuner.runners.plan import PlanRunner
from tuner.runners.trial_runner import TrialContext, TrialRunner
from tuner.sim.profile_file import load_gpu
from tuner.spec.study import StudySpec
from tuner.spec.values import Flags
from tuner.trial.uptime import simulated_engine_startup_s


class SimEngine(PlanRunner):
    """`tuner sim serve` as the loop sees it, without its process: a real engine to the loop
    (`planned` False: its study is the file's, the screen and `--confirm`'s measured checks
    run), its figures the simulation core's in virtual time, stored as `tuner sim serve`'s are
    (SIMULATED, version `sim-<version>`). The profile is the engine's `gpu` flag, as the
    server reads it (a profile file: a hidden truth the study is not told). Each `measure` is
    one engine start; `starts` names them as the engine runner names its logs."""

    planned = False

    def __init__(self, spec: StudySpec, starts: list[str]) -> None:
        super().__init__(spec)
        gpu = spec.engine.flags.get("gpu")  # the engine's flag, as `tuner sim serve` reads it
        self.gpu = load_gpu(str(gpu)) if gpu else None
        self.starts = starts  # shared with `with_spec`'s copies (the checks' runners)

    def startup_s(self, flags: Flags) -> float:
        return simulated_engine_startup_s(flags)  # `tuner sim serve`'s start, not a vLLM's

    def measure(self, ctx: TrialContext) -> Measurement:
        self.starts.append(ctx.log_name or f"trial-{ctx.number:04d}")
        m = super().measure(ctx)
        m.vllm_version = f"sim-{__version__}"  # as `tuner sim serve`'s /version
        return m


@dataclass
class Ran:
    """What an in-process `tuner` command did: its exit code, output, and engine starts."""

    returncode: int
    stdout: str
    stderr: str
    starts: list[str] = field(default_factory=list)


def tuner_in_process(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    engine: Callable[[StudySpec, list[str]], TrialRunner] = SimEngine,
) -> Ran:
    """`tuner ARGS` (`tuner.cli.main`) in this process from `cwd`, its output captured, every
    engine `engine(spec, starts)` (a `SimEngine`); `env`: variables set for the command."""
    from tuner import cli
    from tuner.run import session

    starts: list[str] = []
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        patch.setattr(session, "engine_runners", lambda spec, *_: lambda slot: engine(spec, starts))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli.main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Ran(code, out.getvalue(), err.getvalue(), starts)
