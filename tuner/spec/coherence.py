"""Checks across the study file's sections: combinations that each section accepts alone
but that together measure something other than what the output would claim (pure; each
raises ValueError `section.field: why`, which `StudySpec` turns into one line)."""

from __future__ import annotations

from typing import Protocol

from tuner.spec.flag_values import long_flag
from tuner.spec.parts import Judging, Serving, Traffic
from tuner.spec.sections import SearchSpec
from tuner.spec.slo import parse_slo


class StudySections(Serving, Judging, Traffic, Protocol):
    """The sections of a study (`tuner.spec.study.StudySpec`, which runs these checks in its
    validator: it imports this module, not the other way round): its parts
    (`tuner.spec.parts`) and the capacity search."""

    @property
    def search(self) -> SearchSpec: ...


WORLD_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size")  # GPUs of one engine
DP_FLAG = "data-parallel-size"  # engines (replicas) of one trial: TP x PP GPUs each


def check_study(spec: StudySections) -> None:
    """Every cross-section rule, in the order a reader meets the sections."""
    check_flags_tuned_once(spec)
    check_derived_shape(spec)
    check_export_drops(spec)
    check_capacity(spec)
    check_one_tokenizer(spec)
    check_engine_fits_slot(spec)


def check_flags_tuned_once(spec: StudySections) -> None:
    """Two parameters on one flag (or one env var): only the last would reach the engine."""
    seen: dict[str, str] = {}
    for name, p in spec.search_space.parameters.items():
        target = f"env {p.env}" if p.env is not None else f"flag --{long_flag(name, p)}"
        if target in seen:
            raise ValueError(
                f"search_space: parameters {seen[target]!r} and {name!r} both set {target}: "
                "one of them would have no effect"
            )
        seen[target] = name


def check_derived_shape(spec: StudySections) -> None:
    """`fill_data_parallel` derives data-parallel-size: a parameter on it, or a fixed value in
    `engine.flags`, would be overridden without a word."""
    space = spec.search_space
    if not space.fill_data_parallel:
        return
    if any(long_flag(n, p) == DP_FLAG for n, p in space.parameters.items()):
        raise ValueError(
            "search_space.fill_data_parallel derives data-parallel-size: it cannot also be a "
            "parameter"
        )
    fixed = spec.engine.flags.get(DP_FLAG)
    if fixed is not None:
        raise ValueError(
            f"engine.flags.{DP_FLAG}: {fixed} contradicts search_space.fill_data_parallel, "
            "which derives it from the trial's GPUs: remove one of them"
        )


def check_export_drops(spec: StudySections) -> None:
    """`export_drop_flags` leaves fixed flags out of `best`/`export`; a tuned one would
    make the exported command differ from the measured config."""
    tuned = {long_flag(n, p): n for n, p in spec.search_space.parameters.items() if p.env is None}
    for flag in spec.engine.export_drop_flags:
        if flag.lstrip("-") in tuned:
            raise ValueError(
                f"engine.export_drop_flags: {flag!r} is tuned (parameter "
                f"{tuned[flag.lstrip('-')]!r}): the exported command would leave out the "
                "value that was measured"
            )


def check_capacity(spec: StudySections) -> None:
    """Capacity mode offers rising request rates; what it reports must be a served rate."""
    if spec.objective.mode != "capacity":
        return
    for name, w in [("", spec.workload), *spec.workloads.items()]:
        if w.max_concurrency is not None:
            where = f"workload.{name}" if name else "workload"
            raise ValueError(
                f"{where}.max_concurrency: capacity mode searches the highest offered rate, "
                "and a client capped at a concurrency does not send that rate: leave "
                "max_concurrency out of a capacity study (docs/study-file.md)"
            )
    if spec.search.fidelity == "multi":
        raise ValueError(
            "search.fidelity: multi screens configs by the latency score, not by capacity: "
            "use search.fidelity: single with objective.mode: capacity"
        )
    texts = [*spec.objective.slo, *(t for s in spec.scenarios for t in s.slo)]
    limits = [limit for text in texts for limit in parse_slo(text)]
    if limits and not any(limit.upper for limit in limits):
        raise ValueError(
            f"objective.slo: capacity mode searches the highest rate that keeps the SLO, and "
            f"{', '.join(map(str, limits))} only sets floors, which a higher rate meets as "
            "easily: every config would climb to capacity.max_rps; add an upper limit on a "
            "latency (p99_ttft_ms<=2000)"
        )


def check_one_tokenizer(spec: StudySections) -> None:
    """Scenarios share one engine and one tokenizer (the first scenario's): another
    scenario's own `tokenizer:` would be silently ignored."""
    first = spec.workload.tokenizer
    for s in spec.scenarios[1:]:
        if s.tokenizer is not None and s.tokenizer != first:
            raise ValueError(
                f"workload.{s.name}.tokenizer: every scenario is counted with one tokenizer, "
                f"the first scenario's ({first or 'the model directory'}): give it there, "
                "or the same in each scenario"
            )


def world_sizes(spec: StudySections, flag: str) -> list[int]:
    """Every value a world-size flag can take in this study (fixed or tuned)."""
    for name, p in spec.search_space.parameters.items():
        if long_flag(name, p) == flag:
            if p.type == "categorical":
                return [int(c) for c in p.choices or [] if isinstance(c, int | float)]
            if p.type == "int" and p.low is not None and p.high is not None:
                return [int(p.low), int(p.high)]
    value = spec.engine.flags.get(flag)
    return [int(value)] if isinstance(value, int | float) and not isinstance(value, bool) else [1]


def check_engine_fits_slot(spec: StudySections) -> None:
    """An engine of TP x PP GPUs (times its smallest data-parallel-size) on a slot of fewer
    GPUs fails at every start. A searched data-parallel-size that overflows the slot with
    some TP is refused per trial instead (`tuner.spec.space.shape_error`)."""
    per_trial = spec.hardware.gpus_per_trial
    if per_trial is None:
        return
    tp, pp = (max(world_sizes(spec, flag), default=1) for flag in WORLD_FLAGS)
    dp = 1 if spec.search_space.fill_data_parallel else min(world_sizes(spec, DP_FLAG))
    if tp * pp * dp > per_trial:
        raise ValueError(
            f"hardware.gpus_per_trial: a slot has {per_trial} GPU(s) but an engine may need "
            f"{tp * pp * dp} (tensor-parallel-size {tp} x pipeline-parallel-size {pp} x "
            f"data-parallel-size {dp}): every such trial would fail to start"
        )
