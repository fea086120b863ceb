"""The `Section` protocol: one block of what people read about a stored study, in `tuner best`
(lines of words) and in the HTML report (a `Block`: a heading, a note and lines, which the
report's one template for a block places).

`tuner best` (`tuner.results.best`) and the report (`tuner.results.report.page`) iterate over
`tuner.results.sections.SECTIONS`, as GuideLLM's report iterates over its benchmarks' outputs:
neither names a block. A new block (the words of a new check of the best config, say) is one
module with a class that implements `Section` and one line in `SECTIONS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tuner.measure.mode_words import ModeWords, words_of
from tuner.measure.modes import Objective
from tuner.results.selection import Selection
from tuner.spec.parts import Measuring
from tuner.trial import StudyRecord, TrialPoint


@dataclass(frozen=True)
class Shown:
    """What every section reads, and nothing else: the trials of the current spec, the spec
    the chosen trial ran under (the study's when none is chosen), the study's objective (built
    once by the caller, `measure.mixes.objective_of`), the study's attrs (the
    checks' records: `StudyRecord.checked`), and the choice judged once for every output
    (`selection.judge`; None where there is none: the report of a study without a feasible
    trial)."""

    points: Sequence[TrialPoint]
    spec: Measuring
    objective: Objective
    study: StudyRecord | None = None
    choice: Selection | None = None

    def mode_words(self) -> ModeWords:
        """The objective's words (`measure.mode_words`)."""
        return words_of(self.objective)


@dataclass(frozen=True)
class Block:
    """A section's block in the report: its heading, the note under it, its lines (plain
    words: the report escapes them)."""

    title: str
    note: str
    lines: tuple[str, ...]


class Section(Protocol):
    """One block of `tuner best` and of the report. Contract:

    - `name`: unique among `SECTIONS`;
    - `lines(shown)`: its lines in `tuner best`, in words, each printed after "# " (a comment
      above the command to run); [] when it has nothing to say, or no `shown.choice`;
    - `report(shown)`: its block in the report; None when it is not in the report or has
      nothing to say;
    - pure: it reads only `shown` (no storage, no runner, no simulator: the results' own
      import-linter contracts), and says SIMULATED beside any simulated figure.
    """

    name: str

    def lines(self, shown: Shown) -> list[str]: ...

    def report(self, shown: Shown) -> Block | None: ...
