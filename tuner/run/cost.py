"""The night's cost before it starts: expected engine time per trial × the budget, against the
timeout (docs/preflight.md).

A trial's engine time is its start-up plus its workload (every rate step of a capacity
search). Where the study has real trials, their mean engine time is the estimate (what
launched trials cost on this box); else the simulator runs vLLM's defaults (the baseline
trial) in virtual time, as `tuner plan` would: SIMULATED, and as good as the profile.
`night_cost` is the one entry point (`tuner check`, `tuner run`, `tuner init`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.engine.vllm_flags import is_simulated_engine
from tuner.errors import UserError
from tuner.fidelity.bands import Bands
from tuner.fidelity.predict_skip import capacity_bracket
from tuner.measure.capacity import Beat, race_high
from tuner.measure.measurement import Measurement
from tuner.measure.mode_words import words_of
from tuner.measure.modes import CAPACITY_RPS
from tuner.measure.runs import CapacityResult
from tuner.runners.plan import PlanRunner
from tuner.runners.trial_runner import Checkpoint, TrialContext
from tuner.sim.profiles import BUILTIN_MODELS, known_model
from tuner.spec.model_source import tokenizer_source
from tuner.spec.space import baseline_params, distributions, effective_flags, spec_rules
from tuner.spec.study import StudySpec
from tuner.spec.values import Scalar
from tuner.spec.workload import WorkloadSpec
from tuner.trial.payloads import SkipPrediction
from tuner.trial.point import TrialPoint
from tuner.trial.uptime import median_startup_s, simulated_engine_startup_s
from tuner.workload.lengths import length_only_requests
from tuner.workload.request import BenchRequest


@dataclass(frozen=True)
class NightCost:
    """Expected engine time of a study's budget. `trial_s` None: no estimate (`source` says
    why). `simulated`: the estimate is the simulator's, not a measurement."""

    n_trials: int
    trial_s: float | None
    source: str
    timeout_s: float | None = None
    simulated: bool = False
    startup_s: float | None = None  # of `trial_s`, the engine's start-up
    done: int = 0  # trials of the budget already done (a continued study): `n_trials` are left
    startup_source: str = ""  # whose start-up `startup_s` is, in words
    # the multi-fidelity screen's seconds choosing each next trial (between engines), when
    # measured on the study's trials; `screened`: the study has such a screen
    screen_s: float | None = None
    screened: bool = False
    # `simulated`: one trial's engine time, low and high, as the simulator's band on its
    # workload's throughput (`tuner.fidelity.bands`; the start-up as estimated) gives them
    trial_band_s: tuple[float, float] | None = None
    # the first trial's engine time when it differs from the others' (`trial_s`): capacity
    # mode's race, where vLLM's defaults are searched whole and every later config races the
    # incumbent (`simulated_race_s`); None: every trial alike
    first_s: float | None = None
    # one engine start as `tuner plan` counts it (a real engine's, for a study on the simulated
    # engine too), when the estimate is the simulator's: `trials_in(..., as_planned=True)`
    planned_startup_s: float | None = None

    @property
    def basis(self) -> str:
        """Where the figure comes from, and whose start-up it counts."""
        label = "SIMULATED, " if self.simulated else ""
        start = ""
        if self.startup_s is not None and self.startup_source:
            start = f"; start-up ~{duration(self.startup_s)} per trial: {self.startup_source}"
        return f"{label}{self.source}{start}"

    def band_words(self, n_trials: float = 1) -> str:
        """`73 min-98 min, `: `n_trials`' engine time in the simulator's band, or ""."""
        if self.trial_band_s is None:
            return ""
        low, high = (n_trials * x for x in self.trial_band_s)
        return f"{duration(low)}-{duration(high)}, "

    @property
    def per_trial_s(self) -> float | None:
        """One trial's engine time and, when measured, the screen's time before it."""
        return None if self.trial_s is None else self.trial_s + (self.screen_s or 0.0)

    @property
    def total_s(self) -> float | None:
        each = self.per_trial_s
        if each is None:
            return None
        first = self._first_s
        if first is None or not self.n_trials:
            return each * self.n_trials
        return first + each * (self.n_trials - 1)

    @property
    def _first_s(self) -> float | None:
        """The first trial's engine time when it is still to run and differs (`first_s`)."""
        if self.first_s is None or self.done:
            return None
        return self.first_s + (self.screen_s or 0.0)

    def trials_in(self, seconds: float, as_planned: bool = False) -> int | None:
        """About how many trials `seconds` hold (None: no estimate). `as_planned`: each start
        counted as `tuner plan` counts it, where it counts more (`planned_startup_s`)."""
        each, first = self.per_trial_s, self._first_s
        more = (self.planned_startup_s or 0.0) - (self.startup_s or 0.0)
        if as_planned and more > 0 and each:
            each, first = each + more, None if first is None else first + more
        if not each:
            return None
        if first is None:
            return int(seconds // each)
        return 0 if seconds < first else 1 + int((seconds - first) // each)

    @property
    def trials_in_timeout(self) -> int | None:
        """About how many trials the timeout allows (None: no timeout or no estimate)."""
        if self.timeout_s is None:
            return None
        return self.trials_in(self.timeout_s)

    def _screen_words(self) -> str:
        if self.screen_s is not None:
            return (
                f", and ~{duration(self.screen_s)} a trial choosing it (the multi-fidelity "
                f"screen, measured on them): {duration(self.total_s or 0.0)} in all"
            )
        if self.screened:
            return ", and the multi-fidelity screen's time choosing each trial (not yet measured)"
        return ""

    @property
    def fits(self) -> bool:
        """The budget ends before the timeout (or there is no timeout, or no estimate)."""
        total = self.total_s
        return total is None or self.timeout_s is None or total <= self.timeout_s

    def line(self) -> str:
        """`30 trials × ~72 min = 37.6 h of engine time; timeout 12h allows about 10 trials`."""
        if self.trial_s is None:
            return f"night's cost: unknown ({self.source})"
        left = f" left ({self.done} done)" if self.done else ""
        first = None if self._first_s is None or self.n_trials < 1 else self.first_s
        counted = self.n_trials if first is None else self.n_trials - 1
        engine_s = self.trial_s * counted + (first or 0.0)
        head = "" if first is None else f"~{duration(first)} (the first, searched whole) + "
        text = (
            f"night's cost: {self.n_trials} trial(s){left}: {head}{counted} × "
            f"~{duration(self.trial_s)} = {duration(engine_s)} of engine time "
            f"({self.band_words(engine_s / self.trial_s)}{self.basis}){self._screen_words()}"
            if first is not None
            else f"night's cost: {self.n_trials} trial(s){left} × ~{duration(self.trial_s)} = "
            f"{duration(engine_s)} of engine time ({self.band_words(self.n_trials)}{self.basis})"
            f"{self._screen_words()}"
        )
        if self.timeout_s is None:
            return text + "; no timeout"
        allowed = self.trials_in_timeout or 0
        if self.fits:
            return text + f"; fits in the timeout of {duration(self.timeout_s)}"
        if allowed == 0:  # the timeout is checked between trials: the first one runs whole
            which = "its first trial" if self.done else "its first (the baseline)"
            return (
                text + f"; timeout {duration(self.timeout_s)} is shorter than one trial: the "
                f"run stops after {which}; raise budget.timeout"
            )
        return (
            text + f"; timeout {duration(self.timeout_s)} allows about {allowed} trial(s): "
            f"lower budget.n_trials to {allowed} or raise budget.timeout"
        )


def duration(seconds: float) -> str:
    """90 s, 72 min, 37.6 h: the unit a person reads a night in."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def night_cost(
    spec: StudySpec,
    *,
    n_trials: int | None = None,
    timeout_s: float | None = None,
    real_trials: Sequence[TrialPoint] = (),
    done: int = 0,
) -> NightCost:
    """The expected engine time of `n_trials` (default: the budget's, less `done`) against
    `timeout_s` (default: the budget's). `real_trials`: the study's stored trials, if any
    (the launched ones, not `tuner plan`'s, give the estimate)."""
    n = n_trials if n_trials is not None else max(spec.budget.n_trials - done, 0)
    done = 0 if n_trials is not None else done
    timeout = timeout_s if timeout_s is not None else spec.budget.timeout_s
    multi = spec.search.fidelity == "multi"
    launched = [  # an interrupted trial's engine time ended where the user stopped it
        p
        for p in real_trials
        if not p.planned and p.record.engine_s and p.status != "running" and not p.interrupted
    ]
    if launched:
        mean_s, first_compile_s = launched_trial_s(launched)
        source = f"the mean of {len(launched)} launched trial(s) of this study"
        if first_compile_s:
            source += f", the first start's cold compile ({duration(first_compile_s)}) once"
        startup = median_startup_s(p.record.startup_s for p in launched)
        measured = "measured on them (median)" if startup is not None else ""
        screens = [p.record.screen for p in launched if p.record.screen is not None]
        screen_s = (
            sum(x.calibrate_s + x.screen_s for x in screens) / len(screens) if screens else None
        )
        return NightCost(n, mean_s, source, timeout, startup_s=startup, done=done,
                         startup_source=measured, screen_s=screen_s, screened=multi)  # fmt: skip
    unknown = _no_lengths(spec)
    if unknown is not None:
        return NightCost(n, None, unknown, timeout, done=done)
    stand_in = builtin_stand_in(spec.engine.model)
    if stand_in is not None:
        engine = spec.engine.model_copy(update={"model": stand_in})
        spec = spec.model_copy(update={"engine": engine})
    elif known_model(spec.engine.model) is None:  # the preflight's note says why, once
        return NightCost(
            n, None, "engine.model: no shape to simulate, see its note", timeout, done=done
        )
    try:
        runner = length_only_runner(spec)
        baseline = simulated_baseline(spec, runner)
        trial_s, startup_s = simulated_trial_s(baseline)
        raced = simulated_race_s(spec, runner, baseline)
    except UserError as exc:
        return NightCost(n, None, f"the simulator cannot estimate it: {exc}", timeout, done=done)
    source = "the simulator's baseline trial" + words_of(runner.objective).estimated_trial()
    if raced is not None:
        source += (
            f"; each later trial the mean of {RACERS} configs drawn at random racing, one "
            'after another, the incumbent so far (docs/objective.md, "The race")'
        )
    if stand_in is not None:
        source += f", with the built-in {stand_in} for the missing model directory"
    first_s = None
    if raced is not None:
        first_s, trial_s = trial_s, raced
    workload_s = trial_s - startup_s
    startup_s, whose = engine_startup(spec, startup_s)
    # the same requests served faster end sooner: the throughput's band, inverted
    band = Bands.of_study(spec).family_band("throughput").inverse()
    low, high = band.around(workload_s)
    if first_s is not None:
        first_s = first_s - float(baseline.startup_s or 0.0) + startup_s
    return NightCost(
        n, workload_s + startup_s, source, timeout, True, startup_s, done, whose, screened=multi,
        trial_band_s=(startup_s + low, startup_s + high), first_s=first_s,
        planned_startup_s=float(baseline.startup_s or 0.0),
    )  # fmt: skip


def launched_trial_s(launched: Sequence[TrialPoint]) -> tuple[float, float]:
    """(mean engine seconds a trial, the first start's cold compile left out of it): the first
    engine start of a study compiles cold (an empty compile cache), a cost paid once, not by
    every trial; a later trial's compile counts as its log told it, cold (a new config: vLLM's
    cache is keyed by `max_num_seqs`, `max_num_batched_tokens` and the rest) or cached. The
    compile left out is at most the first start's measured start-up: `tuner sim serve` logs
    vLLM's phases as modelled (a 40 s cold compile) in a 3 s start, and its one trial of 11 s
    read as ~0 s ("99 trials × ~0 s … fits in the timeout of 1 s")."""
    first = min(launched, key=lambda p: p.number)
    phases, rec = first.record.startup_phases, first.record
    once_s = phases.cold_compile_s if phases is not None else 0.0
    paid_s = float(rec.engine_s or 0.0)  # what the first start can have spent compiling
    once_s = min(once_s, paid_s if rec.startup_s is None else min(float(rec.startup_s), paid_s))
    total_s = sum(float(p.record.engine_s or 0.0) for p in launched)
    return (total_s - once_s) / len(launched), once_s


def engine_startup(spec: StudySpec, planned_s: float) -> tuple[float, str]:
    """(seconds, whose, in words) of one engine start in this study: the simulated engine's
    own when the study runs `tuner sim serve` (seconds, whatever GPU it stands in for),
    else the real engine's that `tuner plan` counted (`planned_s`)."""
    if is_simulated_engine(spec.engine.command):
        whose = "the simulated engine's, measured (benchmarks/sim_startup.py)"
        return simulated_engine_startup_s(spec.engine.flags), whose
    if spec.hardware.startup_s is not None:
        return planned_s, "a real engine's, from hardware.startup_s"
    return planned_s, "a real engine's, estimated (docs/early-stopping.md)"


def _no_lengths(spec: StudySpec) -> str | None:
    """Why the requests' lengths are not known before the run, or None: a dataset file's
    texts need the tokenizer to count (it is also the run's to report missing)."""
    if _tokenizer_dir(spec).is_dir():
        return None
    for w in [spec.workload, *spec.workloads.values()]:
        if length_only_requests(w, reuse=False) is None:
            return f"the {w.dataset_name} dataset's lengths need the tokenizer, not found"
    return None


def _tokenizer_dir(spec: StudySpec) -> Path:
    return Path(tokenizer_source(spec.workload.tokenizer, spec.engine.model)).expanduser()


def builtin_stand_in(model: str) -> str | None:
    """The built-in model named like a model directory that is not here (the shipped studies'
    `/mnt/data/models/DeepSeek-R1-Distill-Qwen-32B`), else None. Only a local path (absolute,
    from `~` or `.`): a hub id is the cache's or unknown (`tuner.spec.model_source`)."""
    path = Path(model).expanduser()
    key = path.name.lower()
    local = model.strip().startswith(("/", "~", "."))
    if not local or path.is_dir() or key not in BUILTIN_MODELS:
        return None
    return key


def simulated_trial_s(m: Measurement) -> tuple[float, float]:
    """(engine seconds, start-up seconds) of a simulated trial (`simulated_baseline`).
    UserError: it did not end."""
    if not math.isfinite(m.engine_s):
        raise UserError("the simulated trial did not end")
    return m.engine_s, float(m.startup_s or 0.0)


RACERS = 12  # configs the night's cost races, one after another, from the simulated baseline


def simulated_race_s(spec: StudySpec, runner: PlanRunner, baseline: Measurement) -> float | None:
    """The engine seconds of a later trial in capacity mode, where each config races the
    incumbent (`capacity.race_rps`): `RACERS` configs drawn at random from the search space
    (those vLLM's rules let start; seed 0) race, one after another as a night runs them, the
    incumbent so far (the simulated baseline's capacity first; a config that holds the race and
    finds more becomes it), each as a launch with early stopping runs it (the SLO rule on each
    step, the step budget); their mean. Racing the baseline alone, a config that holds the race
    costs a whole search where the night's better incumbent would stop it in one step: six
    draws read 43 min a later trial on the longdoc study whose plan spends 6 to 14 min (issue
    47). None: not capacity mode, early stopping off, or the baseline found no capacity."""
    found = baseline.capacity
    if not spec.pruning.enabled or found is None:
        return None
    reference = found.capacity_rps
    if runner.objective.to_beat(reference, reference) is None:  # the race a launch runs
        return None
    beat = _beat(found, reference)
    times = []
    for i, params in enumerate(drawn_configs(spec, RACERS), start=1):
        ctx = TrialContext(spec.name, i, params, phase=lambda _: None, beat=beat)
        ctx = replace(ctx, checkpoint=slo_rule(spec), check_every_s=spec.pruning.check_every_s)
        ctx.check_every_requests = spec.pruning.check_every_requests
        m = runner.measure(ctx)
        if math.isfinite(m.engine_s):
            times.append(m.engine_s)
        held = m.capacity
        if held is not None and held.capacity_rps > beat.best_rps:  # the new incumbent
            beat = _beat(held, reference)
    return statistics.fmean(times) if times else None


def _beat(found: CapacityResult, reference_rps: float) -> Beat:
    """What a later config races: `found`'s capacity and its high end (`race_high`)."""
    return Beat(
        found.capacity_rps, reference_rps, race_high(found.capacity_rps_high, found.above_rps)
    )


def drawn_configs(spec: StudySpec, n: int, seed: int = 0) -> list[dict[str, Scalar]]:
    """`n` configs drawn at random from the search space (`seed`), each one vLLM's rules
    let start (`spec_rules`); fewer when the draws keep being refused."""
    import optuna

    space = distributions(spec.search_space)
    was = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created" line
    try:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    finally:
        optuna.logging.set_verbosity(was)
    out: list[dict[str, Scalar]] = []
    for _ in range(20 * n):
        if len(out) == n:
            break
        trial = study.ask(space)
        study.tell(trial, 0.0)
        if spec_rules(spec, effective_flags(spec, trial.params)) is None:
            out.append(dict(trial.params))
    return out


def slo_rule(spec: StudySpec) -> Checkpoint:
    """Early stopping as a capacity step of the baseline meets it: the SLO rule alone (no
    incumbent compares in capacity mode; `Pipeline._stop_rule`)."""
    from tuner.measure import pruning

    rule = pruning.study_rule(spec.pruning, spec.slo_limits())
    return lambda snap: pruning.decide(snap, rule)


class _LengthOnlyRunner(PlanRunner):
    """`tuner plan`'s runner, with random and long-document requests built from their lengths
    alone (the simulator reads nothing else), a capacity repeat's fresh seed too: no
    tokenizer, seconds sooner. Without the tokenizer (`reuse` False), long documents asked
    several times are costed as if each were new (no prefix hits: the estimate errs long)."""

    def __init__(self, spec: StudySpec, reuse: bool) -> None:
        from tuner.workload.request import Workload

        self.reuse = reuse
        built = {}  # a workload left out: the runner builds it with the tokenizer
        for name, w in {"": spec.workload, **spec.workloads}.items():
            requests = length_only_requests(w, reuse=reuse)
            if requests is not None:
                built[name] = tuple(requests)
        super().__init__(spec, workload=Workload(built.pop("", None), built))

    def build_requests(self, w: WorkloadSpec) -> list[BenchRequest]:
        made = length_only_requests(w, reuse=self.reuse)
        return made if made is not None else super().build_requests(w)


def length_only_runner(spec: StudySpec) -> PlanRunner:
    """`tuner plan`'s runner for estimates (`_LengthOnlyRunner`)."""
    return _LengthOnlyRunner(spec, reuse=_tokenizer_dir(spec).is_dir())


def simulated_baseline(spec: StudySpec, runner: PlanRunner | None = None) -> Measurement:
    """vLLM's defaults (the baseline trial) measured once by the simulator in virtual time,
    no early stopping: SIMULATED figures, `engine_s` counting the start-up (`startup_s`).
    In capacity mode, the search as a launch runs it: from the bracket around the simulator's
    own capacity for the config (`capacity_bracket`: what the prediction before each launch
    gives, uncalibrated before any trial). UserError: the simulator cannot run it (as
    `simulated_trial_s`)."""
    runner = runner or length_only_runner(spec)
    if runner.gpu is None:
        raise UserError("hardware.gpu is not set")
    params = baseline_params(spec.search_space) or {}
    ctx = TrialContext(spec.name, 0, dict(params), phase=lambda _: None)
    m = runner.measure(ctx)
    if m.failure_kind is not None and not m.workload_s:
        raise UserError(f"vLLM's defaults do not start on the simulator ({m.failure_reason})")
    found = m.found_rps
    predicted = SkipPrediction(metrics={CAPACITY_RPS: found}) if found else None
    bracket = capacity_bracket(spec, runner.objective, predicted)
    if bracket is None:
        return m
    if spec.pruning.enabled:  # its steps stop as launched
        ctx = replace(ctx, checkpoint=slo_rule(spec), check_every_s=spec.pruning.check_every_s)
        ctx.check_every_requests = spec.pruning.check_every_requests
    return runner.measure(replace(ctx, bracket=bracket))
