"""The soak's invariants (`tuner_testing.soak`, used by benchmarks/soak.py) on made-up trials:
each one counts what it names, so the soak's zeros mean something."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from tuner import trial as tr
from tuner.engine.process import start_ticks
from tuner_testing.soak import Stored, count, new_configs, orphans


def _trial(number: int, state: str = "COMPLETE", **record: object) -> tr.TrialPoint:
    attrs = tr.TrialRecord(**record).encode()  # type: ignore[arg-type]
    values = [0.0] if state == "COMPLETE" and "failure_kind" not in record else None
    return tr.read(
        SimpleNamespace(
            number=number,
            state=SimpleNamespace(name=state),
            params={"max-num-seqs": 8 + number},
            user_attrs=attrs,
            system_attrs={},
            values=values,
        )
    )


def _measured(number: int, spec: str, ref: int, **more: object) -> tr.TrialPoint:
    metrics = {"completed": 3.0, "failed": 1.0}
    return _trial(number, spec_id=spec, reference_trial=ref, score=0.0, metrics=metrics, **more)


def _stored(points: list[tr.TrialPoint], **kw: object) -> Stored:
    ended = {p.number for p in points if p.state not in ("RUNNING", "WAITING")}
    defaults = {
        "budgets": {"a": 2, "b": 2},
        "rows": ended,
        "requests": {n: 4 for n in ended},
        "engines": [(n, {}, False) for n in ended],
    }
    return Stored(points, **{**defaults, **kw})  # type: ignore[arg-type]


def test_a_clean_study_counts_zero_everywhere() -> None:
    points = [
        _measured(0, "a", 0, baseline=True),
        _measured(1, "a", 0),
        _measured(2, "b", 2, baseline=True),
        _measured(3, "a", 0, confirm_of=1),  # a re-run is not a new config
    ]
    inv = count(_stored(points))
    assert not any(inv.figures().values()), inv.details
    assert new_configs(points) == {"a": 2, "b": 1}


def test_each_violation_is_counted_and_named() -> None:
    points = [
        _measured(0, "a", 0, baseline=True),
        _measured(1, "b", 0),  # scored against spec a's baseline
        _measured(2, "a", 0, confirm_of=1),  # re-measured spec b's config under spec a
        _measured(3, "a", 0),
        _measured(4, "a", 0),  # spec a: 3 new configs, budget 2
        _trial(5, "RUNNING", spec_id="a"),  # stale, and launched but not ended
        _trial(6, spec_id="a", failure_kind="engine_crashed"),  # failed without a reason
        _trial(7, "COMPLETE", spec_id="a", reused_from=1),  # reuses spec b's result
    ]
    engines = [(n, {}, n == 5) for n in range(7)]
    rows = {0, 1, 2, 3, 6}  # trial 4 lost its row
    inv = count(_stored(points, engines=engines, rows=rows))
    assert inv.scored_across_specs == 1
    assert inv.reruns_across_specs == 1
    assert inv.reused_across_specs == 1
    assert inv.budgets_exceeded == 1
    assert inv.stale_running == 1
    assert inv.engines_marked_running == 1
    assert inv.rows_lost == 3  # 5 launched but RUNNING, 6 without a reason, 4 without its row
    assert any("trial 1 (spec b) is scored against trial 0 (spec a)" in d for d in inv.details)


def test_budgets_are_not_checked_when_runs_may_pass_them() -> None:
    points = [_measured(n, "a", 0, baseline=n == 0) for n in range(4)]
    assert count(_stored(points), check_budgets=False).budgets_exceeded == 0
    assert count(_stored(points)).budgets_exceeded == 1


def test_orphans_are_recorded_engines_still_alive_and_never_a_reused_pid() -> None:
    # its own process group, as an engine leads one
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = subprocess.Popen(sleeper, start_new_session=True)
    try:
        me = {"pid": child.pid, "pgid": child.pid, "start_ticks": start_ticks(child.pid)}
        assert orphans([(3, me, True)]) and "trial 3" in orphans([(3, me, True)])[0]
        reused = {**me, "start_ticks": (me["start_ticks"] or 0) + 1}  # another process's pid
        assert orphans([(3, reused, True)]) == []
    finally:
        child.kill()
        child.wait()
    assert orphans([(3, me, True)]) == []
