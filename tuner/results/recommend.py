"""Recommend only what the evidence carries (pure): vLLM's defaults, with the best tuned config
as a candidate, when the verdicts hold it back. When, what each output then shows, `--confirm
K` and its cost, and `export`'s exit code: "Recommend only what the evidence carries" in
docs/results.md.

What callers may assume: the verdicts that hold a config back are
`not-clearly-better-than-baseline` and `fragile`, and they hold it back only if the defaults
were measured and meet the SLO the choice was made under (defaults that break it are no safe
fallback); `export` then exits `HELD_EXIT_CODE` unless `--candidate` asks for the candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.results.study_file import study_file_words
from tuner.results.verdicts import Verdict
from tuner.spec.figures import figure
from tuner.spec.sections import TrialSpec
from tuner.trial import SmallestChange, TrialPoint

HOLDING_KINDS = ("not-clearly-better-than-baseline", "fragile")
HELD_EXIT_CODE = 3  # `tuner export`: the defaults recommended, not the candidate (2: a mistake)
# `--confirm`'s robustness check: the candidate and the baseline, one engine start each, five
# workload runs on each (nominal and four perturbations; docs/robustness.md, point 7)
ROBUSTNESS_RUNS = 5


@dataclass(frozen=True)
class Recommendation:
    """What to deploy: the candidate, or (held) the defaults, and why."""

    candidate: TrialPoint
    defaults: TrialPoint | None  # the baseline trial, measured
    held_by: tuple[Verdict, ...] = ()  # the verdicts that hold the candidate back
    confirm_k: int = 0  # `--confirm K` that re-measures both
    settle: str = ""

    @property
    def held(self) -> bool:
        return bool(self.held_by)

    @property
    def recommended(self) -> TrialPoint:
        return self.defaults if self.held and self.defaults is not None else self.candidate

    def lines(self) -> list[str]:
        """In words: what is recommended, why the candidate is held back, what would settle
        it; nothing when the candidate is recommended."""
        if not self.held or self.defaults is None:
            return []
        why = "; ".join(v.text for v in self.held_by)
        return [
            f"RECOMMENDED: vLLM's defaults (baseline trial {self.defaults.number}), the config "
            "you already run",
            f"the best tuned config, trial {self.candidate.number}, is only a CANDIDATE: {why}",
            self.settle,
            "tuner export --candidate writes the candidate's command anyway (exit 0)",
        ]

    def as_json(self) -> dict[str, object]:
        return {
            "recommended": "defaults" if self.held else "tuned",
            "trial": self.recommended.number,
            "candidate_trial": self.candidate.number,
            "held_by": [v.as_json() for v in self.held_by],
            "confirm_k": self.confirm_k if self.held else None,
            "settle": self.settle or None,
            "text": self.lines(),
        }


def recommendation(
    candidate: TrialPoint,
    found: Sequence[Verdict],
    ranked: Sequence[TrialPoint],
    trial: TrialSpec,
    baseline: TrialPoint | None,
    flags: SmallestChange | None = None,
) -> Recommendation:
    """Hold `candidate` back (recommend the defaults) when a verdict in `found` says it is not
    clearly better than the defaults or is FRAGILE, and the defaults are a candidate of `ranked`
    (the configs the choice was made among, best first). `flags`: the simulator's smallest-
    change check of the candidate, whose dropped flags `--confirm` re-measures (its cost)."""
    held = tuple(v for v in found if v.kind in HOLDING_KINDS)
    order = [p.number for p in ranked]
    if (
        not held
        or baseline is None
        or candidate.number == baseline.number
        or baseline.number not in order
    ):
        return Recommendation(candidate, baseline)
    k = order.index(baseline.number) + 1  # the top K configs hold the candidate and the defaults
    settle = _settle_words(trial, list(ranked[:k]), candidate, baseline, flags)
    return Recommendation(candidate, baseline, held, k, settle)


def _settle_words(
    trial: TrialSpec,
    top: list[TrialPoint],
    candidate: TrialPoint,
    baseline: TrialPoint,
    flags: SmallestChange | None,
) -> str:
    """`tuner run STUDY_FILE --confirm K` and its cost: K × confirm_repeats re-runs at the
    engine time each config took here, the robustness check's two engine starts, and the
    re-measures of the flags the simulator dropped (`SmallestChange.remeasure_starts`, one
    workload run each at the candidate's start-up and workload seconds)."""
    k, repeats = len(top), trial.confirm_repeats
    text = (
        f"to settle it: tuner run {study_file_words()} --confirm {k} re-measures the top {k} "
        f"configs (the candidate and the defaults among them) {repeats} times each, then both "
        f"under perturbed workloads: {k * repeats} engine runs and 2 engine starts of "
        f"{ROBUSTNESS_RUNS} workload runs"
    )
    usable = flags is not None and flags.spec_id == candidate.spec_id
    remeasures = flags.remeasure_starts if flags is not None and usable else 0
    if flags is not None and remeasures:
        dropped = ", ".join(r.flag for r in flags.dropped)
        text += (
            f", then the flags the simulator dropped ({dropped}) reverted: {remeasures} engine "
            f"start{'s' if remeasures > 1 else ''} of 1 workload run"
        )
    runs = [p.record.engine_s for p in top]
    splits = [p.record.engine_split_s for p in (candidate, baseline)]
    if any(s is None for s in runs) or any(s is None for s in splits):
        return text + " (no engine time stored to cost them)"
    seconds = repeats * sum(float(s or 0) for s in runs)
    seconds += sum(start + ROBUSTNESS_RUNS * work for start, work in (s for s in splits if s))
    start_s, work_s = candidate.record.engine_split_s or (0.0, 0.0)
    seconds += remeasures * (start_s + work_s)
    took = "the simulator predicted" if candidate.simulated else "these trials took"
    return text + f", about {figure(seconds / 60, 0)} min of engine time at what {took}"
