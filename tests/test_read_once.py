"""The read model decodes each stored trial once: a point's decoded attrs survive
`dataclasses.replace` (not a change of attrs), a finished trial read again from the same
stored object is not decoded again, and one read judges each question once."""

from __future__ import annotations

from dataclasses import replace

from results_fixtures import frozen

from tuner.trial import read, specs
from tuner.trial.reading import FinishedTrials, StudyRead
from tuner.trial.study import StudyRecord


def test_replace_keeps_the_decoded_record_unless_the_attrs_change() -> None:
    p = read(frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0))
    moved = replace(p, score=-1.0)
    assert moved.record is p.record  # carried, not decoded again
    other = replace(p, attrs={**p.attrs, "confirm_of": 7})
    assert other.record.confirm_of == 7 and p.record.confirm_of is None


def test_a_finished_trial_is_read_once_per_stored_object() -> None:
    known = FinishedTrials()
    done, running = frozen(0, score=0.0, p99_ttft_ms=10.0), frozen(1, state="RUNNING")
    assert known.read(done) is known.read(done)
    assert known.read(running) is not known.read(running)  # unfinished: read anew
    again = frozen(0, score=-1.0, p99_ttft_ms=9.0)  # a new object: what it holds now
    assert known.read(again).score == -1.0


def test_one_read_judges_once_and_hands_out_its_own_list(monkeypatch) -> None:
    points = [read(frozen(0, score=0.0, baseline=True, p99_ttft_ms=10.0))]
    study = StudyRead(StudyRecord(), points)
    calls = []
    monkeypatch.setattr(specs, "of_current", lambda record, every: calls.append(1) or every)
    first = study.current()
    first.append(first[0])
    assert study.current() == points and len(calls) == 1
