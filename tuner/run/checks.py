"""What `tuner run` refuses before it touches the database or starts an engine, beyond what
loading the study file checks: storage that keeps nothing, the environment, prompt lengths.

Readers of a study file (`tuner trials`, `best`, `report`) do not apply these.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

from tuner.errors import FailureKind, UserError
from tuner.run.recovery import HOST_ENV
from tuner.runners.plan import study_platform
from tuner.runners.precheck import predict_refusal
from tuner.sim.profile_file import load_gpu
from tuner.sim.profiles import load_model
from tuner.spec.coherence import check_engine_fits_slot
from tuner.spec.inputs import API_KEY_ENV
from tuner.spec.model_source import hub_cache_dir, tokenizer_source
from tuner.spec.parsing import near_file
from tuner.spec.space import (
    SHAPE_FLAGS,
    baseline_params,
    effective_flags,
    engine_env,
    max_model_len,
    rule_corners,
    spec_rules,
)
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.store.driver_errors import parsed_url
from tuner.store.schema import HOST_ID_CHARS
from tuner.store.storage import resolve_storage
from tuner.workload.lengths import check_longest_fits

# A Hugging Face tokenizer directory holds one of these (fast, SentencePiece, BPE vocab).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_run_storage(url: str) -> None:
    """`tuner run` refuses a storage that keeps nothing once the process exits."""
    parsed = parsed_url(url)
    if parsed is None:
        return  # Store reports a URL that is not one
    if not parsed.drivername.startswith("sqlite"):
        return
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file::memory:") or "mode=memory" in url:
        raise UserError(
            f"--storage {url}: an in-memory database keeps no result after the run; "
            "give a file, e.g. sqlite:///tuner.db"
        )


Check = Callable[[], None]  # raises UserError: one problem, one line


def run_checks(spec: StudySpec, storage: str | None) -> list[Check]:
    """Everything `tuner run` refuses before it touches the database or starts an engine, one
    problem each (the workload's files: `workload_file_problems`); `storage` is `--storage`
    (None: the study file's, else $TUNER_STORAGE, else the default). `tuner.run.preflight`
    reports them all."""
    return [
        lambda: check_run_storage(resolve_storage(storage or spec.storage)),
        lambda: check_api_key(spec.engine.api_key_env),
        check_host_id,
        lambda: check_engine_host(spec.engine.host),
        lambda: check_cores(spec.engine.cpu_affinity),
        lambda: check_slot(spec),
        lambda: check_baseline_starts(spec),
        *plan_checks(spec),
    ]


def check_api_key(name: str | None) -> None:
    if name is not None and not os.environ.get(name):
        raise UserError(
            f"engine.api_key_env: the environment variable {name} is not set (or is empty): "
            "the engine would run without the key"
        )
    if name is None and os.environ.get(API_KEY_ENV):
        raise UserError(
            f"{API_KEY_ENV} is set in the environment: the engine would require it and the "
            f"tuner would not send it; set engine.api_key_env: {API_KEY_ENV}, or unset it"
        )


def check_slot(spec: StudySpec) -> None:
    try:  # `--gpus-per-trial` is applied after the study file was loaded
        check_engine_fits_slot(spec)
    except ValueError as exc:
        raise UserError(f"{exc} (--gpus-per-trial)") from None


def check_baseline_starts(spec: StudySpec) -> None:
    """Trial 0 runs every parameter's default (vLLM's own) on a trial's GPUs: a deployment
    shape that cannot run there, or a config vLLM's rules refuse (the pipeline's rule check:
    `spec_rules`, then the simulator's rules where it knows the model and GPU), would refuse
    the baseline every other trial is scored against."""
    base = baseline_params(spec.search_space)
    if base is None:  # no baseline trial: each sampled config is checked on its own
        return
    flags = effective_flags(spec, base)
    why = spec_rules(spec, flags, study_platform(spec))
    if why is None:
        env = engine_env(spec, base)
        try:
            predicted = predict_refusal(spec.engine.model, spec.hardware, flags, env)
        except UserError:  # a profile file it cannot read: `check_accelerator`'s to say
            predicted = None
        rule = predicted is not None and predicted[0] == FailureKind.INVALID_ARGUMENT
        why = predicted[1] if predicted is not None and rule else None
    if why is not None:
        shape = ", ".join(f"{k} {v}" for k, v in flags.items() if k in SHAPE_FLAGS)
        raise UserError(
            f"search_space: the baseline (trial 0: every parameter's default"
            f"{'; ' + shape if shape else ''}) can never start: {why}"
        )


def space_refusals(spec: StudySpec) -> list[tuple[Params, str | None]]:
    """vLLM's refusal (None: none) of each config standing for the search space under its
    rules (`rule_corners`, on the study's platform), as the pipeline's rule check refuses
    them before launch; empty when the space is too large to walk."""
    platform = study_platform(spec)
    corners = rule_corners(spec, platform) or []
    return [(c, spec_rules(spec, effective_flags(spec, c), platform)) for c in corners]


def check_space_starts(spec: StudySpec) -> None:
    """Some config of the search space passes vLLM's rules: when none does, every trial would
    be refused before launch (issue 50 item 11: `check` said "no problem found")."""
    found = space_refusals(spec)
    if found and all(why for _, why in found):
        config, why = found[0]
        shown = ", ".join(f"{k} {v}" for k, v in config.items())
        raise UserError(
            f"search_space: vLLM refuses every config it can draw before launch, so the run "
            f"would measure nothing ({len(found)} configs standing for its ranges tried; "
            f"e.g. {shown}: {why})"
        )


def check_plan(spec: StudySpec) -> None:
    """What both `tuner run` and `tuner plan` refuse before they create the database."""
    for check in plan_checks(spec):
        check()
    check_workload_files(spec)


def plan_checks(spec: StudySpec) -> list[Check]:
    """`check_plan`'s checks but the workload's files, one problem each."""
    return [
        lambda: check_lengths_fit(spec),
        lambda: check_accelerator(spec),
        lambda: check_space_starts(spec),
    ]


def check_accelerator(spec: StudySpec) -> None:
    if spec.hardware.accelerator is not None:
        load_gpu(spec.hardware.accelerator)  # an unknown GPU or a bad profile file: one line


def check_simulator_model(model: str) -> None:
    """The simulator reads `engine.model` (a built-in name, a directory with config.json or a
    cached hub id): where it is the engine (`tuner sim serve`, `tuner plan`), one it cannot
    read is refused before any study or trial is stored."""
    try:
        load_model(model)
    except UserError as exc:
        raise UserError(f"engine.model: {exc}") from None


def check_host_id() -> None:
    """`$TUNER_HOST_ID` fits the database's column and holds printable characters (it is
    stored with every worker; PostgreSQL refuses a longer one mid-run)."""
    value = os.environ.get(HOST_ENV)
    if not value:
        return
    if len(value) > HOST_ID_CHARS:
        raise UserError(f"{HOST_ENV} is {len(value)} characters long: at most {HOST_ID_CHARS}")
    if not value.isprintable():
        raise UserError(f"{HOST_ENV}={value!r}: only printable characters")


def check_cores(cores: list[int] | None) -> None:
    """`engine.cpu_affinity` names cores this process may run on (the engine inherits the
    set; a core outside it fails every start)."""
    if not cores:
        return
    allowed = os.sched_getaffinity(0)
    missing = sorted(set(cores) - allowed)
    if missing:
        raise UserError(
            f"engine.cpu_affinity: core(s) {missing} are not cores of this machine this "
            f"process may use ({_ranges(sorted(allowed))})"
        )


def _ranges(cores: list[int]) -> str:
    """0,1,2,5 as "0-2,5"."""
    parts: list[str] = []
    for c in cores:
        if parts and c == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts)


def check_engine_host(host: str) -> None:
    """`engine.host` is where the engine, started on this machine, listens: it must resolve
    to an address of this machine (a bind to it succeeds), else every trial fails."""
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UserError(
            f"engine.host: {host!r} does not resolve ({reason}): give an address of this "
            "machine, e.g. 127.0.0.1"
        ) from None
    address = infos[0][4][0]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as exc:
            raise UserError(
                f"engine.host: {host!r} ({address}) is not an address of this machine "
                f"({exc.strerror}): the engine starts here and listens on it"
            ) from None


def check_workload_files(spec: StudySpec) -> None:
    """The tokenizer and the dataset files the workload is built from exist (the runner
    builds it only after the database and the log folder are made): the first missing."""
    problems = workload_file_problems(spec)
    if problems:
        raise UserError(problems[0])


def workload_file_problems(spec: StudySpec) -> list[str]:
    """Each missing tokenizer or dataset file, one line each."""
    problems = []
    tokenizer = spec.workload.tokenizer or spec.engine.model
    where = "workload.tokenizer" if spec.workload.tokenizer else "engine.model"
    directory = Path(tokenizer_source(spec.workload.tokenizer, tokenizer)).expanduser()
    if not directory.is_dir():
        hub = "" if spec.workload.tokenizer else f", nor a hub id cached in {hub_cache_dir()}"
        problems.append(
            f"{where}: tokenizer directory not found: {tokenizer}{hub} (the workload is "
            "built with it; give workload.tokenizer)"
        )
    elif not any((directory / name).is_file() for name in TOKENIZER_FILES):
        problems.append(
            f"{where}: {tokenizer} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})"
        )
    named = {"": spec.workload, **spec.workloads}
    for name, w in named.items():
        path = w.dataset_path if w.dataset_name in ("sharegpt", "jsonl") else None
        if path is not None and not Path(path).expanduser().is_file():
            where = f"workload.{name}" if name else "workload"
            near = near_file(Path(path).expanduser())
            problems.append(f"{where}.dataset_path: dataset file not found: {path}{near}")
    return problems


def check_lengths_fit(spec: StudySpec) -> None:
    """Random or long-document prompts longer than the model's known length (less the output
    they ask for): every such request would fail. `tuner run` and `tuner plan` apply it."""
    w = spec.workload
    longest = [x.longest_request for x in [w, *spec.workloads.values()]]
    tuned = any(
        p.env is None and (p.flag or f"--{name}") == "--max-model-len"
        for name, p in spec.search_space.parameters.items()
    )
    if all(x is None for x in longest) or tuned:
        return
    try:
        limit = max_model_len(spec)
    except (OSError, ValueError, TypeError):
        return  # an unreadable config.json is the engine's to report
    if limit is not None:
        check_longest_fits(w, limit, "workload: ")
        for name, scenario in spec.workloads.items():
            check_longest_fits(scenario, limit, f"workload.{name}: ")
