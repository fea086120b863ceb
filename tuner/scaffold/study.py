"""The study `tuner init` writes (model, GPUs, traffic, SLO, a night's budget), put through
`tuner plan`'s checks of a study file before anything is written.

Each choice, its default and the option that overrides it: docs/study-file.md, "tuner init".
Where each comes from: the engine from `tuner.scaffold.sources` (`vllm serve` on a box with
GPUs, else `tuner sim serve`); the rate from `tuner.scaffold.rate`, so the baseline is a
feasible point every tuned config has to beat; the budget from one trial's preflight estimate
(`tuner.run.cost`), at most `NIGHT_TRIALS` trials.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tuner.errors import UserError
from tuner.measure.capacity import SEND_PHASE_FACTOR, queue_limit_s, shown_rps, step_prompts
from tuner.run.checks import check_plan
from tuner.run.cost import duration, night_cost
from tuner.scaffold import box
from tuner.scaffold.baseline import space_for_gpu
from tuner.scaffold.draft import MIN_TRIALS, StudyDraft, hours_text, study_data
from tuner.scaffold.model_len import traffic_model_len
from tuner.scaffold.options import InitOptions, check_options
from tuner.scaffold.rate import choose_rate, missed_at, sustained_rate, sustained_words
from tuner.scaffold.reach import out_of_reach
from tuner.scaffold.sources import (
    Hardware,
    search_space_file,
    study_hardware,
    study_model,
    workload_tokenizer,
)
from tuner.scaffold.traffic import Traffic, traffic, traffic_words, with_template
from tuner.sim.profiles import ModelProfile, get_gpu
from tuner.spec.figures import figure
from tuner.spec.model_source import hub_cache_dir, model_dir
from tuner.spec.parsing import describe_validation_error, read_yaml_mapping
from tuner.spec.study import StudySpec
from tuner.spec.vllm_rules import VLLM_VERSION

# at most, in a budget that fits --hours: past it, more trials teach TPE little
NIGHT_TRIALS = 100
# capacity mode's prompts at most, however high the box's rate: each trial runs the workload
# up to `capacity.max_runs` times (docs/study-file.md, "Capacity mode's prompts")
CAPACITY_PROMPTS_MAX = 1000
# capacity mode's ceiling over the rate the box is expected to serve: a tuned config may serve
# more than vLLM's defaults, and the search brackets a capacity only with a failing rate above
# it (docs/study-file.md, "Capacity mode's prompts": at 1× the defaults' rate, capped)
CAPACITY_HEADROOM = 2.0
# capacity mode's step budget per config on long documents, where one step sends for minutes:
# a bracket's two ends and two bisections (docs/objective.md, "The race")
LONGDOC_STEPS = 4


@dataclass
class Draft:
    """A checked study: its data (search space by path), spec, and what was chosen and why."""

    data: StudyDraft
    spec: StudySpec
    notes: list[str]
    reachable: bool = True  # False: written with --force though out of reach at any rate


def draft_study(
    opts: InitOptions, output: Path, detect: Callable[[], box.Gpus | None] = box.detect
) -> Draft:
    """The study file's data, checked; `output` is where it will be written (the search
    space's path is relative to it). Every mistake is one UserError; nothing is written. A
    night no config can meet the SLO of at any rate (`tuner.scaffold.reach`) is one too, unless
    `opts.force`."""
    shaped = _shaped(opts, output, detect)
    data, space, spec, notes = shaped.data, shaped.space, shaped.spec, shaped.notes
    far = out_of_reach(spec, opts, lambda o: _shaped(o, output, detect).spec)
    if far is not None and not opts.force:
        raise UserError(f"{far.words()}; --force writes the study anyway")
    if far is not None:
        notes.append(f"out of reach: {far.words()} (written with --force)")
    if opts.mode == "capacity":
        sized = _capacity_prompts(spec, opts, shaped.hw, notes)
        data["workload"]["num_prompts"] = _step_prompts(spec, opts, sized, notes)
        spec = _validated(data, space)
    data["workload"]["request_rate"] = _rate(spec, opts, shaped.hw, notes)
    spec = _validated(data, space)
    data["budget"]["n_trials"] = _trials(spec, opts, notes)
    spec = _validated(data, space)
    limits = ", ".join(spec.objective.slo)
    given = "as given" if opts.slo else f"the default for {shaped.kind} traffic; --slo to change"
    notes.append(f"SLO: {limits} ({given})")
    notes.append(_mode_note(opts, shaped.kind))
    return Draft(data, spec, notes, reachable=far is None)


@dataclass
class _Shaped:
    """The study's shape before its rate and budget: the model, the GPUs, the traffic, the
    search space and the SLO, checked as `tuner plan` checks them."""

    data: StudyDraft
    space: dict[str, object]
    spec: StudySpec
    hw: Hardware
    kind: str  # the traffic's kind, in the notes' words
    notes: list[str]


def _shaped(opts: InitOptions, output: Path, detect: Callable[[], box.Gpus | None]) -> _Shaped:
    """The study `opts` give before its rate and budget; every mistake one UserError."""
    check_options(opts)
    profile = study_model(opts)
    hw = study_hardware(opts, detect)
    check_heads_split(profile, hw)
    if hw.engine == "vllm" and opts.model_config:
        raise UserError(
            f"--model-config {opts.model_config}: `vllm serve` loads the weights, not a "
            f"config.json: give --model DIR or a hub id cached in {hub_cache_dir()} (its "
            "config.json is read), or --engine sim to tune on the simulator from the config"
        )
    if hw.engine == "vllm" and model_dir(opts.model or "") is None:
        raise UserError(
            f"--model {opts.model}: vLLM loads a model directory or a hub id cached in "
            f"{hub_cache_dir()}; give --model DIR (its config.json is what the simulator "
            "reads), or --engine sim (--model-config FILE for the shape of a hub id)"
        )
    if (opts.max_model_len or 0) > profile.max_position_embeddings:
        raise UserError(
            f"--max-model-len {opts.max_model_len}: the model takes at most "
            f"{profile.max_position_embeddings} tokens (max_position_embeddings); vLLM refuses "
            "a longer one"
        )
    max_len = min(profile.max_position_embeddings, opts.max_model_len or math.inf)
    lengths = (opts.input_len, opts.output_len)
    mix = traffic(opts.traffic, int(max_len), opts.num_prompts, lengths)
    found = workload_tokenizer(opts, hw.engine)
    mix = with_template(mix, Path(found) if found else model_dir(opts.model or ""))
    space_path = search_space_file(opts, hw.gpu)
    data = study_data(opts, profile, hw, mix, space_path, output, found, _objective(opts, mix))
    space, space_note = _space(space_path, hw, data)
    spec = _validated(data, space)
    model_len, len_note = traffic_model_len(spec, profile.max_position_embeddings)
    if model_len is not None:
        data["engine"]["flags"]["max-model-len"] = model_len
        spec = _validated(data, space)
    if opts.max_model_len is not None:
        len_note = (
            f"max-model-len {opts.max_model_len}: as given (the model takes "
            f"{profile.max_position_embeddings})"
        )
    check_plan(spec)  # what `tuner plan` refuses: lengths, the GPU, the tokenizer, the dataset
    notes = [_hardware_note(profile, hw), *mix.notes, space_note, len_note]
    return _Shaped(data, space, spec, hw, mix.kind, notes)


def _space(path: Path, hw: Hardware, data: StudyDraft) -> tuple[dict[str, object], str]:
    """The search space with vLLM's defaults on the study's GPU as the baseline
    (`tuner.scaffold.baseline`): written into the study when they differ from the file's."""
    gpu = get_gpu(hw.gpu)
    found = space_for_gpu(read_yaml_mapping(path, "search-space file"), gpu, hw.count)
    words = f"vLLM {VLLM_VERSION}'s defaults on {hw.count}× {hw.gpu}"
    if not found.changes:
        return found.space, f"baseline (trial 0): {words}, as {path.name} declares them"
    data["search_space"] = found.space
    changed = "; ".join(found.changes)
    return found.space, f"baseline (trial 0): {words}, written here with {path.name}: {changed}"


