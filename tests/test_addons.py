"""The add-on registries (docs/architecture.md, "Add-ons"): a new end-of-run check is one object
and one line in `CHECKS`, a new block of the report one line in `SECTIONS`; the shipped
checks keep the names their records were always stored under. In process, no study run."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
from pydantic.dataclasses import dataclass

from tuner.errors import RunInterrupted
from tuner.fidelity import checks
from tuner.fidelity.best_check import CheckInput
from tuner.measure.stored import Stored
from tuner.results import sections
from tuner.results.section import Block, Shown
from tuner.run import session
from tuner.run.progress import RunView
from tuner.run.signals import Interrupted
from tuner.run.summary import RunSummary
from tuner.trial import RobustnessRecord, SmallestChange, StudyRecord, write_checked


@dataclass(frozen=True)
class Doubled(Stored):
    """A toy check's record: does the gain survive twice the prompts?"""

    spec_id: str | None = None
    kept: bool = False


class DoubledPrompts:
    """A toy check, as a new module would hold it."""

    name = "doubled"
    prefix = "tuner_doubled:"
    record: type[Stored] = Doubled
    on_engine = False
    during = "the doubled-prompts check"

    def wanted(self, given: CheckInput) -> bool:
        return given.runner.planned

    def run(self, given: CheckInput) -> Doubled:
        record = Doubled("s1", kept=True)
        write_checked(given.study, self.prefix, 7, record)
        return record


class _Study:
    def __init__(self) -> None:
        self.user_attrs: dict[str, object] = {}

    def set_user_attr(self, key: str, value: object) -> None:
        self.user_attrs[key] = value


def _run_checks(runner: object) -> tuple[session.RunResult, _Study]:
    study = _Study()
    result = session.RunResult(RunSummary("s"), study, [])  # type: ignore[arg-type]
    session._check_best(result, None, runner, session.RunOptions(), RunView())  # type: ignore[arg-type]
    return result, study


def test_a_new_check_is_one_line_and_its_record_reads_back(monkeypatch) -> None:
    monkeypatch.setattr(checks, "CHECKS", (DoubledPrompts(),))
    result, study = _run_checks(SimpleNamespace(planned=True))
    assert result.checks == {"doubled": Doubled("s1", kept=True)}
    assert study.user_attrs == {"tuner_doubled:7": {"spec_id": "s1", "kept": True}}
    assert StudyRecord.of(study).checked("tuner_doubled:", Doubled) == {7: Doubled("s1", True)}
    # not wanted (here: not the planner): not run, nothing stored
    result, study = _run_checks(SimpleNamespace(planned=False))
    assert result.checks == {} and study.user_attrs == {}


def test_a_check_on_the_engine_is_interrupted_as_a_trial(monkeypatch) -> None:
    """Its signals are handled as a trial's: the engine closed, RunInterrupted names it."""

    class OnEngine(DoubledPrompts):
        on_engine = True

        def run(self, given: CheckInput) -> Doubled:
            raise Interrupted(signal.SIGTERM)

    closed: list[bool] = []
    runner = SimpleNamespace(planned=True, kill=lambda: None, close=lambda: closed.append(True))
    monkeypatch.setattr(checks, "CHECKS", (OnEngine(),))
    with pytest.raises(RunInterrupted, match="the doubled-prompts check of trial None"):
        _run_checks(runner)
    assert closed == [True]


def test_the_shipped_checks_read_what_earlier_versions_stored() -> None:
    """Each shipped check declares the prefix its record was always written under, and its
    record read by that prefix is the one the typed fields read."""
    assert [(c.name, c.prefix, c.record) for c in checks.CHECKS] == [
        ("robustness", "tuner_robustness:", RobustnessRecord),
        ("smallest", "tuner_smallest:", SmallestChange),
        ("robustness_measured", "tuner_robustness_measured:", RobustnessRecord),
        ("smallest_measured", "tuner_smallest_measured:", SmallestChange),
    ]
    attrs = {  # as an earlier version wrote them (docs/storage.md)
        "tuner_robustness:3": {"spec_id": "a", "fragile": False, "verdict": "robust", "gain": 0.1},
        "tuner_robustness_measured:3": {"spec_id": "a", "fragile": True, "runs": {}},
        "tuner_smallest:3": {"spec_id": "a", "trial": 3, "checked": True, "note": "p"},
        "tuner_robustness:x": {"spec_id": "a"},  # not a trial number: left out
    }
    study = StudyRecord.decode(attrs)
    by_name = {c.name: study.checked(c.prefix, c.record) for c in checks.CHECKS}
    assert by_name == {
        "robustness": study.robustness,
        "robustness_measured": study.robustness_measured,
        "smallest": study.smallest,
        "smallest_measured": {},
    }
    assert by_name["robustness"][3].verdict == "robust" and by_name["smallest"][3].trial == 3


def test_a_new_block_of_the_report_is_one_line(monkeypatch) -> None:
    from tuner.results.report.page import blocks_section

    class Doubts:
        name = "doubts"

        def lines(self, shown: Shown) -> list[str]:
            return ["one"]

        def report(self, shown: Shown) -> Block | None:
            return Block("Doubts", "what <may> be wrong", ("a & b",))

    shown = Shown([], None, None)  # type: ignore[arg-type]
    assert blocks_section(shown) == ""  # no trial: no block of the shipped ones has a word
    monkeypatch.setattr(sections, "SECTIONS", (*sections.SECTIONS, Doubts()))
    monkeypatch.setattr("tuner.results.report.page.SECTIONS", sections.SECTIONS)
    html = str(blocks_section(shown))
    assert "<h2>Doubts</h2>" in html and "what &lt;may&gt; be wrong" in html
    assert "<li>a &amp; b</li>" in html
