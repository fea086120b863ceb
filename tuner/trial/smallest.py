"""The smallest change that keeps a config's gain, as a study stores it (`SmallestChange`).

`tuner run` reverts each flag the best config changes to vLLM's default (the baseline trial's
value), one at a time, scores each on the calibrated simulator (`tuner.fidelity.smallest_check`,
the rule: `tuner.fidelity.smallest`) and stores what it found here, as the study attr
`tuner_smallest:<trial>`. `tuner best`, `tuner export` and the report read it back through
`StudyRecord.smallest_of` and recommend only the flags that carry the gain
(`tuner.results.smallest`). docs/results.md, "The smallest change that keeps the gain".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.spec.values import Scalar

SIMULATED = "SIMULATED"  # a figure of the calibrated simulator
MEASURED = "MEASURED"  # measured on the engine (`tuner run --confirm`)


def _finite(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


@dataclass(frozen=True)
class FlagRevert:
    """One flag the config changes, reverted alone to vLLM's default."""

    flag: str  # the search-space parameter (`block-size`)
    tuned: object  # the config's value
    default: Any  # the baseline's value
    score_change: float | None  # score reverted − the config's score (> 0: worse); None: refused
    carries: bool  # reverting it alone loses the gain beyond noise (or the engine refuses it)
    why: str  # in words: "within noise (...)", "clearly worse on mean TPOT", "refused: ..."

    def encode(self) -> dict[str, object]:
        return {
            "flag": self.flag,
            "tuned": self.tuned,
            "default": self.default,
            "score_change": _finite(self.score_change),
            "carries": self.carries,
            "why": self.why,
        }

    @classmethod
    def decode(cls, raw: object) -> FlagRevert | None:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("flag"), str):
            return None
        return cls(
            flag=raw["flag"],
            tuned=raw.get("tuned"),
            default=raw.get("default"),
            score_change=_finite(raw.get("score_change")),
            carries=bool(raw.get("carries")),
            why=str(raw.get("why") or ""),
        )


@dataclass(frozen=True)
class SmallestChange:
    """Which of a config's changed flags carry its gain over vLLM's defaults."""

    spec_id: str | None  # the spec the check ran under
    checked: bool  # False: `note` says why not (no profile, the simulator refuses the config)
    note: str = ""  # how it was scored (the profile), or why it was not
    reverts: tuple[FlagRevert, ...] = ()  # every changed flag, each reverted alone
    kept: tuple[str, ...] = ()  # the flags the recommended command changes
    params: dict[str, Scalar] = field(default_factory=dict)  # the config, the rest at defaults
    score: float | None = None  # the whole config's score (SIMULATED)
    kept_score: float | None = None  # the recommended config's score (SIMULATED)
    source: str = SIMULATED  # the figures' label: SIMULATED (also a `tuner sim serve` engine's)
    trial: int | None = None  # the trial whose config was checked
    engine: bool = False  # measured on the study's engine (`--confirm`), not the planner

    def applies_to(self, number: int) -> bool:
        """Checked for trial `number`, and some changed flag of it dropped."""
        return self.checked and self.trial == number and bool(self.dropped)

    @property
    def remeasure_starts(self) -> int:
        """Engine starts `tuner run --confirm` spends re-measuring the dropped flags
        (`fidelity.smallest_measured`), one run of the workload each: each dropped flag
        reverted alone, and all of them together when there are several (more only when they
        matter together). The best config itself is not counted: `--confirm`'s latest re-run
        of it stands for it. 0 when nothing was dropped (or not checked)."""
        dropped = len(self.dropped) if self.checked else 0
        return dropped + (dropped > 1)

    @property
    def measured(self) -> bool:
        """Measured on the study's engine (`tuner run --confirm`)."""
        return self.engine

    @property
    def dropped(self) -> tuple[FlagRevert, ...]:
        """The changed flags the recommended command leaves at vLLM's default."""
        return tuple(r for r in self.reverts if r.flag not in self.kept)

    def encode(self) -> dict[str, object]:
        return {
            "spec_id": self.spec_id,
            "checked": self.checked,
            "note": self.note,
            "reverts": [r.encode() for r in self.reverts],
            "kept": list(self.kept),
            "params": dict(self.params),
            "score": _finite(self.score),
            "kept_score": _finite(self.kept_score),
            "source": self.source,
            "trial": self.trial,
            "engine": self.engine,
        }

    @classmethod
    def decode(cls, raw: object) -> SmallestChange | None:
        if not isinstance(raw, Mapping):
            return None
        stored = raw.get("reverts")
        reverts: list[Any] = stored if isinstance(stored, list) else []
        found = [FlagRevert.decode(r) for r in reverts]
        params = raw.get("params")
        return cls(
            spec_id=raw.get("spec_id"),
            checked=bool(raw.get("checked")),
            note=str(raw.get("note") or ""),
            reverts=tuple(r for r in found if r is not None),
            kept=tuple(str(f) for f in raw.get("kept") or ()),
            params=dict(params) if isinstance(params, Mapping) else {},
            score=_finite(raw.get("score")),
            kept_score=_finite(raw.get("kept_score")),
            source=str(raw.get("source") or SIMULATED),
            trial=raw.get("trial") if isinstance(raw.get("trial"), int) else None,
            engine=raw.get("engine") is True,
        )