def _validated(data: StudyDraft, space: dict[str, object]) -> StudySpec:
    try:
        return StudySpec.model_validate({**data, "search_space": space})
    except ValidationError as exc:
        raise UserError(f"the study would be refused: {describe_validation_error(exc)}") from None


def _objective(opts: InitOptions, mix: Traffic) -> dict[str, object]:
    """Scalar mode: the latency and throughput score under the SLO; capacity mode (docs/
    objective.md): the highest rate each config serves within the SLO, from the study's rate."""
    slos = list(opts.slo or mix.slo)
    if opts.mode == "capacity" and mix.kind == "longdoc":  # steps of minutes: a step budget
        return {"mode": "capacity", "slo": slos, "capacity": {"max_steps": LONGDOC_STEPS}}
    if opts.mode == "capacity":
        return {"mode": "capacity", "slo": slos}
    weights = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    return {"weights": weights, "slo": slos}


def _mode_note(opts: InitOptions, kind: str) -> str:
    """`kind`: the traffic's kind in the SLO's note's words (`jsonl` for a file)."""
    why = "as given" if opts.objective else f"the default for {kind} traffic"
    if opts.mode == "capacity":
        return (
            "objective: capacity, the highest request rate each config serves within the SLO, "
            f"searched from the rate above on one engine start ({why}; --objective scalar "
            "for the latency score at that rate)"
        )
    return (
        f"objective: scalar, p99 TTFT, mean TPOT and output throughput at that rate ({why}; "
        "--objective capacity for the most traffic within the SLO)"
    )


