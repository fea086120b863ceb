"""The preflight: every problem of a study found in one pass, before the night
(`tuner check`, and `tuner run` before trial 0; docs/preflight.md).

Each problem is one line: the engine command not found or not runnable; the model directory,
tokenizer, dataset files or chat template missing; flag names the engine does not accept
(`tuner.run.flagcheck`); and every refusal of `tuner.run.checks`. Nothing is written. The
night's cost (`tuner.run.cost`) and how far to trust `tuner plan` (`tuner.run.plan_notes`)
come with it as information, never as a problem.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner.engine.vllm_flags import executable, is_simulated_engine
from tuner.errors import UserError
from tuner.fidelity.warm_start import check_sources
from tuner.run import checks
from tuner.run.cost import NightCost, night_cost
from tuner.run.defaults_notes import defaults_notes
from tuner.run.flagcheck import check_flags, unmodelled
from tuner.run.plan_notes import plan_notes
from tuner.run.reading import budget_used
from tuner.run.sampling import check_sampler
from tuner.sim.profiles import unknown_model_note
from tuner.spec.study import StudySpec
from tuner.store.storage import Store, resolve_storage
from tuner.trial import StudyRecord, TrialPoint, specs
from tuner.trial.reading import read_study
from tuner.trial.specs import study_name


@dataclass
class Preflight:
    """What the preflight found: problems (one line each: the run would fail), notes
    (information), the night's cost (None when not asked for)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cost: NightCost | None = None
    flags_against: str = ""
    judging: list[str] = field(default_factory=list)  # what the file changes in the judging


@dataclass(frozen=True)
class RunArgs:
    """What `tuner run` was asked beyond the study file (`tuner check` asks nothing)."""

    storage: str | None = None
    n_trials: int | None = None
    timeout_s: float | None = None
    from_plan: int | None = None
    warm_start: tuple[str, int] | None = None
    accept_changes: bool = False


def preflight(spec: StudySpec, args: RunArgs = RunArgs(), *, slow: bool = True) -> Preflight:
    """Every problem `tuner run` would meet with this spec, in one pass, writing nothing.
    `slow`: also ask the engine's vLLM for its flags (seconds to a minute) and estimate the
    night's cost on the simulator."""
    result = Preflight()
    problems = result.problems
    problems += _collect(checks.run_checks(spec, args.storage))
    problems += _collect(
        [
            lambda: check_sampler(spec),
            lambda: check_sources(
                resolve_storage(args.storage or spec.storage),
                spec,
                args.from_plan,
                args.warm_start,
            ),
        ]
    )
    problems += engine_problems(spec)
    problems += file_problems(spec)
    result.notes += model_notes(spec)
    flags = check_flags(spec, probe=slow)
    problems += flags.problems
    result.notes += flags.notes + defaults_notes(spec)
    result.flags_against = flags.against
    real = stored_real_trials(spec, args.storage, args.accept_changes, problems, result.judging)
    if slow:
        sid = specs.spec_id(spec.model_dump())  # this file's trials (a new baseline: none yet)
        current = specs.of_spec(real[0], real[1], sid) if real else []
        result.cost = night_cost(
            spec,
            n_trials=args.n_trials,
            timeout_s=args.timeout_s,
            real_trials=current,
            done=budget_used(current, real_only=spec.search.fidelity == "multi")[0],
        )
        if args.from_plan:
            result.notes += plan_notes(spec, real)
    return result


def plan_preflight(spec: StudySpec, storage: str | None = None) -> Preflight:
    """What `tuner plan` refuses (prompts longer than max-model-len, a bad profile, a missing
    tokenizer or dataset, unknown flags), all in one pass, and how far to trust the plan."""
    result = Preflight()
    model = [lambda: checks.check_simulator_model(spec.engine.model)]  # every trial reads it
    result.problems += _collect([*model, *checks.plan_checks(spec), lambda: check_sampler(spec)])
    result.problems += checks.workload_file_problems(spec)
    flags = check_flags(spec)
    result.problems += flags.problems
    result.flags_against = flags.against
    result.notes += flags.notes + ([] if flags.problems else unmodelled(spec))
    if not result.problems:
        result.notes += plan_notes(spec, stored_real_trials(spec, storage))
    return result


