"""A trial's payload for each run's prefix cache: measured hit rate against what its prompts
imply (docs/metrics.md, "Every run cold"), stored under `keys.PREFIX_CACHE_RUNS`."""

from __future__ import annotations

from pydantic.dataclasses import dataclass

from tuner.spec.figures import figure
from tuner.trial.stored import Figure, Finite, Stored

# A run whose measured hit rate exceeds what its prompts imply by more than this (a share of
# prompt tokens) was measured warm: something earlier on the engine start left them cached.
WARM_CACHE_MARGIN = 0.05


@dataclass(frozen=True, kw_only=True)
class PrefixCacheRun(Stored):
    """One run's prefix cache (docs/metrics.md, "Every run cold"): the share of its prompt
    tokens the engine found cached (vLLM's `prefix_cache_hits/queries` counters over the
    measured requests) against the share its own prompts imply
    (`tuner.workload.cold.implied_hit_rate`: what they share among themselves)."""

    hit_rate: Figure = None  # 0..1, measured; None: the engine exports no such counters
    implied_rate: Finite  # 0..1, what the run's prompts share
    scenario: str | None = None  # None: the single workload
    rate_rps: Figure = None  # capacity mode: the offered rate of the run
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
