"""Which of a config's changed flags carry its gain over vLLM's defaults (pure).

A tuned config changes several flags; often only one or two of them made the difference, and
the others moved with the sampler's noise (issue 34: the demo's best moves
`gpu-memory-utilization` and `block-size` along with `max-num-batched-tokens`, and only the
last one carries the gain; a smaller memory fraction costs KV cache in production). So before
the tuner recommends a config, it reverts each changed flag to vLLM's default (the baseline
trial's value) one at a time and scores that config. A flag **carries the gain** when reverting
it loses it: the reverted config scores worse *and* the config is clearly better than it by the
rule the verdicts use (`tuner.trial.clearly.ClearlyBetter`: the 95 % interval of the difference
on a weighted metric, or the capacity search's resolution), or the reverted config breaks an
SLO the config meets, or the engine refuses it. Every other flag is dropped.

When the config is not clearly better than vLLM's defaults by that rule, there is no gain to
keep and nothing is decided: every changed flag stays (the verdicts say how sure the gain is).
Reverting one flag at a time misses interactions, so the dropped flags are then reverted all
together; if that config loses the gain, the dropped flag whose revert cost the most is put back,
one at a time, until it does not (at worst: the config as it was). The scoring (the calibrated
simulator, `tuner.fidelity.smallest_check`) and the rule come in as functions.

A flag the scorer cannot see (`blind`: one the simulator does not model, an environment
variable) scores "no worse" reverted whatever it does, so it is never judged there: it is
judged on the study's own measurements (`measured`: the config and the config with that flag
reverted, each as a trial of the study measured it), and kept when the study has none
(issue 50 item 3: an unmodelled flag carrying most of a measured gain was dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TypeVar

from tuner.spec.values import Params, Scalar
from tuner.trial.smallest import MEASURED, FlagRevert, SmallestChange

S = TypeVar("S")  # a scored config, as the caller scores it
# (the config, another) -> (the other loses the config's gain?, why in words)
Loses = Callable[[S, S], tuple[bool, str]]
UNJUDGED = (
    "not judged: the simulator does not model it, and the study never measured this config "
    "with it reverted, so it stays"
)


def changed_flags(params: Params, defaults: Params) -> list[str]:
    """The flags `params` sets to something other than `defaults` (in `params`' order); a flag
    the defaults do not name cannot be reverted, so it is not listed (it stays)."""
    return [f for f, v in params.items() if f in defaults and v != defaults[f]]


def reverted(params: Params, defaults: Params, flags: Sequence[str]) -> dict[str, Scalar]:
    """`params` with `flags` set back to their defaults."""
    return {f: (defaults[f] if f in flags else v) for f, v in params.items()}


def smallest_change(
    params: Params,
    defaults: Params,
    score: Callable[[Params], S | None],
    loses: Loses[S],
    score_of: Callable[[S], float | None],
    only: Sequence[str] | None = None,
    blind: Collection[str] = (),
    measured: Callable[[Params], S | None] = lambda _: None,
) -> SmallestChange | None:
    """The flags of `params` that carry its gain, each changed flag's revert, and the config to
    recommend. `score(config)`: the scored config, None when the engine refuses it. None when
    `params` itself cannot be scored; not `checked` when its gain is itself within noise.
    `only`: try reverting these changed flags alone (the others stay, and its gain over the
    defaults is taken as shown). `blind`: flags `score` cannot see, each judged on
    `measured(config)` (the study's own trial of that config, None: never measured) of the
    config and of it reverted alone, else kept (`UNJUDGED`)."""
    full = score(dict(params))
    if full is None:
        return None
    changed = changed_flags(params, defaults)
    tried = [f for f in changed if only is None or f in only]
    nothing = score(reverted(params, defaults, changed)) if only is None else None
    if nothing is not None and not loses(full, nothing)[0]:  # no gain to keep: keep them all
        gain = _difference(score_of(full), score_of(nothing))
        why = f"its gain over vLLM's defaults (score {gain:+.3f}) is itself "
        why += loses(full, nothing)[1]
        return SmallestChange(None, False, f"not decided: {why}; every changed flag kept")
    reverts, cost = [], {}
    for flag in tried:
        config, unseen = reverted(params, defaults, [flag]), flag in blind
        # a flag the scorer cannot see: judged on the study's own trials, or kept
        mine = measured(dict(params)) if unseen else full
        other = measured(config) if unseen else score(config)
        source = MEASURED if unseen else ""
        change = None
        if mine is None or other is None:
            carries = True
            why = UNJUDGED if unseen else "the engine refuses the config with it reverted"
        else:
            carries, why = loses(mine, other)
            change = _difference(score_of(other), score_of(mine))
        cost[flag] = change if change is not None else float("inf")
        revert = FlagRevert(flag, params[flag], defaults[flag], change, carries, why, source)
        reverts.append(revert)
    dropped = sorted(
        (r.flag for r in reverts if not r.carries), key=lambda f: cost[f], reverse=True
    )
    kept_config = full
    while dropped:
        other = score(reverted(params, defaults, dropped))
        if other is not None and not loses(full, other)[0]:
            kept_config = other
            break
        dropped.pop(0)  # put back the one whose revert cost the most
    kept = tuple(f for f in changed if f not in dropped)
    return SmallestChange(
        spec_id=None,
        checked=True,
        reverts=tuple(reverts),
        kept=kept,
        params=reverted(params, defaults, dropped),
        score=score_of(full),
        kept_score=score_of(kept_config),
    )


def _difference(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None