def check_heads_split(profile: ModelProfile, hw: Hardware) -> None:
    """`tuner init` runs the model tensor parallel over every GPU, and vLLM splits its
    attention heads evenly over them: a count that does not divide them is refused with the
    counts that do (more GPUs cannot help: 4096 for 40 heads was told "give more GPUs")."""
    heads = profile.num_heads
    if heads % hw.count:
        fits = [n for n in range(1, heads + 1) if heads % n == 0]
        raise UserError(
            f"{hw.count}× {hw.gpu} ({hw.found}): `tuner init` runs {profile.name} tensor "
            f"parallel over every GPU, and vLLM splits its {heads} attention heads evenly over "
            f"them: give --count {', '.join(map(str, fits))} (a count that divides {heads})"
        )


def _hardware_note(profile: ModelProfile, hw: Hardware) -> str:
    engine = "`tuner sim serve`, SIMULATED" if hw.engine == "sim" else "`vllm serve`"
    return f"{profile.name} on {hw.count}× {hw.gpu} ({hw.found}); engine: {engine}"


def _rate(spec: StudySpec, opts: InitOptions, hw: Hardware, notes: list[str]) -> float:
    """The request rate: `--rate`, else the highest round rate at which vLLM's defaults meet
    the SLO with a margin on the simulator (`tuner.scaffold.rate`)."""
    if opts.rate is not None:
        rate, why = opts.rate, "as given"
        missed = missed_at(_scalar(spec), rate) if opts.mode != "capacity" else None
        if missed is not None:  # the fourth round: a rate given was written without a word
            why += (
                f"; vLLM's defaults miss {missed} there on the simulator (SIMULATED): the "
                "baseline is infeasible, and the night may find no config that meets the SLO; "
                "a lower --rate, or none (init then picks the highest rate the defaults meet)"
            )
    elif opts.concurrency is not None:  # a closed loop: the next request when one ends
        loop = f"a closed loop of {opts.concurrency} requests at once (--concurrency)"
        notes.append(f"traffic: {traffic_words(spec.workload)}, {loop}; --rate to cap the rate")
        return math.inf
    else:
        scalar = _scalar(spec)
        choice = choose_rate(scalar, _sustained(scalar, hw))
        rate, why = choice.rate, choice.why()
        ceiling = shown_rps(spec.workload.num_prompts, spec.slo_limits())
        if opts.mode == "capacity" and rate > ceiling:  # the search's first step, not above it
            why = (
                f"the rate search's ceiling with {spec.workload.num_prompts} prompts; "
                f"vLLM's defaults would start at {rate:g} req/s: {why}"
            )
            rate = _round_down(ceiling)
        spec = scalar
    loop = f", at most {opts.concurrency} at once" if opts.concurrency is not None else ""
    notes.append(f"traffic: {traffic_words(spec.workload)} at {rate:g} req/s{loop} ({why})")
    return rate


