"""A trial's payload for each run's prefix cache: measured hit rate against what its prompts
imply (docs/metrics.md, "Every run cold"), stored under `keys.PREFIX_CACHE_RUNS`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.spec.figures import figure
from tuner.trial.payloads import is_finite


def _float(value: object) -> float | None:
    return float(value) if is_finite(value) else None


# A run whose measured hit rate exceeds what its prompts imply by more than this (a share of
# prompt tokens) was measured warm: something earlier on the engine start left them cached.
WARM_CACHE_MARGIN = 0.05


@dataclass(frozen=True)
class PrefixCacheRun:
    """One run's prefix cache (docs/metrics.md, "Every run cold"): the share of its prompt
    tokens the engine found cached (vLLM's `prefix_cache_hits/queries` counters over the
    measured requests) against the share its own prompts imply
    (`tuner.workload.cold.implied_hit_rate`: what they share among themselves)."""

    hit_rate: float | None  # 0..1, measured; None: the engine exports no such counters
    implied_rate: float  # 0..1, what the run's prompts share
    scenario: str | None = None  # None: the single workload
    rate_rps: float | None = None  # capacity mode: the offered rate of the run
    reset: bool = False  # the engine emptied its prefix cache before the run

    @property
    def warm(self) -> bool:
        """Measured above what its prompts imply: not a cold run."""
        return self.hit_rate is not None and self.hit_rate > self.implied_rate + WARM_CACHE_MARGIN

    def words(self) -> str:
        """ "the run at 8 req/s hit 45 % of prompt tokens (its prompts imply 0 %)"."""
        where = [f"scenario {self.scenario}"] if self.scenario else []
        if self.rate_rps is not None:
            where.append(f"at {figure(self.rate_rps)} req/s")
        run = "the run " + " ".join(where) if where else "the run"
        hit = f"{100 * self.hit_rate:.0f} %" if self.hit_rate is not None else "unknown"
        return (
            f"{run} hit {hit} of prompt tokens (its prompts imply {100 * self.implied_rate:.0f} %)"
        )

    def encode(self) -> dict[str, object]:
        return {
            "hit_rate": self.hit_rate,
            "implied_rate": self.implied_rate,
            "scenario": self.scenario,
            "rate_rps": self.rate_rps,
            "reset": self.reset,
        }

    @classmethod
    def decode(cls, raw: object) -> PrefixCacheRun | None:
        if not isinstance(raw, Mapping) or not is_finite(raw.get("implied_rate")):
            return None
        return cls(
            hit_rate=_float(raw.get("hit_rate")),
            implied_rate=float(raw["implied_rate"]),
            scenario=raw.get("scenario") if isinstance(raw.get("scenario"), str) else None,
            rate_rps=_float(raw.get("rate_rps")),
            reset=bool(raw.get("reset", False)),
        )


def decode_prefix_cache_runs(raw: object) -> tuple[PrefixCacheRun, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(r for r in (PrefixCacheRun.decode(x) for x in raw) if r is not None)
