"""Hosts' baselines side by side; a host whose baseline differs beyond the noise is flagged."""

from __future__ import annotations

from tuner.results.report.page import hosts_section
from tuner.trial import TrialPoint
from tuner.trial.hosts import baseline_table, differences


def _baseline(number: int, host: str, tput: float, ci: tuple[float, float]) -> TrialPoint:
    return TrialPoint(
        number=number,
        state="COMPLETE",
        params={},
        metrics={"output_throughput": tput, "mean_ttft_ms": 50.0},
        status="feasible",
        baseline=True,
        attrs={"output_throughput_ci": list(ci), "mean_ttft_ms_ci": [45.0, 55.0]},
        host=host,
    )


def test_overlapping_baselines_are_noise_and_separate_ones_are_flagged() -> None:
    a = _baseline(0, "box-a", 800.0, (780.0, 820.0))
    close = _baseline(1, "box-b", 790.0, (770.0, 810.0))
    assert differences([a, close]) == []
    far = _baseline(1, "box-b", 600.0, (590.0, 610.0))
    (warning,) = differences([a, far])
    assert "box-a" in warning and "box-b" in warning and "output_throughput 800" in warning
    assert "mean_ttft_ms" not in warning  # its intervals overlap
    lines = baseline_table([a, far])
    assert len(lines) == 3 and lines[1].startswith("  box-a: trial 0")
    html = hosts_section([a, far])
    assert "Baselines by host" in html and "box-b" in html and "beyond the noise" in html
    assert hosts_section([a]) == ""  # one host: nothing to compare


def test_a_host_s_first_measured_baseline_is_its_own() -> None:
    later = _baseline(5, "box-a", 100.0, (90.0, 110.0))
    first = _baseline(2, "box-a", 800.0, (780.0, 820.0))
    lines = baseline_table([later, first])
    assert len(lines) == 2 and "trial 2" in lines[1]