def _round_down(rate: float) -> float:
    """`rate` to three significant digits, never above it (8.333… → 8.33)."""
    unit = 10.0 ** (math.floor(math.log10(rate)) - 2)
    return round(math.floor(rate / unit) * unit, 12)


def _scalar(spec: StudySpec) -> StudySpec:
    """`spec` in scalar mode: the rate is the baseline's at one fixed rate (capacity mode's
    first step)."""
    scalar = spec.objective.model_copy(update={"mode": "scalar"})
    return spec.model_copy(update={"objective": scalar})


def _sustained(spec: StudySpec, hw: Hardware) -> float:
    """What vLLM's defaults sustain with every request sent at once (req/s, SIMULATED:
    `tuner.scaffold.rate.sustained_rate`); a model the GPUs cannot run is a UserError."""
    try:
        return sustained_rate(spec)
    except UserError as exc:
        raise UserError(
            f"{spec.engine.model} on {hw.count}× {hw.gpu}: {exc}: give more GPUs "
            "(--count) or a larger --gpu"
        ) from None


def _capacity_prompts(spec: StudySpec, opts: InitOptions, hw: Hardware, notes: list[str]) -> int:
    """Capacity mode's workload size: enough prompts that the rate search's ceiling
    (`tuner.measure.capacity.shown_rps`: num_prompts / (4 × the tightest TTFT/E2EL limit)) is
    `CAPACITY_HEADROOM` × the rate the box is expected to serve: what vLLM's defaults sustain
    with every request sent at once (SIMULATED); never fewer than the traffic's own, at most
    `CAPACITY_PROMPTS_MAX`. `--num-prompts` or `--rate` given: the prompts as they are
    (docs/study-file.md, "Capacity mode's prompts")."""
    n = spec.workload.num_prompts
    limit_s = queue_limit_s(spec.slo_limits())
    if opts.num_prompts is not None or opts.rate is not None or not limit_s:
        return n  # as given (the rate given: no estimate made); no such limit: no ceiling
    expected = _sustained(_scalar(spec), hw)
    needed = math.ceil(SEND_PHASE_FACTOR * limit_s * CAPACITY_HEADROOM * expected)
    if needed <= n:
        return n
    sustained = sustained_words(_scalar(spec), expected)  # with its band: SIMULATED
    if spec.workload.dataset_name == "jsonl":  # the traffic's own requests, each once
        notes.append(
            f"workload: the file's {n} requests, each sent once: capacity mode's rate search "
            f"can reach {figure(shown_rps(n, spec.slo_limits()))} req/s (prompts / (4 × the "
            f"{figure(limit_s)} s limit)), below the {sustained} vLLM's defaults sustain: a "
            f"file of {needed} requests reaches {CAPACITY_HEADROOM:g}× that; repeating its lines "
            "would send each request many times, a prefix-cache load that is not the traffic"
        )
        return n
    sized = min(needed, CAPACITY_PROMPTS_MAX)
    ceiling = shown_rps(sized, spec.slo_limits())
    reach = f"{figure(ceiling)} req/s (prompts / (4 × the {figure(limit_s)} s limit)"
    if needed > sized:  # capped: say what the ceiling falls short of, not that it holds
        notes.append(
            f"workload: {sized} prompts (at most {CAPACITY_PROMPTS_MAX}), not {n}: capacity "
            f"mode's rate search can reach only {reach}), short of {CAPACITY_HEADROOM:g}× the "
            f"{sustained} vLLM's defaults sustain with every request sent at once: configs "
            f"serving more read 'capacity ≥ {figure(ceiling)}' and tie; "
            "--num-prompts for more"
        )
        return sized
    notes.append(
        f"workload: {sized} prompts, not {n}, so capacity mode's rate search can reach "
        f"{reach}): {CAPACITY_HEADROOM:g}× the {sustained} vLLM's defaults sustain with "
        "every request sent at once; --num-prompts to change"
    )
    return sized


