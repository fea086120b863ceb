"""The preflight: every problem of a study found in one pass, before the night
(`tuner check`, and `tuner run` before trial 0; docs/preflight.md).

Each problem is one line: the engine command not found or not runnable; the model directory,
tokenizer, dataset files or chat template missing; flag names the engine does not accept
(`tuner.run.flagcheck`); and every refusal of `tuner.run.checks`. Nothing is written. The
night's cost (`tuner.run.cost`) and two kinds of notes come with it as information, never as
a problem:

- `defaults_notes`: the study's search space against vLLM's rules and defaults on the study's
  GPU (`tuner check`, `tuner run`; docs/preflight.md, "vLLM's defaults and rules"). The
  baseline (trial 0) runs the space's `default:`s, read as "vLLM's defaults"; they are only
  that when they are vLLM's own on this GPU (an H100 study written against the A6000's 256 /
  2048 is not measuring them). A block size the GPU's platform refuses is skipped before
  launch, every time the sampler proposes it: worth knowing before the night.
- `plan_notes`: how far to trust `tuner plan`: whether its profile was ever fitted to this
  box, and how far its predictions are off the study's measured trials (docs/preflight.md).
  `tuner plan`, `tuner run --from-plan` and `tuner check` print these lines.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner.engine.vllm_flags import executable, is_simulated_engine
from tuner.errors import UserError
from tuner.fidelity.bands import Bands
from tuner.fidelity.calibration import Trust
from tuner.fidelity.warm_start import check_sources
from tuner.measure.mixes import objective_of
from tuner.run import checks
from tuner.run.cost import NightCost, length_only_runner, night_cost
from tuner.run.flagcheck import check_flags, unmodelled
from tuner.run.reading import budget_used
from tuner.run.sampling import check_sampler
from tuner.runners.plan import study_profile
from tuner.sim.profiles import unknown_model_note
from tuner.sim.vllm_defaults import serve_defaults
from tuner.spec.space import baseline_params, effective_flags, int_values
from tuner.spec.study import StudySpec
from tuner.spec.vllm_rules import VLLM_VERSION, block_size_error
from tuner.store.storage import Store, resolve_storage
from tuner.trial import StudyRecord, TrialPoint, specs
from tuner.trial.reading import read_study
from tuner.trial.specs import study_name

CALIBRATED_MARK = "calibrated on"  # in the description `tuner calibrate` writes
_WORDS = {"p99_ttft_ms": "P99 TTFT", "mean_tpot_ms": "mean TPOT", "output_throughput": "throughput"}


def calibration_note(spec: StudySpec) -> str | None:
    """A line when the plan's profile is a built-in one never fitted to this box, else None."""
    try:
        gpu = study_profile(spec)
    except UserError:
        return None
    if spec.hardware.profile is not None and CALIBRATED_MARK in gpu.description:
        return None
    return (
        f"the plan's predictions come from the built-in {gpu.name} profile, never fitted to "
        "this box (uncalibrated): SIMULATED figures that may be off by a factor; once real "
        "trials exist, `tuner calibrate` fits one (docs/simulator.md); on published GPU runs, "
        f"80 % of true / SIMULATED figures fall within {Bands.of_study(spec).words()}"
    )


def accuracy_note(spec: StudySpec, record: StudyRecord, points: list[TrialPoint]) -> str | None:
    """How far the plan's predictions are off the study's measured trials
    (`Trust.profile_errors`), or None when there are none to compare. Capacity mode and
    scenario mixes measure at several rates or workloads: not compared
    (`Objective.one_run_figures`)."""
    trust = Trust(spec, points, record)
    seen = trust.observations() if objective_of(spec).one_run_figures else []
    try:
        errors = trust.profile_errors(lambda: length_only_runner(spec).requests) if seen else {}
    except UserError:
        return None
    parts = [f"{_WORDS[m]} {100 * e:.0f} %" for m, e in errors.items()]
    if not parts:
        return None
    return (
        f"the plan's predictions against the {len(seen)} measured trial(s) of study "
        f"{spec.name!r} are off by (median): {', '.join(parts)}"
    )


def plan_notes(spec: StudySpec, real: tuple[StudyRecord, list[TrialPoint]] | None) -> list[str]:
    """The lines to print before a plan is used: uncalibrated, and how far off. `real`: the
    study's stored real trials, None when it has none."""
    notes = [n for n in [calibration_note(spec)] if n]
    if real is not None:
        note = accuracy_note(spec, *real)
        if note:
            notes.append(note)
    return notes


def defaults_notes(spec: StudySpec) -> list[str]:
    """One note for searched defaults that are not vLLM's on the study's GPU, one for block
    sizes its platform refuses; none when the study names no GPU."""
    try:
        gpu = study_profile(spec)
    except UserError:
        return []
    params = spec.search_space.parameters
    base = baseline_params(spec.search_space) or {
        name: p.default for name, p in params.items() if p.default is not None
    }
    world = effective_flags(spec, base).get("tensor-parallel-size") or 1
    expected = serve_defaults(gpu, int(world))
    differ = [
        f"{name} {base[name]} (vLLM: {value})"
        for name, value in expected.items()
        if name in base and params[name].env is None and base[name] != value
    ]
    notes = []
    on = f"vLLM {VLLM_VERSION}'s defaults on {gpu.name}"
    if differ:
        notes.append(
            f"the baseline (trial 0) is not {on}: {', '.join(differ)}; set the search space's "
            "default: to them to measure against vLLM's defaults (tuner init does)"
        )
    block = params.get("block-size")
    sizes = [*(int_values(block) or block.choices or []), block.default] if block else []
    ints = {s for s in sizes if isinstance(s, int) and not isinstance(s, bool)}
    refused = sorted(s for s in ints if block_size_error(s, gpu.platform))
    if refused:
        example = block_size_error(refused[0], gpu.platform)
        shown = ", ".join(map(str, refused[:8]))
        shown += f", … ({len(refused)} of its {len(ints)} sizes)" if len(refused) > 8 else ""
        notes.append(
            f"block-size {shown} of the search space: vLLM "
            f"{VLLM_VERSION} refuses it on {gpu.platform} ({example}); such trials are "
            "skipped before launch"
        )
    return notes + rule_notes(spec, gpu.platform)


def rule_notes(spec: StudySpec, platform: str | None) -> list[str]:
    """A note when vLLM's rules refuse some configs of the search space but not all (all: a
    problem, `checks.check_space_starts`), for a reason other than the block size (noted on
    its own above): the pipeline skips them before launch (`spec_rules` on the configs that
    stand for the space, `checks.space_refusals`)."""
    found = checks.space_refusals(spec)
    refused = [
        (config, why)
        for config, why in found
        if why is not None
        and why != block_size_error(_int(effective_flags(spec, config).get("block-size")), platform)
    ]
    if not refused or all(why for _, why in found):
        return []
    config, why = refused[0]
    shown = ", ".join(f"{k} {v}" for k, v in config.items())
    return [
        f"search_space: vLLM refuses some configs it can draw ({len(refused)} of the "
        f"{len(found)} that stand for its ranges; e.g. {shown}: {why}); such trials are "
        "skipped before launch"
    ]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
