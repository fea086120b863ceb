"""The runner interface: what the study loop hands a runner for one trial (`TrialContext`)
and what every runner is (`TrialRunner`: the study's workload, built once, and `measure`), with
what both runners share (`run_label`, `failed_measurement`). The runners: `EngineRunner`
(`tuner.runners.engine_runner`) on an engine process, `PlanRunner` (`tuner.runners.plan`) on
the simulation core in virtual time; the study loop never asks which it has.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tuner.errors import FailureKind
from tuner.measure.measurement import Measurement
from tuner.measure.mixes import objective_of
from tuner.measure.mode_words import words_of
from tuner.measure.modes import Objective
from tuner.spec.model_source import tokenizer_source
from tuner.spec.parts import Measuring
from tuner.spec.values import Scalar
from tuner.spec.workload import WorkloadSpec

if TYPE_CHECKING:
    from tuner.engine.process import EngineIdentity
    from tuner.measure.capacity import Beat
    from tuner.measure.pruning import Decision
    from tuner.measure.snapshot import Snapshot
    from tuner.workload.request import BenchRequest, Workload
    from tuner.workload.tokenizer import HFTokenizer

PhaseFn = Callable[[str], None]
Checkpoint = Callable[["Snapshot"], "Decision"]  # early stopping: a Snapshot in, a Decision out


@dataclass
class TrialContext:
    study_name: str
    number: int
    params: dict[str, Scalar]
    phase: PhaseFn
    # Called with the engine's identity once it runs, so a crashed tuner's successor can stop it.
    on_engine_started: Callable[[EngineIdentity, str], None] = lambda identity, log_path: None
    on_engine_stopped: Callable[[], None] = lambda: None
    # Early stopping (`tuner.measure.pruning`): a Snapshot in, a Decision out; None: never stop.
    checkpoint: Checkpoint | None = None
    # A scenario's own rule (its SLOs), by scenario name; a name not here uses `checkpoint`.
    checkpoints: dict[str, Checkpoint | None] = field(default_factory=dict)
    check_every_s: float = 2.0
    check_every_requests: int | None = None
    # Capacity mode's "cannot beat the best" (`load_runs.capacity_to_beat`); None: never
    beat: Beat | None = None
    # Capacity mode's first two rates, from the config's predicted capacity and its band
    # (`capacity.predicted_bracket`): (should hold, should break); None: from the study's rate
    bracket: tuple[float, float] | None = None
    # The engine log's name before its time stamp; None: `trial-<number>` (a trial's)
    log_name: str | None = None


class TrialRunner(abc.ABC):
    """Measures one parameter set of a study."""

    # `tuner plan`'s virtual time, no engine process (its study is `<name>-simulated` and all
    # its figures are the simulator's: the meanings of "simulated", `tuner.trial.keys`)
    planned: bool = False

    def __init__(self, spec: Measuring, workload: Workload | None = None) -> None:
        """`workload`: the requests to measure (default: the spec's, built on first use)."""
        self.spec = spec
        # the study's objective object, built once here: what every trial of this runner
        # runs (`measure_all`), and what the loop, the pipeline and its judges are passed
        self.objective = objective_of(spec)
        self._tokenizer: HFTokenizer | None = None
        self._take(workload)

    def _take(self, workload: Workload | None) -> None:
        given = None if workload is None else workload.requests
        self._requests: list[BenchRequest] | None = None if given is None else list(given)
        scenarios = {} if workload is None else workload.scenarios
        self._scenario_requests = {k: list(v) for k, v in scenarios.items()}
        self._seeded: dict[tuple[str, int], list[BenchRequest]] = {}  # (scenario, seed)

    @property
    def tokenizer(self) -> HFTokenizer:
        """The workload's tokenizer, loaded once: it builds the requests and re-counts the
        output tokens of a server that sends no usage."""
        if self._tokenizer is None:
            self._tokenizer = workload_tokenizer(self.spec)
        return self._tokenizer

    @property
    def requests(self) -> list[BenchRequest]:
        """The study's fixed requests, built once: same seed, same requests, same order."""
        if self._requests is None:
            self._requests = workload_requests(self.spec, self.tokenizer)
        return self._requests

    def requests_for(self, scenario: str, w: WorkloadSpec | None = None) -> list[BenchRequest]:
        """One scenario's fixed requests ("": the single workload's), built once. `w`: a run
        of that scenario whose seed is not the study's (capacity mode's repeat of a rate, on
        fresh prompts): its own requests, built once per seed."""
        study = self.spec.workloads[scenario] if scenario else self.spec.workload
        if w is not None and w.seed != study.seed:
            key = (scenario, w.seed)
            if key not in self._seeded:
                self._seeded[key] = self.build_requests(w)
            return self._seeded[key]
        if not scenario:
            return self.requests
        if scenario not in self._scenario_requests:
            self._scenario_requests[scenario] = self.build_requests(self.spec.workloads[scenario])
        return self._scenario_requests[scenario]

    def build_requests(self, w: WorkloadSpec) -> list[BenchRequest]:
        """A workload's requests, as this runner makes those it was not given: with the
        tokenizer (a runner for estimates may make them from their lengths alone)."""
        from tuner.workload.datasets import build_requests

        return build_requests(w, self.tokenizer)

    def built(self) -> Workload:
        """The requests built so far, as a value another runner can be made with."""
        from tuner.workload.request import Workload

        given = None if self._requests is None else tuple(self._requests)
        return Workload(given, {k: tuple(v) for k, v in self._scenario_requests.items()})

    def with_spec(self, spec: Measuring, workload: Workload) -> TrialRunner:
        """A runner like this one (same engine set-up, slot and tokenizer) for another spec and
        its workload (`tuner.fidelity.robustness_measured` runs the perturbed ones as scenarios)."""
        clone = copy.copy(self)
        clone.spec, clone.objective = spec, objective_of(spec)  # the other spec's, its own
        clone._take(workload)
        return clone

    def prepare(self) -> None:
        """Build the workload and load its tokenizer before the first trial: their errors (a
        missing dataset, a bad tokenizer) stop the run before any study exists, and their cost
        is not a trial's. A runner handed a built workload (a GPU slot's) loads its own
        tokenizer here: a fast tokenizer is not safe to share between threads
        (huggingface/tokenizers#537)."""
        for name in self.spec.workloads or [""]:
            self.requests_for(name)
        _ = self.tokenizer  # built the requests, or (a slot's) loaded now

    @abc.abstractmethod
    def measure(self, ctx: TrialContext) -> Measurement: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop anything still running (called on Ctrl-C and at the end)."""

    def kill(self) -> None:  # noqa: B027 - optional hook
        """Kill anything still running at once (a second Ctrl-C)."""


def workload_tokenizer(spec: Measuring) -> HFTokenizer:
    """The study's tokenizer: the workload's, else the engine's model directory (a hub id's
    cached snapshot: `tuner.spec.model_source`)."""
    from tuner.workload.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer_source(spec.workload.tokenizer, spec.engine.model))


def workload_requests(spec: Measuring, tokenizer: HFTokenizer | None = None) -> list[BenchRequest]:
    """The study's requests, from its dataset and tokenizer (loaded when not given)."""
    from tuner.workload.datasets import build_requests

    return build_requests(
        spec.workload, workload_tokenizer(spec) if tokenizer is None else tokenizer
    )


def run_label(objective: Objective, name: str, w: WorkloadSpec) -> str:
    """What the live display says a run is: its scenario, and its rate in capacity mode."""
    parts = [name] if name else []
    if (label := words_of(objective).run_label(w.request_rate)) is not None:
        parts.append(label)
    return " ".join(parts) + ": " if parts else ""


def failed_measurement(m: Measurement, kind: str, reason: str, log_tail: str) -> Measurement:
    m.metrics, m.failure_kind, m.failure_reason, m.log_tail = None, kind, reason, log_tail
    return m


def nothing_completed(m: Measurement, log_tail: str = "") -> Measurement | None:
    """A whole run (not one stopped early) where no request completed measured nothing: the
    failed measurement, with the requests' errors; None when a request completed. Its zero
    figures would otherwise be listed as p99 TTFT 0 and scored as the study's best."""
    if m.metrics is None or m.metrics.get("completed") or m.pruned_reason:
        return None
    errors = sorted({r.error for r in m.records if r.error})
    reason = "every request failed: " + ("; ".join(errors)[:500] or "no request was sent")
    return failed_measurement(m, FailureKind.REQUESTS_FAILED, reason, log_tail)
