"""What changed since the study measured the shipped config (pure): the engine's flags against
the exported command, its vLLM version and GPU against the study's, and, when the figures
drifted or the engine changed, the command that tunes again (a warm start from this study)
with its estimated cost."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.results.study_file import study_file_words
from tuner.scaffold.box import builtin_name
from tuner.spec.sections import BudgetSpec, HardwareSpec
from tuner.trial import TrialPoint
from tuner.verify.compare import FlagCheck, InferredCheck, Verdict
from tuner.verify.engine_info import EngineInfo

WARM_START_K = 3  # configs of this study the re-tune measures first


def flag_changes(flags: Sequence[FlagCheck], inferred: Sequence[InferredCheck] = ()) -> list[str]:
    """The exported flags the engine runs with other values, one phrase each; an inferred
    bound the export is outside, as `--max-num-seqs ≥ 12 inferred from /metrics`."""
    out = [f"{_spelled(f.flag, f.engine)} (exported {f.exported})" for f in flags if f.differs]
    out += [
        f"--{c.flag} {c.bound.words} inferred from /metrics (exported {c.exported})"
        for c in inferred
        if c.contradicts
    ]
    return out


def _spelled(flag: str, value: object) -> str:
    """`--max-num-seqs 8`; an environment variable as `VLLM_X=1`."""
    return f"{flag}={value}" if flag.startswith("VLLM_") else f"--{flag} {value}"


def _name(flag: str) -> str:
    return flag if flag.startswith("VLLM_") else f"--{flag}"


def platform_changes(info: EngineInfo, hardware: HardwareSpec, point: TrialPoint) -> list[str]:
    """The engine's vLLM version and GPU where they are not the study's, one phrase each."""
    out = []
    study_version = point.record.vllm_version
    if info.version and study_version and info.version != study_version:
        out.append(f"vLLM {info.version} (study: {study_version})")
    gpu = gpu_change(info.gpu, hardware.gpu, hardware.count)
    if gpu:
        out.append(gpu)
    return out


def gpu_change(engine_gpus: str | None, study_gpu: str | None, study_count: int = 1) -> str | None:
    """`GPU <engine's> xN (study: <study's> xM)` when the engine names another GPU than the
    study's hardware.gpu, or fewer of them than the study ran on; None when they agree or
    either is unknown. A driver name the simulator knows is matched by its built-in profile
    (an H100 PCIe is not the study's `h100`, the SXM5 part); only a name it does not know is
    matched by the study's name inside it (a user's own profile)."""
    if not engine_gpus or not study_gpu:
        return None
    names = [line.split(":", 1)[-1].strip() for line in engine_gpus.splitlines() if line.strip()]
    first = names[0] if names else engine_gpus.strip()
    mine = study_gpu.strip().lower()
    known = builtin_name(first)
    same = known == mine if known is not None else mine in first.lower()
    count = max(len(names), 1)
    if same and count >= study_count:  # a box may list more GPUs than the engine uses
        return None
    return f"GPU {first} x{count} (study: {study_gpu} x{study_count})"


def flag_lines(flags: Sequence[FlagCheck], inferred: Sequence[InferredCheck] = ()) -> list[str]:
    """The engine's flags that differ, those bounded from its /metrics, and the exported ones
    it does not expose."""
    lines = [
        f"flag {_name(f.flag)}: engine {f.engine}, exported {f.exported}: DIFFERS"
        for f in flags
        if f.differs
    ]
    same = [f.flag for f in flags if f.engine is not None and not f.differs]
    bounded = {c.flag for c in inferred}
    hidden = [f.flag for f in flags if f.engine is None and f.flag not in bounded]
    if same:
        lines.append(f"flags as exported: {', '.join(same)}")
    lines += [c.line() for c in inferred]
    if hidden:
        lines.append(f"flags the engine does not expose (not checked): {', '.join(hidden)}")
    return lines


def retune_lines(
    study_name: str,
    budget: BudgetSpec,
    mean_engine_s: float | None,
    found: Verdict,
    flags: Sequence[str],
    platform: Sequence[str],
    warm: int = WARM_START_K,
) -> list[str]:
    """What to do when it does not hold. The engine runs other flags than the exported
    command: run that command first (what moved may be the flags). Figures that drifted or
    broke the SLO under the exported flags, or another vLLM or GPU (`platform`): tune again,
    a new study warm-started from this one's best configs (`warm`: how many it has besides
    vLLM's defaults, `tuner.fidelity.warm_start.warm_configs`; with none, a fresh study: a
    warm start from it would be refused), at what this study's trials took."""
    out = []
    if flags:
        export = f"tuner export {study_file_words()}"
        out.append(f"to fix: run the engine with the exported command (`{export}`)")
    if not platform and (flags or found.kind not in ("slower", "breaks-slo")):
        return out
    n = budget.n_trials
    cost = ""
    if mean_engine_s and n:
        total_s = n * mean_engine_s
        total = f"{total_s / 60:.0f} min" if total_s >= 120 else f"{total_s:.0f} s"
        cost = (
            f"; about {total} of engine time ({n} trials at the {mean_engine_s:.0f} s each "
            "of this study's took)"
        )
    if warm < 1:
        run = (
            "`tuner run NEW.yaml` (this study has no feasible config but vLLM's defaults to "
            "warm-start from, and every study measures those first)"
        )
    else:
        k = min(warm, WARM_START_K)
        run = (
            f"`tuner run NEW.yaml --warm-start {study_name} {WARM_START_K}` (its first {k} "
            f"trial{'s' if k > 1 else ''} after vLLM's defaults re-measure this study's best "
            f"config{'s' if k > 1 else ''})"
        )
    return [*out, f"to tune again: copy the study file with a new name: and run {run}{cost}"]


# The traffic's lengths are outside the study's range when a median is off the study's by more
# than this factor, or the longest tenth reaches past the study's longest by more than it.
LENGTH_FACTOR = 1.25


def traffic_change(
    what: str, study: Sequence[int], log: Sequence[int]
) -> tuple[str | None, str | None]:
    """`what` (prompt or output) lengths of the user's request log against the study's
    workload: a line of figures, and a phrase when the log is outside the study's range (see
    LENGTH_FACTOR); (None, None) when either has no lengths."""
    if not study or not log:
        return None, None
    s_med, l_med = _quantile(study, 0.5), _quantile(log, 0.5)
    s_max, l_p90 = max(study), _quantile(log, 0.9)
    line = (
        f"traffic {what} tokens: median {l_med:.0f}, p90 {l_p90:.0f} (your log, {len(log)} "
        f"requests) vs the study's median {s_med:.0f}, longest {s_max}"
    )
    ratio = l_med / s_med if s_med else float("inf")
    if ratio > LENGTH_FACTOR or ratio < 1 / LENGTH_FACTOR or l_p90 > LENGTH_FACTOR * s_max:
        return line, f"{what}s {ratio:.2g}x the study's (median {l_med:.0f} vs {s_med:.0f})"
    return line, None


def _quantile(values: Sequence[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])
