"""The closest valid name to a mistyped one, for "unknown key / metric / flag / file" errors."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, options: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The option nearest to `name` (difflib's ratio, at least `cutoff`), or None."""
    found = difflib.get_close_matches(name, sorted(set(options)), n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(name: str, options: Iterable[str], *, quote: str = "'") -> str:
    """` (did you mean 'x'?)` for the option nearest to `name`, or "" when none is near."""
    found = closest(name, options)
    return f" (did you mean {quote}{found}{quote}?)" if found else ""
