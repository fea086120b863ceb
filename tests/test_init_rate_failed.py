"""`tuner init`'s rate (`tuner.scaffold.rate.choose_rate`) when vLLM's defaults fail part-way
on the simulator: a run with no figures meets no SLO, so the rate is refused in one line (a
UserError), not a traceback from reading figures that are not there."""

from __future__ import annotations

import pytest

from tuner.errors import UserError
from tuner.measure.measurement import Measurement
from tuner.scaffold import rate
from tuner.spec.study import load_study_spec
from tuner_testing.cli import REPO


def test_a_baseline_that_failed_part_way_meets_no_slo(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_study_spec(REPO / "studies" / "demo-sim.yaml")
    assert spec.slo_limits()
    failed = Measurement(failure_kind="crashed", failure_reason="died", workload_s=3.0)
    monkeypatch.setattr(rate, "simulated_baseline", lambda _spec: failed)
    with pytest.raises(UserError, match="vLLM's defaults miss p99_ttft_ms"):
        rate.choose_rate(spec, 4.0)
