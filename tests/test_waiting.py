"""The tests' poll-with-a-deadline: it returns the signal, or fails saying what never came."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tuner_testing.waiting import wait_for


def test_returns_the_first_true_answer() -> None:
    answers = iter([None, 0, [], {"trial": 3}])
    assert wait_for(lambda: next(answers), "a trial", 5, interval_s=0.001) == {"trial": 3}


def test_the_deadline_fails_naming_what_never_happened() -> None:
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"not within 0.2 s: the engine serving"):
        wait_for(lambda: None, "the engine serving", 0.2, interval_s=0.01)
    assert 0.2 <= time.monotonic() - t0 < 5


def test_a_run_that_exits_first_fails_at_once_with_its_stderr() -> None:
    code = "import sys; print('tuner: error: boom', file=sys.stderr); sys.exit(2)"
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)run exited before the engine.*exit 2.*boom"):
        wait_for(lambda: None, "the engine serving", 60, proc=proc)
    assert time.monotonic() - t0 < 30