def _step_prompts(spec: StudySpec, opts: InitOptions, sized: int, notes: list[str]) -> int:
    """Capacity mode's prompts per rate step, at least what its percentile SLOs need to be
    read inside the sample (`capacity.step_prompts`: 100 for a P99); `--num-prompts` given,
    or a request file (each of its requests sent once): as they are."""
    least = step_prompts(spec.slo_limits())
    if opts.num_prompts is not None or least <= sized:
        return sized
    if spec.workload.dataset_name == "jsonl":  # the traffic's own requests, each once
        notes.append(
            f"workload: the file's {sized} requests a rate step: its percentile SLOs lean on "
            f'the slowest request below {least} (docs/objective.md, "The step\'s size")'
        )
        return sized
    notes.append(
        f"workload: {least} prompts per rate step, not {sized}: a P{100 - 100 / least:g} of "
        f'fewer leans on the slowest request alone (docs/objective.md, "The step\'s size"); '
        "--num-prompts to change"
    )
    return least


def _trials(spec: StudySpec, opts: InitOptions, notes: list[str]) -> int:
    """`--trials`, else as many trials as `--hours` holds at the preflight's estimate."""
    hours = hours_text(opts.hours)
    cost = night_cost(spec, n_trials=1)
    if opts.trials is not None:
        n, why = opts.trials, "as given"
    elif cost.trial_s is None:
        raise UserError(f"cannot estimate one trial's time ({cost.source}): give --trials N")
    else:
        # as `tuner plan` of the study counts them: a real engine's start-up each, which the
        # GPU night it stands in for pays (docs/preflight.md)
        fit = cost.trials_in(opts.hours * 3600, as_planned=True) or 0
        if fit < MIN_TRIALS:
            raise UserError(
                f"one trial takes about {duration(cost.trial_s)} ({cost.source}): --hours "
                f"{opts.hours:g} holds {fit}; give more --hours or fewer --num-prompts"
            )
        n = min(fit, NIGHT_TRIALS)
        cap = f", at most {NIGHT_TRIALS}" if fit > NIGHT_TRIALS else ""
        planned = cost.planned_startup_s or 0.0
        if planned > (cost.startup_s or 0.0):
            cap += (
                f" with a real engine's ~{duration(planned)} start-up each, as `tuner plan` counts"
            )
        why = f"what {hours} holds{cap}"
    if cost.trial_s is not None and cost.first_s is not None:
        why += (
            f"; the first trial ≈ {duration(cost.first_s)}, each later one ≈ "
            f"{duration(cost.trial_s)} ({cost.band_words()}{cost.basis})"
        )
    elif cost.trial_s is not None:
        why += f"; one trial ≈ {duration(cost.trial_s)} ({cost.band_words()}{cost.basis})"
    notes.append(f"budget: {n} trials, timeout {hours} ({why})")
    return n