def _collect(found: Sequence[Callable[[], object]]) -> list[str]:
    """Each check's UserError, as its line."""
    problems: list[str] = []
    for check in found:
        try:
            check()
        except UserError as exc:
            problems.append(str(exc))
    return problems


def engine_problems(spec: StudySpec) -> list[str]:
    """The engine command's program not found; the simulator's model unknown on the simulated
    engine (which is the simulator: `tuner sim serve` would refuse it at every start)."""
    eng = spec.engine
    exe = executable(eng.command, eng.model)
    if shutil.which(exe) is None:
        return [f"engine command {exe!r} not found (engine.command in the study file)"]
    if is_simulated_engine(eng.command):
        return _collect([lambda: checks.check_simulator_model(eng.model)])
    return []


def model_notes(spec: StudySpec) -> list[str]:
    """On a real engine, a model the simulator does not know: the one line saying which
    estimates are unknown (`tuner.sim.profiles`); the study runs and the engine decides.
    A local path that is not there is `file_problems`' (a problem, not a note)."""
    if is_simulated_engine(spec.engine.command) or _missing_directory(spec):
        return []
    note = unknown_model_note(spec.engine.model)
    return [note] if note is not None else []


def _missing_directory(spec: StudySpec) -> bool:
    """On a real engine, `engine.model` is a local path (absolute, from `~` or from `.`;
    else a hub id, `org/name`) that is not there."""
    model = spec.engine.model
    return (
        not is_simulated_engine(spec.engine.command)
        and model.replace("\\", "/").startswith(("/", "~", "."))
        and not Path(model).expanduser().is_dir()
    )


def file_problems(spec: StudySpec) -> list[str]:
    """The model directory, the tokenizer, the dataset files and the chat template, each
    missing one on its own line (the model's directory once, when it is also the tokenizer)."""
    problems = checks.workload_file_problems(spec)
    model = spec.engine.model
    if _missing_directory(spec):
        tokenizer_too = spec.workload.tokenizer is None
        if tokenizer_too:
            problems = [p for p in problems if not p.startswith("engine.model: ")]
        also = " (also the workload's tokenizer: give workload.tokenizer)" if tokenizer_too else ""
        problems.insert(0, f"engine.model: model directory not found: {model}{also}")
    template = spec.engine.flags.get("chat-template")
    if isinstance(template, str) and _names_a_file(template):
        problems.append(f"engine.flags.chat-template: chat template file not found: {template}")
    return problems


def _names_a_file(value: str) -> bool:
    """A missing file: vLLM's --chat-template takes a file or the template itself (which
    holds `{`)."""
    return "{" not in value and "\n" not in value and not Path(value).expanduser().is_file()


def stored_real_trials(
    spec: StudySpec,
    storage: str | None,
    accept_changes: bool = False,
    problems: list[str] | None = None,
    judging: list[str] | None = None,
) -> tuple[StudyRecord, list[TrialPoint]] | None:
    """The study's real (not planned) stored trials, read only; None when there are none (no
    database yet, or no such study). With `problems`, a study file that changed what the
    stored study measures is added to them (`tuner run` would refuse it); with `judging`,
    what it changes in how they are judged (`tuner run` re-scores them)."""
    try:
        store = Store(storage or spec.storage, readonly=True)
    except UserError:
        return None
    try:
        name = study_name(spec, False)
        if name not in store.study_names():
            return None
        study = store.load_study(name)
        if problems is not None:
            problems += _collect([lambda: specs.check(study, spec, accept_changes=accept_changes)])
        if judging is not None:
            judging += specs.judging_change(study, spec)
        read = read_study(study)
        return read.record, read.every
    finally:
        store.close()
