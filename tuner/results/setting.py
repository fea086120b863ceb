"""The setting a choice was made under, in words: the hardware, the workload (each scenario of
a mix) and the SLO it was judged by (`tuner export`'s header, `tuner best`, the report)."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.measure.mixes import objective_of
from tuner.measure.mode_words import ModeWords, words_of
from tuner.spec.parts import Judging, Measuring
from tuner.spec.sections import HardwareSpec
from tuner.spec.slo import SloLimit
from tuner.spec.workload import WorkloadSpec


def setting_lines(spec: Measuring, limits: Sequence[SloLimit] = ()) -> list[str]:
    """The hardware, the workload and the SLO a choice was made under: `limits` (`--slo`'s),
    else the study's own."""
    slo = _slo_words(spec, tuple(limits))
    return [f"hardware: {_hardware(spec.hardware)}", *workload_lines(spec), f"SLO: {slo}"]


def judged_by(spec: Judging, limits: Sequence[SloLimit]) -> list[str]:
    """The limits a choice was picked under: `--slo`'s (`limits`), else the study's own."""
    return [str(limit) for limit in (limits or spec.slo_limits())]


def _slo_words(spec: Judging, limits: tuple[SloLimit, ...]) -> str:
    text = ", ".join(judged_by(spec, limits)) or "none"
    if limits:
        return f"{text} (given with --slo, in place of the study's)"
    return text if spec.objective.slo else f"{text} in the study file"


def _hardware(hw: HardwareSpec) -> str:
    return f"{hw.count}× {hw.gpu}" if hw.gpu else "not given in the study file"


def _workload(w: WorkloadSpec, words: ModeWords) -> str:
    if w.dataset_name == "random":
        data = f"random {w.random_input_len} in / {w.random_output_len} out"
        if w.random_range_ratio:
            data += f" (±{w.random_range_ratio:.0%})"
    elif w.dataset_name == "longdoc":
        lengths = "/".join(map(str, w.longdoc_lengths))
        data = f"longdoc {lengths} in / {w.longdoc_output_len} out"
    else:
        data = f"{w.dataset_name} {w.dataset_path}"
        if w.sharegpt_output_len:
            data += f" (output {w.sharegpt_output_len})"
    rate = words.rate(w.request_rate)
    conc = f", max concurrency {w.max_concurrency}" if w.max_concurrency else ""
    return f"{data}, {w.num_prompts} prompts, {rate}{conc}, {w.endpoint}"


def workload_lines(spec: Measuring) -> list[str]:
    """The workload in words: one line, or one line per scenario of a mix (every scenario)."""
    words = words_of(objective_of(spec))
    return words.workload_lines(spec.workload, lambda w: _workload(w, words))
