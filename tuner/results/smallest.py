"""The smallest change that keeps the gain, as `tuner best`, `tuner export` and the report say it.

The flags that carry the best config's gain were stored by `tuner run` (a
`tuner.trial.smallest.SmallestChange`, from `tuner.fidelity.smallest_check` on the calibrated
simulator; the method is in docs/results.md: "The smallest change that keeps the gain"). The
command these outputs recommend changes only those flags (`shipped_params`); these lines say
which flags were dropped, why, and what the simulator predicts for the smaller command. Every
figure here is the simulator's and says SIMULATED.
"""

from __future__ import annotations

from tuner.spec.figures import figure
from tuner.spec.values import Scalar
from tuner.trial import FlagRevert, SmallestChange, TrialPoint


def shipped_params(change: SmallestChange | None, point: TrialPoint) -> dict[str, Scalar]:
    """The flags to recommend for `point`: its own, less those that do not carry its gain."""
    if change is None or not change.applies_to(point.number):
        return dict(point.params)
    return dict(change.params)


def _flag(r: FlagRevert) -> str:
    return f"--{r.flag} {figure(r.tuned)} → {figure(r.default)}"


def _revert_words(r: FlagRevert, source: str) -> str:
    if r.score_change is None:
        return r.why
    change = figure(r.score_change, 3, sign=True)
    return f"reverting it changes the {r.source or source} score by {change}, {r.why}"


def smallest_lines(change: SmallestChange | None, point: TrialPoint) -> list[str]:
    """What was dropped from `point`'s command and why, what carries its gain; nothing when its
    flags were not checked (an older study: a `tuner run` of it checks them)."""
    if change is None or change.trial != point.number:
        return []
    if not change.checked:  # say which: all of them, and why none was dropped
        why = change.note.removesuffix("; every changed flag kept")
        return [
            f"which changed flags carry the gain: not known ({why}), so the command keeps "
            f"every flag trial {point.number} changes"
        ]
    src = change.source
    if not change.reverts:
        return []
    kept = [r for r in change.reverts if r.flag in change.kept]
    if change.dropped:
        flags = " ".join(f"--{f} {figure(change.params.get(f))}" for f in change.kept)
        flags = flags or "no flag"
        head = (
            f"the smallest change that keeps the gain ({src}, {change.note}): the command "
            f"changes only {flags}, the others are at vLLM's defaults as the baseline ran them; "
            f"trial {point.number}'s figures are with every flag it changed (tuner export "
            f"--trial {point.number} writes them all)"
        )
    else:
        head = f"every flag trial {point.number} changes carries its gain ({src}, {change.note})"
    lines = [head]
    for r in kept:
        alone = "" if r.carries else " (alone it is not, but reverting it with the dropped "
        alone += "" if r.carries else "flags loses the gain)"
        kept_words = f"--{r.flag} {figure(r.tuned)} (vLLM's default: {figure(r.default)})"
        lines.append(f"kept {kept_words}: {_revert_words(r, src)}{alone}")
    untried = [f for f in change.kept if f not in {r.flag for r in change.reverts}]
    if untried:  # `--confirm` re-measures only what the simulator dropped
        lines.append(f"kept {', '.join(untried)}: not re-measured, the simulator kept them")
    lines += [f"dropped {_flag(r)}: {_revert_words(r, src)}" for r in change.dropped]
    if change.dropped:
        lines.append(
            f"{src} score of the command: {figure(change.kept_score, 3, sign=True)} "
            f"(with every flag: {figure(change.score, 3, sign=True)})"
        )
    return lines
